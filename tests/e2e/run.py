#!/usr/bin/env python3
"""Real agents through cachet, end to end (run by scripts/agents-e2e.sh).

Each client runs two turns in a scratch folder with its own HOME, configured with the blocks
of the book's "Point an agent at cachet" page (docs/src/agents.md), against `cachet serve` in front of
`cachet emulate --tool-calls first --tool-steps 2`. Capturing shims sit on both sides of
cachet, so the bytes that crossed it can be compared. Each client runs once without a
policy, then once with each shipped policy that matches it.

Every assertion prints `ok:` or `FAIL:` with its figures; the run goes on after a failure
and ends with `N passed, M failed`.

Usage: run.py --cachet BIN --bin-dir NODE_BIN [--only NAME,...] [--keep DIR]
"""

import argparse
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from shim import Shim  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EMULATOR_TEXT = "Hello from the cachet emulator. This reply is deterministic."
CLIENT_URL = "http://127.0.0.1:8787"
TOOL_STEPS = 2
PROMPTS = ["List the files in this folder.", "Now look at them again."]
# Generation paths, with the (provider, endpoint) labels policies match on.
ROUTES = {"/v1/messages": ({"anthropic"}, {"messages"}),
          "/v1/chat/completions": ({"openai"}, {"chat"}),
          "/v1/responses": ({"openai"}, {"responses"})}
GENERATION = set(ROUTES)
# Dummy credentials: nothing here reaches a provider.
ANTHROPIC_KEY = "sk-ant-api03-e2e-dummy-key"
OAUTH_TOKEN = "sk-ant-oat01-e2e-dummy-token"
OPENAI_KEY = "sk-e2e-dummy-key"
CHATGPT_ACCOUNT = "acc-e2e-dummy"
# A team's cachet: it holds both providers' keys and asks every client for its cachet key.
TEAM_KEY = "ck-e2e-team-key"
HELD_ANTHROPIC = "sk-ant-api03-e2e-held-by-cachet"
HELD_OPENAI = "sk-e2e-held-by-cachet"
KEYED_CONFIG = """[upstream]
anthropic_api_key_env = "CACHET_E2E_HELD_ANTHROPIC"
openai_api_key_env = "CACHET_E2E_HELD_OPENAI"

[[server.client_keys]]
name = "team"
key_env = "CACHET_E2E_TEAM_KEY"
"""
KEYED_ENV = {"CACHET_E2E_HELD_ANTHROPIC": HELD_ANTHROPIC, "CACHET_E2E_HELD_OPENAI": HELD_OPENAI,
             "CACHET_E2E_TEAM_KEY": TEAM_KEY}
# A runaway tool loop is stopped here instead of at the invocation's time limit.
MAX_REQUESTS_PER_TURN = 40
TURN_TIMEOUT = 180


# ---------------------------------------------------------------- reporting

class Report:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print(f"ok: {what}")
        else:
            self.failed.append(what)
            print(f"FAIL: {what}" + (f"\n      {detail}" if detail else ""))
        sys.stdout.flush()
        return cond


# ---------------------------------------------------------------- client configuration

# The book's page of client configurations: every block tagged `env=NAME` or `file=PATH`
# is run here as written (the README repeats some of them; the docs test holds the copies
# to these bytes).
CLIENT_PAGE = os.path.join(ROOT, "docs", "src", "agents.md")
CLIENT_BLOCKS = [("env", "claude-code"), ("env", "sdk"), ("file", "~/.codex/config.toml"),
                 ("file", "~/.codex/config.toml#chatgpt"),
                 ("file", "~/.codex/config.toml#chatgpt-keyed"),
                 ("file", "~/.pi/agent/models.json")]


def client_blocks():
    """The fenced client blocks of the book's agents page: {("file"|"env", name): text}."""
    text = open(CLIENT_PAGE).read()
    blocks = {}
    for m in re.finditer(r"```\w+ (file|env)=(\S+)\n(.*?)```", text, re.S):
        blocks[(m.group(1), m.group(2))] = m.group(3)
    missing = [f"{kind}={name}" for kind, name in CLIENT_BLOCKS if (kind, name) not in blocks]
    if missing:
        raise SystemExit(f"{CLIENT_PAGE}: no block {', '.join(missing)}")
    return blocks


def client_env(blocks, name, base):
    env = {}
    for line in blocks[("env", name)].splitlines():
        m = re.match(r"export (\w+)=(\S+)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2).replace(CLIENT_URL, base)
    return env


def write_client_file(blocks, name, home, base):
    """Write the client block `name` (a path; `#variant` tells two blocks for one file
    apart) under `home`."""
    path = os.path.join(home, name.split("#")[0].replace("~/", ""))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(blocks[("file", name)].replace(CLIENT_URL, base))


# ---------------------------------------------------------------- session identity (the book's rules)

def expected_session(headers, body):
    """(source, id) by the "Which session a request belongs to" table (docs/src/sessions.md)."""
    h = {k.lower(): v for k, v in headers}
    if h.get("x-cachet-session"):
        return "header", h["x-cachet-session"]
    if h.get("x-claude-code-session-id"):
        return "claude_code_header", h["x-claude-code-session-id"]
    user_id = (body.get("metadata") or {}).get("user_id") if isinstance(body, dict) else None
    if isinstance(user_id, str):
        try:
            sid = json.loads(user_id).get("session_id")
        except (ValueError, AttributeError):
            sid = user_id.rsplit("_session_", 1)[1] if "_session_" in user_id else None
        if sid:
            return "claude_code_metadata", sid
    if isinstance(body, dict) and body.get("prompt_cache_key"):
        return "prompt_cache_key", body["prompt_cache_key"]
    for name in ("session-id", "session_id"):
        if h.get(name):
            return "codex_header", h[name]
    return "fingerprint", None


# ---------------------------------------------------------------- reading answers

def json_documents(body):
    """Every JSON document of an answer: the whole body, or each SSE `data:` line."""
    try:
        return [json.loads(body)]
    except ValueError:
        pass
    docs = []
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            try:
                docs.append(json.loads(line[5:].strip()))
            except ValueError:
                pass
    return docs


def cache_read(body):
    """Tokens read from cache, from an Anthropic, Chat or Responses answer (streamed or not)."""
    best = 0

    def walk(v):
        nonlocal best
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("cache_read_input_tokens", "cached_tokens") and isinstance(x, int):
                    best = max(best, x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for doc in json_documents(body):
        walk(doc)
    return best


def canonical(v):
    """Canonical JSON without cache markers, as the session store keys content."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(y) for k, y in x.items() if k != "cache_control"}
        if isinstance(x, list):
            return [strip(y) for y in x]
        return x
    return json.dumps(strip(v), sort_keys=True, separators=(",", ":"))


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------- processes

def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def accepted_credentials():
    """What the emulator serves: each client's own key or token, and the keys cachet holds.
    Never TEAM_KEY: that is cachet's, and must not reach the provider."""
    return [ANTHROPIC_KEY, OAUTH_TOKEN, OPENAI_KEY, CHATGPT_TOKEN, HELD_ANTHROPIC, HELD_OPENAI]


class Stack:
    """emulator <- back shim <- cachet serve <- front shim, all on loopback ports."""

    def __init__(self, cachet, workdir, policies, config=None, env=None):
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.procs = []
        self.env = env or {}
        # As strict as a provider: only the clients' own credentials and the keys cachet
        # holds are served, so a block that sends the wrong key (or a cachet key leaking
        # upstream) fails with the provider's 401.
        keys = []
        for k in accepted_credentials():
            keys += ["--api-key", k]
        emu = self._start([cachet, "emulate", "--listen", "127.0.0.1:0", "--tool-calls", "first",
                           "--tool-steps", str(TOOL_STEPS)] + keys, "emulate.log")
        self.emulator_url = re.search(r"http://\S+", emu.stdout.readline()).group(0)
        self.back = Shim(self.emulator_url)
        args = [cachet, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                "--anthropic-upstream", self.back.url, "--openai-upstream", self.back.url,
                "--chatgpt-upstream", self.back.url,
                "--store", os.path.join(workdir, "store"), "--record", os.path.join(workdir, "record")]
        for p in policies:
            args += ["--policy", p]
        if config:
            with open(os.path.join(workdir, "cachet.toml"), "w") as f:
                f.write(config)
            args += ["--config", os.path.join(workdir, "cachet.toml")]
        serve = self._start(args, "serve.log")
        line = serve.stdout.readline()
        m = re.search(r"http://(\S+) \(admin: http://(\S+)/metrics\)", line)
        if not m:
            raise RuntimeError(f"cachet serve did not start: {line!r}; see {workdir}/serve.log")
        self.cachet_url = f"http://{m.group(1)}"
        self.admin_url = f"http://{m.group(2)}"
        self.front = Shim(self.cachet_url)

    def _start(self, args, log):
        err = open(os.path.join(self.dir, log), "w")
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, cwd=self.dir,
                             env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1", **self.env})
        self.procs.append(p)
        return p

    def admin(self, path):
        return json.loads(http_get(self.admin_url + path))

    def metrics(self):
        return http_get(self.admin_url + "/metrics").decode()

    def stop(self):
        self.front.stop()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.back.stop()


# ---------------------------------------------------------------- clients

class Client:
    """One client: how it is configured and run, and what identifies its session."""

    # cachet's configuration for this client's runs (None: the defaults), and the
    # environment it names.
    serve_config = None
    serve_env = None

    def __init__(self, name, providers, endpoints, id_source, one_session=True):
        self.name = name
        self.providers = providers
        self.endpoints = endpoints
        self.id_source = id_source
        self.one_session = one_session

    def matches(self, policy):
        return policy_matches(policy, self.providers, self.endpoints)

    def turn_count(self):
        return len(PROMPTS)

    def shows_text(self, turn):
        """Whether the turn prints the model's answer (a compaction prints nothing)."""
        return True


def policy_matches(policy, providers, endpoints):
    m = policy.get("match", {})
    return bool((not m.get("provider") or set(m["provider"]) & providers) and
                (not m.get("endpoint") or set(m["endpoint"]) & endpoints))


class Pi(Client):
    def __init__(self, provider, model, api_label, family, endpoint, id_source):
        super().__init__(f"pi-{api_label}", {family}, {endpoint}, id_source)
        self.provider, self.model = provider, model

    def setup(self, ctx):
        write_client_file(ctx.blocks, "~/.pi/agent/models.json", ctx.home, ctx.base)

    def env(self, ctx):
        return {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY,
                "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}

    def argv(self, ctx, turn):
        cont = ["-c"] if turn > 0 else []
        return [ctx.bin("pi"), *cont, "-p", "--provider", self.provider, "--model", self.model, PROMPTS[turn]]


class ClaudeCode(Client):
    def __init__(self, subscription):
        super().__init__("claude-code-subscription" if subscription else "claude-code",
                         {"anthropic"}, {"messages"}, "claude_code_header")
        self.subscription = subscription

    def setup(self, ctx):
        pass

    def env(self, ctx):
        env = client_env(ctx.blocks, "claude-code", ctx.base)
        env.update({"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
        if self.subscription:
            env["ANTHROPIC_AUTH_TOKEN"] = OAUTH_TOKEN
        else:
            env["ANTHROPIC_API_KEY"] = ANTHROPIC_KEY
        return env

    def argv(self, ctx, turn):
        cont = ["-c"] if turn > 0 else []
        return [ctx.bin("claude"), *cont, "-p", PROMPTS[turn]]


class Codex(Client):
    def __init__(self):
        super().__init__("codex", {"openai"}, {"responses"}, "prompt_cache_key")

    def setup(self, ctx):
        write_client_file(ctx.blocks, "~/.codex/config.toml", ctx.home, ctx.base)

    def env(self, ctx):
        return {"OPENAI_API_KEY": OPENAI_KEY}

    def argv(self, ctx, turn):
        resume = ["resume", "--last"] if turn > 0 else []
        return [ctx.bin("codex"), "exec", "--skip-git-repo-check", *resume, PROMPTS[turn]]


class CodexFast(Codex):
    """Codex with its Fast speed on (`service_tier = "fast"` in its config), which it sends as
    `service_tier: "priority"` on a model its catalog offers Fast for (GPT-6 Sol; not the
    agents page's gpt-5.1-codex): every answer is read as served in fast mode, and priced so. Its
    policy runs are Codex's own, so it has none."""

    fast = True

    def __init__(self):
        Client.__init__(self, "codex-fast", {"openai"}, {"responses"}, "prompt_cache_key")

    def setup(self, ctx):
        super().setup(ctx)
        config = os.path.join(ctx.home, ".codex", "config.toml")
        with open(config) as f:
            text = f.read()
        text = re.sub(r'^model = ".*"$', 'model = "gpt-6-sol"', text, count=1, flags=re.M)
        # A top-level key: first, so that it belongs to no table of the agents page's block.
        with open(config, "w") as f:
            f.write('service_tier = "fast"\n' + text)


class CodexChatGpt(Codex):
    """Codex signed in with ChatGPT: its own provider, only the base URL changed. It sends
    each Responses request compressed with zstd, and its access token with the account
    header (subscription traffic). The sign-in is a dummy one nothing checks."""

    websocket_first = True
    config_block = "~/.codex/config.toml#chatgpt"

    def __init__(self, name="codex-chatgpt"):
        Client.__init__(self, name, {"openai"}, {"responses"}, "prompt_cache_key")

    def setup(self, ctx):
        write_client_file(ctx.blocks, self.config_block, ctx.home, ctx.base)
        # Signed in with ChatGPT, Codex also calls ChatGPT's own services (apps, plugins,
        # analytics) at `chatgpt_base_url`. This namespace has no network, where each of those
        # waits out a DNS time-out; cachet answers them at once (404, no route).
        # A top-level key: first, so that it belongs to no table of the agents page's block.
        config = os.path.join(ctx.home, ".codex", "config.toml")
        with open(config) as f:
            text = f.read()
        with open(config, "w") as f:
            f.write(f'chatgpt_base_url = "{ctx.base}/backend-api/"\n' + text)
        with open(os.path.join(ctx.home, ".codex", "auth.json"), "w") as f:
            json.dump(chatgpt_auth(), f)

    def env(self, ctx):
        return {}


def chatgpt_token():
    """An unsigned token in the shape of ChatGPT's (Codex reads its claims, and does not verify
    them); it expires in 2100."""
    import base64

    def part(doc):
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    claims = {"email": "e2e@example.com", "exp": 4102444800,
              "https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
                                              "chatgpt_account_id": CHATGPT_ACCOUNT,
                                              "chatgpt_user_id": "user-e2e"}}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def chatgpt_auth():
    """`~/.codex/auth.json` as `codex login` leaves it, refreshed now so that Codex does not
    try to refresh it."""
    return {"OPENAI_API_KEY": None,
            "tokens": {"id_token": CHATGPT_TOKEN, "access_token": CHATGPT_TOKEN,
                       "refresh_token": "rt-e2e-dummy", "account_id": CHATGPT_ACCOUNT},
            "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


CHATGPT_TOKEN = chatgpt_token()


class ClaudeCodeKeyed(ClaudeCode):
    """Claude Code signed in to a Claude plan, at a team's cachet that holds an Anthropic key:
    it presents its cachet key beside its own token, which goes upstream in place of the held
    key (docs/src/operations/security.md, "A subscription keeps its own token")."""

    serve_config, serve_env = KEYED_CONFIG, KEYED_ENV
    own_token = f"Bearer {OAUTH_TOKEN}"

    def __init__(self):
        super().__init__(subscription=True)
        self.name = "claude-code-subscription-keyed"

    def env(self, ctx):
        return {**super().env(ctx), "ANTHROPIC_CUSTOM_HEADERS": f"x-api-key: {TEAM_KEY}"}


class CodexChatGptKeyed(CodexChatGpt):
    """Codex signed in with ChatGPT at a team's cachet, through the agents page's provider that
    keeps the sign-in and sends the cachet key beside it."""

    serve_config, serve_env = KEYED_CONFIG, KEYED_ENV
    config_block = "~/.codex/config.toml#chatgpt-keyed"
    own_token = f"Bearer {CHATGPT_TOKEN}"

    def __init__(self):
        super().__init__("codex-chatgpt-keyed")

    def env(self, ctx):
        return {"CACHET_API_KEY": TEAM_KEY}


class Sdk(Client):
    def __init__(self):
        super().__init__("python-sdks", {"anthropic", "openai"}, {"messages", "chat", "responses"},
                         "header", one_session=False)

    def setup(self, ctx):
        pass

    def env(self, ctx):
        env = client_env(ctx.blocks, "sdk", ctx.base)
        env.update({"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY})
        return env

    def argv(self, ctx, turn):
        return [sys.executable, os.path.join(ROOT, "tests", "e2e", "sdk_client.py"),
                os.path.join(ctx.work, ".sdk-state.json"), str(turn + 1)]


class ClaudeCodeLong(ClaudeCode):
    """A longer Claude Code session, as users drive one: two turns, `/compact`, a turn
    after it, then a switch of model (`--model`, which rewrites the first message's model
    line). See check_long_session for what is asserted."""

    long_session = True
    STEPS = [([], PROMPTS[0]), (["-c"], "/compact"), (["-c"], PROMPTS[1]),
             (["-c", "--model", "claude-opus-4-5"], "And once more.")]

    def __init__(self):
        super().__init__(subscription=False)
        self.name = "claude-code-long"

    def turn_count(self):
        return len(self.STEPS)

    def shows_text(self, turn):
        return self.STEPS[turn][1] != "/compact"

    def argv(self, ctx, turn):
        flags, prompt = self.STEPS[turn]
        return [ctx.bin("claude"), *flags, "-p", prompt]


CLIENTS = [
    Pi("cachet-anthropic", "claude-sonnet-4-5", "anthropic-messages", "anthropic", "messages", "fingerprint"),
    Pi("cachet-openai", "gpt-4.1", "openai-completions", "openai", "chat", "fingerprint"),
    Pi("cachet-openai-responses", "gpt-4.1", "openai-responses", "openai", "responses", "prompt_cache_key"),
    ClaudeCode(subscription=False),
    ClaudeCode(subscription=True),
    Codex(),
    CodexFast(),
    CodexChatGpt(),
    Sdk(),
    ClaudeCodeKeyed(),
    CodexChatGptKeyed(),
    ClaudeCodeLong(),
]


# ---------------------------------------------------------------- one run

class Context:
    def __init__(self, base, blocks, bin_dir, scenario_dir):
        self.base = base
        self.blocks = blocks
        self.bin_dir = bin_dir
        self.home = os.path.join(scenario_dir, "home")
        self.work = os.path.join(scenario_dir, "work")
        os.makedirs(self.home, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        for name, text in [("README.md", "# scratch\n"), ("notes.txt", "nothing to see\n")]:
            with open(os.path.join(self.work, name), "w") as f:
                f.write(text)

    def bin(self, name):
        return os.path.join(self.bin_dir, name)


class Run:
    """What one client did against one stack: the shims' exchanges per turn, and cachet's view."""

    def __init__(self, client, policy_names, policy_docs):
        self.client = client
        self.policies = policy_names
        self.policy_docs = policy_docs
        self.turns = []          # (first front seq, end front seq, returncode, stdout, stderr)
        self.front = []
        self.back = []
        self.sessions = {}
        self.session_list = []
        self.metrics = ""
        self.records = []
        self.stored_bytes = 0
        self.serve_log = ""

    @property
    def label(self):
        return f"{self.client.name} [{', '.join(self.policies) or 'no policy'}]"

    def generation(self, exchanges=None):
        return [e for e in (self.front if exchanges is None else exchanges)
                if e.method == "POST" and e.path.split("?")[0] in GENERATION]

    def turn_generation(self, i):
        start, end = self.turns[i][0], self.turns[i][1]
        return self.generation([e for e in self.front if start <= e.seq < end])


def run_client(client, policies, args, blocks, out_dir):
    names = [os.path.basename(p)[:-5] for p in policies]
    scenario = os.path.join(out_dir, client.name + ("+" + "+".join(names) if names else ""))
    stack = Stack(args.cachet, scenario, policies, client.serve_config, client.serve_env)
    run = Run(client, names, [tomllib.load(open(p, "rb")) for p in policies])
    try:
        ctx = Context(stack.front.url, blocks, args.bin_dir, scenario)
        client.setup(ctx)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": ctx.home, "TERM": "dumb", "NO_COLOR": "1",
               "LANG": "C.UTF-8", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        env.update(client.env(ctx))
        for turn in range(client.turn_count()):
            start = len(stack.front.snapshot())
            out, err = open(os.path.join(scenario, f"turn{turn + 1}.out"), "w+"), \
                open(os.path.join(scenario, f"turn{turn + 1}.err"), "w+")
            p = subprocess.Popen(client.argv(ctx, turn), cwd=ctx.work, env=env, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + TURN_TIMEOUT
            note = ""
            while p.poll() is None:
                if len(stack.front.snapshot()) - start > MAX_REQUESTS_PER_TURN:
                    note = f"stopped after more than {MAX_REQUESTS_PER_TURN} requests"
                elif time.monotonic() > deadline:
                    note = f"stopped after {TURN_TIMEOUT} s"
                if note:
                    p.kill()
                    break
                time.sleep(0.05)
            rc = p.wait()
            out.seek(0)
            err.seek(0)
            run.turns.append((start, len(stack.front.snapshot()), rc, out.read(), err.read() + note))
        run.front = stack.front.snapshot()
        run.back = stack.back.snapshot()
        if True:  # sessions are kept for every generation request (monitoring is on)
            # The session log is written once each answer has ended: wait for every entry.
            expected = len(run.generation())
            deadline = time.monotonic() + 30
            while True:
                run.session_list = stack.admin("/sessions?limit=1000")["sessions"]
                if sum(s["requests"] for s in run.session_list) >= expected or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            for s in run.session_list:
                run.sessions[s["id"]] = stack.admin(f"/sessions/{s['id']}")
        run.metrics = stack.metrics()
    finally:
        stack.stop()
    record_dir = os.path.join(scenario, "record")
    for name in sorted(os.listdir(record_dir)) if os.path.isdir(record_dir) else []:
        run.records += [json.loads(l) for l in open(os.path.join(record_dir, name)) if l.strip()]
    db = os.path.join(scenario, "store", "sessions.sqlite3")
    if os.path.exists(db):
        con = sqlite3.connect(db)
        run.stored_bytes = (con.execute("select coalesce(sum(length(body)),0) from entries").fetchone()[0]
                            + con.execute("select coalesce(sum(length(bytes)),0) from session_blobs").fetchone()[0])
        con.close()
    run.serve_log = open(os.path.join(scenario, "serve.log")).read()
    return run


# ---------------------------------------------------------------- assertions

def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def check_turns(r, run):
    for i, (_, _, rc, out, err) in enumerate(run.turns):
        shown = EMULATOR_TEXT in out or not run.client.shows_text(i)
        r.check(rc == 0 and shown, f"{run.label}: turn {i + 1} completes and shows the emulator's text",
                f"exit {rc}; stdout: {out[-400:]!r}; stderr: {err[-600:]!r}")


def check_identity(r, run):
    client = run.client
    gen = run.generation()
    sources = {expected_session(e.req_headers, e.request_json())[0] for e in gen}
    r.check(sources == {client.id_source},
            f"{run.label}: requests carry what the docs name for the session ({client.id_source})",
            f"found {sorted(sources)}")
    wrong = []
    for rec in run.records:
        source, sid = expected_session(list(rec.get("headers", {}).items()), rec["body"])
        ok = rec["session"].startswith("fp-") and len(rec["session"]) == 35 if source == "fingerprint" \
            else rec["session"] == sid
        if not ok:
            wrong.append((source, sid, rec["session"]))
    r.check(bool(run.records) and not wrong and len(run.records) == len(gen),
            f"{run.label}: cachet names each request's session as the docs say",
            f"{len(run.records)} records for {len(gen)} requests; mismatches: {wrong[:3]}")
    ids = {rec["session"] for rec in run.records}
    if client.one_session:
        r.check(len(ids) == 1, f"{run.label}: both turns are one session", f"sessions: {sorted(ids)}")
    # Sessions are kept for every generation request, policy or not (monitoring).
    named = {rec["session"] for rec in run.records}
    listed = {s["id"] for s in run.session_list}
    r.check(listed == named and named, f"{run.label}: GET /sessions lists the session",
            f"listed {sorted(listed)}, the requests named {sorted(named)}")


def check_bytes(r, run):
    forwarded = [e for e in run.front if e.path.startswith("/v1/") and not e.header("x-cachet-error", "resp")]
    back = {}
    for e in run.back:
        back.setdefault((e.method, e.path, sha(e.req_body)), []).append(e)
    unmatched, resp_diff, secret_diff = [], [], []
    for e in forwarded:
        candidates = back.get((e.method, e.path, sha(e.req_body)))
        if not candidates:
            unmatched.append(f"{e.method} {e.path} ({len(e.req_body)} bytes)")
            continue
        b = candidates.pop(0)
        if b.resp_body != e.resp_body or b.status != e.status:
            resp_diff.append(f"{e.method} {e.path}: upstream {b.status} {len(b.resp_body)} bytes, "
                             f"client {e.status} {len(e.resp_body)} bytes")
        for name in ("x-api-key", "authorization"):
            if b.header(name) != e.header(name):
                secret_diff.append(name)
    r.check(not unmatched and len(forwarded) == len(run.back) and forwarded,
            f"{run.label}: the upstream receives exactly the bytes the agent sent ({len(forwarded)} requests)",
            f"not received as sent: {unmatched[:3]}; {len(run.back)} upstream requests")
    r.check(not resp_diff, f"{run.label}: the agent receives exactly the bytes the upstream sent",
            "; ".join(resp_diff[:3]))
    r.check(not secret_diff, f"{run.label}: credentials are forwarded as sent", ", ".join(secret_diff))


def check_websocket(r, run):
    """A client that asks for a WebSocket first (Codex on OpenAI's own provider) gets cachet's
    own answer, and nothing of it goes upstream; the turns then complete over HTTP. The answer
    is the 426 Codex reads as "go on over HTTP" (codex-rs/core/src/client.rs,
    `stream_responses_websocket`), so each Codex process asks once and never retries."""
    asked = [e for e in run.front if (e.header("upgrade") or "").lower() == "websocket"]
    if not asked and not getattr(run.client, "websocket_first", False):
        return
    answered = [e for e in asked if e.status == 426 and e.header("x-cachet-error", "resp") == "1"]
    forwarded = [e for e in run.back if (e.header("upgrade") or "") or
                 (e.method == "GET" and e.path.split("?")[0] == "/v1/responses")]
    r.check(asked and len(answered) == len(asked) and not forwarded,
            f"{run.label}: WebSocket upgrades are answered by cachet, never forwarded "
            f"({len(asked)} asked)",
            f"{len(answered)} of {len(asked)} answered 426 by cachet; "
            f"{len(forwarded)} reached the upstream")
    turns = len(run.turns)
    r.check(len(asked) <= turns,
            f"{run.label}: the agent goes on over HTTP at cachet's first answer "
            f"({len(asked)} WebSocket asks in {turns} turns)",
            f"{len(asked)} asks in {turns} turns: the agent retried the WebSocket")


def per_session_turns(run):
    """{session: [generation exchanges of turn 1, of turn 2, ...]} by the documented identity."""
    out = {}
    for i in range(len(run.turns)):
        for e in run.turn_generation(i):
            source, sid = expected_session(e.req_headers, e.request_json())
            key = sid or "fingerprint"
            out.setdefault(key, [[] for _ in run.turns])[i].append(e)
    return out


def check_cache(r, run):
    for sid, turns in per_session_turns(run).items():
        if len(turns) > 1 and turns[1]:
            first = turns[1][0]
            read = cache_read(first.resp_body)
            r.check(read > 0, f"{run.label}: turn 2 reads from cache ({sid[:24]}: {read} tokens)",
                    f"first request of turn 2 read {read} tokens")


def steps(run):
    return [len(run.turn_generation(i)) for i in range(len(run.turns))]


def total_cache_read(run):
    return sum(cache_read(e.resp_body) for e in run.generation())


# Injection modes that pay for fresh memory with cache, as DESIGN §6 and the policies' own
# documentation say: the diagnosis must name that cost (and nothing else), and the reads
# with them are not compared with the client alone.
TRADE_OFFS = {
    # The previous turn's block vanishes from before the previous prompt.
    "memory-context-hook": {("messages", "message_edited")},
    # New memory in the system prompt when the turn's content changes.
    "memory-system-prompt": {("system", "system_changed")},
}


def request_entries(run):
    """Every request entry of the run's session logs, with its session's id."""
    for sid, s in run.sessions.items():
        for e in s.get("entries", []):
            if e.get("type") == "request":
                yield sid, e


def diagnoses(run):
    for sid, e in request_entries(run):
        if e.get("diagnosis"):
            yield sid, e


def check_long_session(r, run):
    """A session through a compaction and a model switch is one session: the summary
    requests of `/compact` (the last message with the summary prompt appended) are no break,
    the turn index goes on after the compaction, and the first request on the new model is
    diagnosed `model_changed` on the lane it continues."""
    entries = [e for _, e in request_entries(run)]
    r.check(len(run.sessions) == 1 and len(entries) == len(run.generation()),
            f"{run.label}: one session through the compaction and the model switch",
            f"sessions {sorted(run.sessions)}; {len(entries)} entries for {len(run.generation())} requests")
    by_turn = [len(run.turn_generation(i)) for i in range(len(run.turns))]
    bounds = [sum(by_turn[:i]) for i in range(len(by_turn) + 1)]
    turn = lambda i: entries[bounds[i]:bounds[i + 1]]
    compact, after, switched = turn(1), turn(2), turn(3)
    diagnosed = [e.get("diagnosis") for e in compact if e.get("diagnosis")]
    r.check(compact and not diagnosed,
            f"{run.label}: /compact's summary requests are no break ({len(compact)} requests)",
            f"diagnosed {diagnosed}")
    before = max((e.get("turn_index") or 0) for e in turn(0)) if turn(0) else 0
    r.check(after and all((e.get("turn_index") or 0) > before for e in after),
            f"{run.label}: the turn index goes on after the compaction",
            f"turns before {before}, after {[e.get('turn_index') for e in after]}")
    first = switched[0] if switched else {}
    reason = (first.get("diagnosis") or {}).get("reason")
    r.check(reason == "model_changed" and first.get("lane") == (after[-1].get("lane") if after else None),
            f"{run.label}: the model switch is diagnosed model_changed on its lane",
            f"diagnosis {first.get('diagnosis')}; lane {first.get('lane')} after {[e.get('lane') for e in after]}")
    breaks = metric_sum(run.metrics, "cachet_prefix_breaks_total")
    r.check(breaks == 1, f"{run.label}: the switch is the session's only break",
            f"cachet_prefix_breaks_total = {breaks:g}")
    late = [e.get("diagnosis") for e in switched[1:] if e.get("diagnosis")]
    r.check(switched and not late, f"{run.label}: the new model's tool loop reads on without a break",
            f"diagnosed {late}")


def check_fast(r, run):
    """Every request of a client in fast mode asked for it, and its answer is logged as
    served so (the emulator serves it fast: GPT-6 Sol has a fast price)."""
    asked = [e for e in run.generation() if e.request_json().get("service_tier") != "priority"]
    r.check(run.generation() and not asked,
            f"{run.label}: every request asks service_tier priority",
            f"{len(asked)} of {len(run.generation())} did not")
    entries = [e for _, e in request_entries(run)]
    slow = [e.get("request_index") for e in entries if not (e.get("usage") or {}).get("fast")]
    r.check(entries and not slow,
            f"{run.label}: every answer is logged as served in fast mode ({len(entries)} requests)",
            f"requests {slow[:5]} are not")


def check_no_breaks(r, run, what):
    breaks_metric = metric_sum(run.metrics, "cachet_prefix_breaks_total")
    broken = [f"request {e.get('request_index')}: {json.dumps(e['diagnosis'])}" for _, e in diagnoses(run)]
    r.check(breaks_metric == 0 and not broken, f"{run.label}: {what}",
            f"cachet_prefix_breaks_total = {breaks_metric:g}; {'; '.join(broken[:4])}")


def check_policy_run(r, run, base):
    r.check(steps(run) == steps(base), f"{run.label}: completes in the same number of steps as without",
            f"requests per turn {steps(run)}, without the policy {steps(base)}")
    names = {os.path.basename(p).removesuffix(".toml") for p in run.policies}
    trade_offs = set().union(*(TRADE_OFFS.get(n, set()) for n in names))
    if trade_offs:
        found = {(e["diagnosis"]["section"], e["diagnosis"]["reason"]) for _, e in diagnoses(run)}
        r.check(found <= trade_offs,
                f"{run.label}: breaks are only the injection mode's own ({sorted(trade_offs)})",
                f"diagnosed {sorted(found)}")
        return check_storage(r, run)
    check_no_breaks(r, run, "no prefix break on an append-only session")
    with_p, without = total_cache_read(run), total_cache_read(base)
    r.check(with_p >= without, f"{run.label}: reads at least as much from cache as without ({with_p} >= {without})",
            f"{with_p} tokens read with the policy, {without} without")
    check_storage(r, run)


def check_storage(r, run):
    # Storage: every distinct message, system prompt and tool list once, plus a small entry
    # per request. A log that copies the history into every entry grows with its square.
    unique = set()
    for e in run.generation():
        body = e.request_json()
        items = body.get("messages") or body.get("input") or []
        for item in items if isinstance(items, list) else [items]:
            unique.add(canonical(item))
        for part in ("system", "tools", "instructions"):
            if body.get(part):
                unique.add(canonical(body[part]))
    content = sum(len(u) for u in unique)
    n = len(run.generation())
    bound = 2 * content + 2048 * n
    # Each request entry names the messages it adds to the one it extends: over the session
    # that is about the number of distinct messages, not the sum of every history's length.
    named = sum(len((e.get("sent") or {}).get("keys") or []) for _, e in request_entries(run))
    histories = sum(len(e.request_json().get("messages") or e.request_json().get("input") or [])
                    for e in run.generation())
    r.check(0 < run.stored_bytes <= bound and named <= len(unique) + 2 * n,
            f"{run.label}: session storage grows with new content ({run.stored_bytes} bytes stored "
            f"for {content} bytes of distinct content in {n} requests; entries name {named} messages, "
            f"the requests carried {histories})",
            f"stored {run.stored_bytes} bytes, linear bound 2 x {content} + 2048 x {n} = {bound}; "
            f"entries name {named} messages, bound {len(unique)} distinct + 2 x {n}")


def check_common(r, run):
    unknown = [l for l in run.metrics.splitlines()
               if l.startswith("cachet_input_tokens_total") and 'model="unknown"' in l]
    r.check(not unknown, f"{run.label}: no model=\"unknown\" token series", "; ".join(unknown[:2]))
    check_compactions(r, run)
    check_model_list(r, run)
    secrets = [s for s in (ANTHROPIC_KEY, OAUTH_TOKEN, OPENAI_KEY, CHATGPT_TOKEN, TEAM_KEY,
                           HELD_ANTHROPIC, HELD_OPENAI) if s in run.serve_log]
    r.check(not secrets, f"{run.label}: no credential in cachet's log")


def check_model_list(r, run):
    """A client that asks for the model list gets one it can read. Codex signed in with ChatGPT
    decodes the backend's `{"models": [...]}`; on any other shape it logs "failed to refresh
    available models" and asks again on its next step."""
    asked = [e for e in run.front if e.method == "GET" and e.path.split("?")[0] == "/v1/models"]
    if not asked:
        return
    failed = [e.status for e in asked if e.status != 200]
    refused = sum(err.count("failed to refresh available models") for (_, _, _, _, err) in run.turns)
    r.check(not failed and not refused,
            f"{run.label}: the model list is answered in a shape the client reads ({len(asked)} asked)",
            f"statuses {failed}; {refused} \"failed to refresh available models\" in its stderr")


def check_keyed(r, run):
    """At a cachet holding keys and asking for client keys, a subscription client that presents
    its cachet key beside its own token is let in, and each request goes upstream with that
    token: neither the cachet key nor a held key goes with it."""
    front, back = run.generation(), run.generation(run.back)
    presented = [e for e in front if e.header("x-api-key") == TEAM_KEY]
    r.check(front and len(presented) == len(front),
            f"{run.label}: every request presents the cachet key",
            f"{len(presented)} of {len(front)}")
    own = [e for e in back if e.header("authorization") == run.client.own_token
           and e.header("x-api-key") is None]
    leaked = [f"{k}" for e in back for k, v in e.req_headers
              if any(s in v for s in (TEAM_KEY, HELD_ANTHROPIC, HELD_OPENAI))]
    r.check(back and len(own) == len(back) == len(front) and not leaked,
            f"{run.label}: each request goes upstream with the client's own token",
            f"{len(own)} of {len(back)} with it; cachet or held key in {leaked}")
    # Its other calls (the model list) go to its own provider too: a ChatGPT sign-in is
    # OpenAI's whatever key header it carries.
    elsewhere = [l for l in run.metrics.splitlines() if l.startswith("cachet_requests_total{")
                 and not any(f'provider="{p}"' in l for p in run.client.providers)]
    r.check(not elsewhere, f"{run.label}: every request is routed to its own provider", "; ".join(elsewhere))
    counted = sum(float(l.rsplit(" ", 1)[1]) for l in run.metrics.splitlines()
                  if l.startswith("cachet_requests_total{") and 'key="team"' in l)
    r.check(counted >= len(front), f"{run.label}: its requests count under the key's name",
            f"{counted:.0f} counted for {len(front)}")


def check_compactions(r, run):
    """A compaction the client asked for (`POST /v1/responses/compact`) goes upstream and is
    counted under its own endpoint, with its model."""
    asked = [e for e in run.front if e.method == "POST" and e.path.split("?")[0] == "/v1/responses/compact"]
    if not asked:
        return
    counted = sum(float(l.rsplit(" ", 1)[1]) for l in run.metrics.splitlines()
                  if l.startswith("cachet_requests_total{") and 'endpoint="responses_compact"' in l
                  and 'status="200"' in l and 'model="unknown"' not in l)
    forwarded = [e for e in run.back if e.path.split("?")[0] == "/v1/responses/compact"]
    r.check(len(forwarded) == len(asked) and counted == len(asked),
            f"{run.label}: compactions go upstream and are counted with their model ({len(asked)} asked)",
            f"{len(forwarded)} forwarded, {counted:.0f} counted")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachet", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    blocks = client_blocks()
    shipped = sorted(os.path.join(ROOT, "policies", f) for f in os.listdir(os.path.join(ROOT, "policies"))
                     if f.endswith(".toml"))
    policies = {p: tomllib.load(open(p, "rb")) for p in shipped}
    only = set(filter(None, args.only.split(",")))
    r = Report()
    started = time.monotonic()
    for client in CLIENTS:
        if only and client.name not in only:
            continue
        t0 = time.monotonic()
        base = attempt(r, f"{client.name} [no policy]", run_client, client, [], args, blocks, args.out)
        if base is None:
            continue
        check_turns(r, base)
        if client.serve_config:
            check_keyed(r, base)
            check_common(r, base)
            print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
            continue
        check_identity(r, base)
        check_bytes(r, base)
        check_websocket(r, base)
        check_cache(r, base)
        long_session = getattr(client, "long_session", False)
        if long_session:
            check_long_session(r, base)
        else:
            check_no_breaks(r, base, "no prefix break without a policy (monitoring)")
        check_storage(r, base)
        check_common(r, base)
        if long_session:
            print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
            continue
        if client.name == "python-sdks":
            check_no_route_logged(r, args)
        if getattr(client, "fast", False):
            check_fast(r, base)
            print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
            continue
        for path, policy in policies.items():
            if not client.matches(policy):
                continue
            run = attempt(r, f"{client.name} [{os.path.basename(path)[:-5]}]", run_client,
                          client, [path], args, blocks, args.out)
            if run is None:
                continue
            check_turns(r, run)
            check_identity(r, run)
            check_cache(r, run)
            check_policy_run(r, run, base)
            check_common(r, run)
        print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
    print(f"agents end to end: {time.monotonic() - started:.0f} s")
    if r.failed:
        print("\nFailed assertions:")
        for f in r.failed:
            print(f"  - {f}")
    print(f"{r.passed} passed, {len(r.failed)} failed")
    return 1 if r.failed else 0


def attempt(r, label, fn, *args):
    """Run one client; a run that cannot even start is one failed assertion, not the end."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - reported, and the other clients still run
        r.check(False, f"{label}: runs", f"{type(e).__name__}: {e}")
        return None


def check_no_route_logged(r, args):
    """A client with a wrong base URL gets cachet's 404, and the log says so at info."""
    stack = Stack(args.cachet, os.path.join(args.out, "no-route"), [])
    try:
        req = urllib.request.Request(stack.cachet_url + "/chat/completions", data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10)
            status = 200
        except urllib.error.HTTPError as e:
            status = e.code
    finally:
        stack.stop()
    log = open(os.path.join(args.out, "no-route", "serve.log")).read()
    r.check(status == 404 and re.search(r"INFO.*no route for POST /chat/completions", log),
            "a wrong base URL is answered 404 and logged at info", f"status {status}; log: {log[-300:]!r}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--list-blocks"]:
        for (kind, name), text in sorted(client_blocks().items()):
            print(f"{kind}={name}: {len(text.splitlines())} lines")
        sys.exit(0)
    sys.exit(main())
