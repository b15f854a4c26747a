#!/usr/bin/env python3
"""Real agents through cachet, end to end (run by scripts/agents-e2e.sh).

Each client runs two turns in a scratch folder with its own HOME, configured with the blocks
of the book's "Point an agent at cachet" page (docs/src/agents.md), against `cachet serve` in front of
`cachet emulate --tool-calls first --tool-steps 2`. Capturing shims sit on both sides of
cachet, so the bytes that crossed it can be compared. Each client runs once without a
policy, then once with each shipped policy that matches it. Longer sessions (a client with
a `check` of its own: compactions, switches of model, twin sessions, interrupts, a paced
OpenAI session) run once, without a policy.

Every assertion prints `ok:` or `FAIL:` with its figures; the run goes on after a failure
and ends with `N passed, M failed`.

Usage: run.py --cachet BIN --bin-dir NODE_BIN --newest-bin-dir NODE_BIN --out DIR [--only NAME,...]
"""

import argparse
import collections
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
import urllib.parse
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
# Bedrock Runtime's and Vertex AI's generation paths name the model: matched, not listed.
CLOUD_GENERATION = re.compile(
    r"^/model/[^/]+/(invoke|invoke-with-response-stream|converse|converse-stream)$"
    r"|^/v1/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/[^/:]+:(rawPredict|streamRawPredict)$")
# Gemini names the model in its generation paths: /v1beta/models/{model}:generateContent.
GEMINI_GENERATION = re.compile(r"/v1beta/models/[^/:]+:(generateContent|streamGenerateContent)$")


def is_generation(path):
    path = path.split("?")[0]
    return path in GENERATION or bool(GEMINI_GENERATION.match(path)) \
        or bool(CLOUD_GENERATION.match(path)) and "/count-tokens:" not in path

# Where Claude Code's newest release is (`--newest-bin-dir`).
NEWEST_BIN_DIR = [""]

# Dummy credentials: nothing here reaches a provider.
ANTHROPIC_KEY = "sk-ant-api03-e2e-dummy-key"
OAUTH_TOKEN = "sk-ant-oat01-e2e-dummy-token"
OPENAI_KEY = "sk-e2e-dummy-key"
GEMINI_KEY = "AIza-e2e-dummy-gemini-key"
CHATGPT_ACCOUNT = "acc-e2e-dummy"
# A team's cachet: it holds both providers' keys and asks every client for its cachet key.
TEAM_KEY = "ck-e2e-team-key"
HELD_ANTHROPIC = "sk-ant-api03-e2e-held-by-cachet"
HELD_OPENAI = "sk-e2e-held-by-cachet"
# Bedrock and Vertex through a team's cachet that holds the cloud's credentials: AWS test
# credentials the emulator checks signatures against, and a Google access token.
AWS_KEY_ID = "AKIDE2EHELDBYCACHET"
AWS_SECRET = "e2e/held+by/cachet/secret/access/key"
HELD_VERTEX_TOKEN = "ya29.e2e-held-by-cachet"
CLOUD_ENV = {"AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
             "AWS_REGION": "us-east-1", "CACHET_TEAM_KEY": TEAM_KEY,
             "CACHET_VERTEX_TOKEN": HELD_VERTEX_TOKEN}
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
# Interrupts: every answer's events come this slowly (the emulator's fault header), and the
# client is killed this long after its first answer started.
FAULT_HEADER = "x-cachet-emulate-fault"
SLOW_EVENTS = "slow-events:300"
# OpenAI routes a prompt start and key to other machines past about this many requests a
# minute (the emulator's rule, src/cache_model/openai.rs).
OVERFLOW_PER_MINUTE = 15
INTERRUPT_AFTER = 1.2


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
                 ("env", "claude-code-bedrock"), ("env", "claude-code-vertex"),
                 ("file", "cachet.toml#bedrock"), ("file", "cachet.toml#vertex"),
                 ("file", "~/.codex/config.toml#chatgpt"),
                 ("file", "~/.codex/config.toml#chatgpt-keyed"),
                 ("file", "~/.pi/agent/models.json"), ("file", "~/.pi/agent/models.json#bedrock"),
                 ("env", "gemini-cli"),
                 ("file", "~/.gemini/settings.json")]


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


def client_env(blocks, name, base, variables=None):
    """The variables an `env=NAME` block exports: `export NAME=value` or `export NAME="value"`,
    with `$VAR` read from `variables`."""
    env = {}
    for line in blocks[("env", name)].splitlines():
        m = re.match(r'export (\w+)=(?:"([^"]*)"|(\S+))$', line.strip())
        if m:
            value = m.group(2) if m.group(2) is not None else m.group(3)
            value = re.sub(r"\$(\w+)", lambda v: (variables or {}).get(v.group(1), v.group(0)), value)
            env[m.group(1)] = value.replace(CLIENT_URL, base)
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

def event_stream_documents(body):
    """The JSON documents of an AWS event stream (Bedrock), or None when `body` is not one:
    each frame is a prelude (total length, headers length, CRC32), headers, the payload and
    a CRC32. An InvokeModel stream's payload is `{"bytes": base64 of an Anthropic event}`."""
    import base64
    import zlib
    if len(body) < 16 or zlib.crc32(body[:8]) != int.from_bytes(body[8:12], "big"):
        return None
    docs, at = [], 0
    while at + 16 <= len(body):
        total = int.from_bytes(body[at:at + 4], "big")
        headers = int.from_bytes(body[at + 4:at + 8], "big")
        payload = body[at + 12 + headers:at + total - 4]
        at += total
        try:
            doc = json.loads(payload)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("bytes"), str):
            try:
                doc = json.loads(base64.b64decode(doc["bytes"]))
            except ValueError:
                continue
        docs.append(doc)
    return docs


def json_documents(body):
    """Every JSON document of an answer: the whole body, each SSE `data:` line, or each
    frame of an AWS event stream."""
    try:
        return [json.loads(body)]
    except ValueError:
        pass
    framed = event_stream_documents(body)
    if framed is not None:
        return framed
    docs = []
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            try:
                docs.append(json.loads(line[5:].strip()))
            except ValueError:
                pass
    return docs


def cache_read(body):
    """Tokens read from cache, from an Anthropic, Chat, Responses or Gemini answer (streamed or
    not)."""
    best = 0

    def walk(v):
        nonlocal best
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("cache_read_input_tokens", "cached_tokens", "cacheReadInputTokens",
                         "cachedContentTokenCount") and isinstance(x, int):
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
    return [ANTHROPIC_KEY, OAUTH_TOKEN, OPENAI_KEY, CHATGPT_TOKEN, GEMINI_KEY, HELD_ANTHROPIC,
            HELD_OPENAI, HELD_VERTEX_TOKEN]


class Stack:
    """emulator <- back shim <- cachet serve <- front shim, all on loopback ports."""

    def __init__(self, cachet, workdir, policies, config=None, env=None, tool_steps=TOOL_STEPS):
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
        keys += ["--aws-credentials", f"{AWS_KEY_ID}:{AWS_SECRET}"]
        emu = self._start([cachet, "emulate", "--listen", "127.0.0.1:0", "--tool-calls", "first",
                           "--tool-steps", str(tool_steps)] + keys, "emulate.log")
        self.emulator_url = re.search(r"http://\S+", emu.stdout.readline()).group(0)
        self.back = Shim(self.emulator_url)
        args = [cachet, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                "--anthropic-upstream", self.back.url, "--openai-upstream", self.back.url,
                "--chatgpt-upstream", self.back.url, "--gemini-upstream", self.back.url,
                "--bedrock-upstream", self.back.url, "--vertex-upstream", self.back.url,
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

    def advance_emulator_clock(self, seconds):
        """Move the emulator's clock on (its cache lifetimes and OpenAI's per-minute routing
        rate read it), as if that much time had passed between two turns."""
        req = urllib.request.Request(self.emulator_url + "/emulator/clock/advance", method="POST",
                                     data=json.dumps({"seconds": seconds}).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

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
    # More of cachet's configuration, for a scenario that is not about client keys.
    extra_config = None

    def __init__(self, name, providers, endpoints, id_source, one_session=True):
        self.name = name
        self.providers = providers
        self.endpoints = endpoints
        self.id_source = id_source
        self.one_session = one_session

    def matches(self, policy):
        return policy_matches(policy, self.providers, self.endpoints)

    # The emulator's tool calls before each answer (`--tool-steps`).
    tool_steps = TOOL_STEPS
    # The prompt of each turn; or each turn's (flags, prompt), for clients that read them.
    PROMPTS = PROMPTS
    STEPS = None
    # The scenario's own assertions (`check(r, run)`), for the longer sessions; None: an
    # append-only session, checked for no break.
    check = None

    def turn_count(self):
        return len(self.STEPS or self.PROMPTS)

    def shows_text(self, turn):
        """Whether the turn prints the model's answer (a compaction prints nothing)."""
        return True

    def before_turn(self, ctx, turn):
        """Change the client's configuration before a turn (nothing by default)."""

    def turn_env(self, ctx, turn):
        """Environment for one turn only, beside the client's own."""
        return {}

    def invocations(self, ctx, turn):
        """The processes of a turn, run at once: one, unless a scenario runs sessions side by side."""
        return [self.argv(ctx, turn)]

    def invocation_count(self, turn):
        return 1

    def interrupted(self, turn):
        """Whether the turn is interrupted: its process killed mid-answer."""
        return False

    def pause_after(self, turn):
        """Seconds the emulator's clock moves on after the turn (a user's pause)."""
        return 0


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
        return {"ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY, "GEMINI_API_KEY": GEMINI_KEY,
                "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}

    def model_for(self, turn):
        return self.model

    def argv(self, ctx, turn, session=None):
        """`pi -p`, going on in the folder's latest session after the first turn, or in the
        one `--session-id` names."""
        flags = ["--session-id", session] if session else ["-c"] if turn > 0 else []
        return [ctx.bin("pi"), *flags, "-p", "--provider", self.provider, "--model", self.model_for(turn),
                self.PROMPTS[turn]]


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
        return [ctx.bin("claude"), *cont, "-p", self.PROMPTS[turn]]


# Codex calls GitHub and ChatGPT's services as it starts (its plugin sync) and waits for
# them before it exits: in a namespace without network each waits out a DNS time-out, about
# 5 s a process. Through a proxy at a closed loopback port they fail at once; loopback,
# where cachet is, goes direct.
CODEX_OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                 "NO_PROXY": "127.0.0.1,localhost"}


class Codex(Client):
      # The agents page's provider sets `supports_websockets = true`.
    websocket_first = True

    def __init__(self):
        super().__init__("codex", {"openai"}, {"responses"}, "prompt_cache_key")

    def setup(self, ctx):
        write_client_file(ctx.blocks, "~/.codex/config.toml", ctx.home, ctx.base)

    def env(self, ctx):
        return {**CODEX_OFFLINE, "OPENAI_API_KEY": OPENAI_KEY}

    def argv(self, ctx, turn):
        flags, prompt = self.STEPS[turn] if self.STEPS else \
            (["resume", "--last"] if turn > 0 else [], self.PROMPTS[turn])
        return [ctx.bin("codex"), "exec", "--skip-git-repo-check", *flags, prompt]


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
        return dict(CODEX_OFFLINE)


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


class ClaudeCodeCloud(ClaudeCode):
    """Claude Code on Amazon Bedrock or Google Vertex AI through a team's cachet that holds the
    cloud's credentials (AWS keys it signs with, a Google access token), configured with the
    agents page's blocks: cachet's (`cachet.toml#bedrock`, `#vertex`) and Claude Code's
    (`env=claude-code-bedrock`, `-vertex`), which presents its cachet key beside no credential
    of its own. Every check of a client with its own key holds, the bytes too, but for the
    signature cachet puts on a Bedrock request; and the metrics equal the usage it was sent."""

    cloud_client = True
    # Its cachet key is `team`'s: its sessions are named under it.
    session_namespace = "team:"

    def __init__(self, cloud):
        endpoint = {"bedrock": "invoke", "vertex": "raw_predict"}[cloud]
        Client.__init__(self, f"claude-code-{cloud}", {cloud}, {endpoint}, "claude_code_header")
        self.subscription = False
        self.cloud = cloud

    def serve_settings(self, blocks):
        return blocks[("file", f"cachet.toml#{self.cloud}")], CLOUD_ENV

    def env(self, ctx):
        env = client_env(ctx.blocks, f"claude-code-{self.cloud}", ctx.base, CLOUD_ENV)
        env.update({"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
        return env


class PiGemini(Pi):
    """pi on the Gemini API (`google-generative-ai`, the agents page's `cachet-gemini`). Gemini
    caches no prompt under the model's minimum (2,048 tokens for Gemini 2.5 Flash) and pi's
    own prompt is shorter: the project has an `AGENTS.md`, which pi puts in its system prompt,
    as a real project's would be."""

    def __init__(self):
        super().__init__("cachet-gemini", "gemini-2.5-flash", "google-generative-ai", "gemini",
                         "generate_content", "fingerprint")

    def setup(self, ctx):
        super().setup(ctx)
        rules = "".join(f"- Rule {i}: keep functions small, name things for what they do, and test "
                        f"each change before it is committed (section {i}).\n" for i in range(80))
        with open(os.path.join(ctx.work, "AGENTS.md"), "w") as f:
            f.write("# Project rules\n\n" + rules)


class PiBedrock(Pi):
    """pi on Amazon Bedrock (`bedrock-converse-stream`: Converse streams, which its AWS SDK
    sends over cleartext HTTP/2) through a team's cachet that holds the AWS credentials,
    configured with the agents page's blocks: cachet's `cachet.toml#bedrock` and pi's
    `models.json#bedrock` (its cachet key as its Bedrock API key, which cachet takes off and
    replaces with its own signature). Converse is forwarded, signed and
    counted: the checks of a cloud client, but not those of an envelope (sessions, breaks,
    storage)."""

    cloud_client = True
    cloud = "bedrock"
    envelope = False
    http2 = True

    def __init__(self):
        super().__init__("cachet-bedrock", "us.anthropic.claude-opus-5-5", "bedrock", "bedrock", "converse",
                         "fingerprint")

    def setup(self, ctx):
        write_client_file(ctx.blocks, "~/.pi/agent/models.json#bedrock", ctx.home, ctx.base)

    def serve_settings(self, blocks):
        return blocks[("file", "cachet.toml#bedrock")], CLOUD_ENV

    def env(self, ctx):
        return {"CACHET_TEAM_KEY": TEAM_KEY, "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}


class ClaudeCodeCloudNewest(ClaudeCodeCloud):
    """The same on Claude Code's newest release (`npm view @anthropic-ai/claude-code version`,
    installed beside the pinned one by scripts/agents-e2e.sh)."""

    def __init__(self, cloud):
        super().__init__(cloud)
        self.name = f"claude-code-{cloud}-newest"

    def argv(self, ctx, turn):
        return [os.path.join(NEWEST_BIN_DIR[0], "claude"), *super().argv(ctx, turn)[1:]]


class CodexChatGptKeyed(CodexChatGpt):
    """Codex signed in with ChatGPT at a team's cachet, through the agents page's provider that
    keeps the sign-in and sends the cachet key beside it."""

    serve_config, serve_env = KEYED_CONFIG, KEYED_ENV
    config_block = "~/.codex/config.toml#chatgpt-keyed"
    own_token = f"Bearer {CHATGPT_TOKEN}"

    def __init__(self):
        super().__init__("codex-chatgpt-keyed")

    def env(self, ctx):
        return {**CODEX_OFFLINE, "CACHET_API_KEY": TEAM_KEY}


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

    STEPS = [([], PROMPTS[0]), (["-c"], "/compact"), (["-c"], PROMPTS[1]),
             (["-c", "--model", "claude-opus-4-5"], "And once more.")]

    def __init__(self):
        super().__init__(subscription=False)
        self.name = "claude-code-long"

    def shows_text(self, turn):
        return self.STEPS[turn][1] != "/compact"

    def argv(self, ctx, turn):
        flags, prompt = self.STEPS[turn]
        return [ctx.bin("claude"), *flags, "-p", prompt]

    def check(self, r, run):
        check_long_session(r, run)


class PiTwins(Pi):
    """Two pi sessions side by side in one folder, started with the same prompt (each named
    by `--session-id`): one fingerprint, two conversations. See check_twins."""

    def __init__(self):
        super().__init__("cachet-anthropic", "claude-sonnet-4-5", "anthropic-messages", "anthropic",
                         "messages", "fingerprint")
        self.name = "pi-twins"
        self.one_session = False

    def invocation_count(self, turn):
        return 2

    def invocations(self, ctx, turn):
        return [self.argv(ctx, turn, twin) for twin in ("twin-a", "twin-b")]

    def check(self, r, run):
        check_twins(r, run)


class PiLong(Pi):
    """pi on the Anthropic API through its automatic compaction, then a switch of model
    (`-c --model`). A small `contextWindow` for the first model (models.json) and
    `compaction.reserveTokens` (settings.json) put the threshold (window - reserve = 3,160
    tokens) between turn 2's first and second tool results, each of about 570 tokens (the
    file the emulator's `read` call names, `example path`, is 40 lines): pi compacts once,
    inside turn 2's tool loop, keeping the turns within `keepRecentTokens`. The new model
    has pi's default window. See check_pi_long."""

    SWITCH_TO = "claude-opus-4-8"
    PROMPTS = [PROMPTS[0], PROMPTS[1], "And once more."]

    def __init__(self):
        super().__init__("cachet-anthropic", "claude-sonnet-4-5", "anthropic-messages", "anthropic",
                         "messages", "fingerprint")
        self.name = "pi-long"
        self.one_session = False  # pi's summarisation request is a session of its own

    def setup(self, ctx):
        super().setup(ctx)
        path = os.path.join(ctx.home, ".pi", "agent", "models.json")
        with open(path) as f:
            models = json.load(f)
        models["providers"][self.provider]["models"] = [{"id": self.model, "contextWindow": 4000},
                                                        {"id": self.SWITCH_TO}]
        with open(path, "w") as f:
            json.dump(models, f, indent=2)
        with open(os.path.join(ctx.home, ".pi", "agent", "settings.json"), "w") as f:
            json.dump({"compaction": {"reserveTokens": 840, "keepRecentTokens": 1200}}, f)
        with open(os.path.join(ctx.work, "example path"), "w") as f:
            f.writelines(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(40))

    def model_for(self, turn):
        return self.SWITCH_TO if turn == 2 else self.model

    def check(self, r, run):
        check_pi_long(r, run)


class CodexLong(Codex):
    """Codex with an API key: two turns, then `resume --last -m gpt-5.2` twice, with
    `model_auto_compact_token_limit = 10000`. Codex's context is about 8,200 tokens on
    gpt-5.1-codex and 11,900 on gpt-5.2 (its instructions are longer), so the first request
    on the new model passes the limit and Codex compacts inside that turn, with a summary
    request of its own; the compacted history, about 8,300 tokens, stays under it (a limit
    below it compacts again and again). See check_codex_long."""

    SWITCH_TO = "gpt-5.2"
    LIMIT = 10_000
    STEPS = [([], PROMPTS[0]), (["resume", "--last"], PROMPTS[1]),
             (["resume", "--last", "-m", SWITCH_TO], "And once more."),
             (["resume", "--last", "-m", SWITCH_TO], "And again.")]

    def __init__(self):
        super().__init__()
        self.name = "codex-long"

    def setup(self, ctx):
        super().setup(ctx)
        prepend_config(ctx, f"model_auto_compact_token_limit = {self.LIMIT}")

    def check(self, r, run):
        check_codex_long(r, run)


class CodexChatGptLong(CodexChatGpt):
    """Codex signed in with ChatGPT: a turn, a turn with `-c model_auto_compact_token_limit`
    below the first turn's context (about 16,200 tokens), which Codex compacts before it by
    a Responses request ending with `compaction_trigger`, then `resume --last -m gpt-6-sol`.
    See check_codex_chatgpt_long. Over the socket, each `codex exec` opens with a warmup."""

    SWITCH_TO = "gpt-6-sol"
    STEPS = [([], PROMPTS[0]),
             (["-c", "model_auto_compact_token_limit=12000", "resume", "--last"], PROMPTS[1]),
             (["resume", "--last", "-m", SWITCH_TO], "And once more.")]

    def __init__(self):
        super().__init__("codex-chatgpt-long")

    def check(self, r, run):
        check_codex_chatgpt_long(r, run)


def prepend_config(ctx, line):
    """Put a top-level key first in Codex's config.toml, so that it belongs to no table of
    the agents page's block."""
    path = os.path.join(ctx.home, ".codex", "config.toml")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(line + "\n" + text)


class Interrupted:
    """Turn 1 interrupted: every answer's events come slowly (the emulator's fault header,
    set the client's own way), and the client is killed in the middle of its first answer;
    turn 2 goes on without the header. See check_interrupt."""

    def interrupted(self, turn):
        return turn == 0

    def check(self, r, run):
        check_interrupt(r, run)


class PiInterrupt(Interrupted, Pi):
    """The header in models.json's `headers` of the provider, for turn 1 only."""

    def __init__(self):
        Pi.__init__(self, "cachet-anthropic", "claude-sonnet-4-5", "anthropic-messages", "anthropic",
                    "messages", "fingerprint")
        self.name = "pi-interrupt"

    def before_turn(self, ctx, turn):
        write_client_file(ctx.blocks, "~/.pi/agent/models.json", ctx.home, ctx.base)
        if turn == 0:
            path = os.path.join(ctx.home, ".pi", "agent", "models.json")
            with open(path) as f:
                models = json.load(f)
            models["providers"][self.provider]["headers"] = {FAULT_HEADER: SLOW_EVENTS}
            with open(path, "w") as f:
                json.dump(models, f, indent=2)


class ClaudeCodeInterrupt(Interrupted, ClaudeCode):
    """The header in `ANTHROPIC_CUSTOM_HEADERS`, for turn 1 only."""

    def __init__(self):
        ClaudeCode.__init__(self, subscription=False)
        self.name = "claude-code-interrupt"

    def turn_env(self, ctx, turn):
        return {"ANTHROPIC_CUSTOM_HEADERS": f"{FAULT_HEADER}: {SLOW_EVENTS}"} if turn == 0 else {}


class CodexInterrupt(Interrupted, Codex):
    """The header in the provider's `http_headers` (`-c` on the command line), for turn 1 only."""

    def __init__(self):
        Codex.__init__(self)
        self.name = "codex-interrupt"

    def argv(self, ctx, turn):
        argv = super().argv(ctx, turn)
        if turn == 0:
            argv[2:2] = ["-c", f'model_providers.cachet.http_headers={{"{FAULT_HEADER}"="{SLOW_EVENTS}"}}']
        return argv


class Paced:
    """An OpenAI session of more than 15 requests (three turns of six: five tool calls and
    the answer) at a user's pace, below the rate at which OpenAI routes a prefix to other
    machines (about 15 requests a minute for one prompt start and key): the emulator's
    clock moves on 30 s after each turn, so no minute holds more than 12. See check_paced."""

    tool_steps = 5
    PROMPTS = [PROMPTS[0], PROMPTS[1], "And once more."]
    PAUSE = 30

    def pause_after(self, turn):
        return self.PAUSE

    def check(self, r, run):
        check_paced(r, run)


class PiPaced(Paced, Pi):
    def __init__(self):
        Pi.__init__(self, "cachet-openai-responses", "gpt-4.1", "openai-responses", "openai", "responses",
                    "prompt_cache_key")
        self.name = "pi-paced"


class PiBurst(PiPaced):
    """The same session without the pauses: 18 requests in a few seconds. Past 15 in a
    minute the emulator routes requests to machines without the prefix, as OpenAI does;
    cachet names the cause. See check_burst."""

    def __init__(self):
        super().__init__()
        self.name = "pi-burst"

    def pause_after(self, turn):
        return 0

    def check(self, r, run):
        check_burst(r, run)


class CodexPaced(Paced, Codex):
    def __init__(self):
        Codex.__init__(self)
        self.name = "codex-paced"


class GeminiCli(Client):
    """Gemini CLI on the Gemini API (`GOOGLE_GEMINI_BASE_URL`, its key in `GEMINI_API_KEY`),
    streaming `streamGenerateContent?alt=sse`; turn 2 is `--resume latest`."""

    MODEL = "gemini-2.5-flash"

    def __init__(self):
        super().__init__("gemini-cli", {"gemini"}, {"generate_content"}, "fingerprint")

    def setup(self, ctx):
        write_client_file(ctx.blocks, "~/.gemini/settings.json", ctx.home, ctx.base)

    def env(self, ctx):
        return {**client_env(ctx.blocks, "gemini-cli", ctx.base), "GEMINI_API_KEY": GEMINI_KEY}

    def argv(self, ctx, turn):
        resume = ["--resume", "latest"] if turn > 0 else []
        return [ctx.bin("gemini"), "-m", self.MODEL, "--skip-trust", *resume, "-p", self.PROMPTS[turn]]

    def check(self, r, run):
        check_gemini_cli(r, run)


CLIENTS = [
    Pi("cachet-anthropic", "claude-sonnet-4-5", "anthropic-messages", "anthropic", "messages", "fingerprint"),
    Pi("cachet-openai", "gpt-4.1", "openai-completions", "openai", "chat", "fingerprint"),
    Pi("cachet-openai-responses", "gpt-4.1", "openai-responses", "openai", "responses", "prompt_cache_key"),
    PiGemini(),
    PiBedrock(),
    ClaudeCode(subscription=False),
    ClaudeCode(subscription=True),
    GeminiCli(),
    Codex(),
    CodexFast(),
    CodexChatGpt(),
    Sdk(),
    ClaudeCodeKeyed(),
    CodexChatGptKeyed(),
    ClaudeCodeCloud("bedrock"),
    ClaudeCodeCloud("vertex"),
    ClaudeCodeCloudNewest("bedrock"),
    ClaudeCodeCloudNewest("vertex"),
    ClaudeCodeLong(),
    PiTwins(),
    PiLong(),
    CodexLong(),
    CodexChatGptLong(),
    PiInterrupt(),
    ClaudeCodeInterrupt(),
    CodexInterrupt(),
    PiPaced(),
    PiBurst(),
    CodexPaced(),
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
        self.timelines = {}      # session id -> its timeline page (runs with an interrupt)
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
                if e.method == "POST" and is_generation(e.path)]

    def turn_generation(self, i):
        start, end = self.turns[i][0], self.turns[i][1]
        return self.generation([e for e in self.front if start <= e.seq < end])


def run_client(client, policies, args, blocks, out_dir):
    names = [os.path.basename(p)[:-5] for p in policies]
    scenario = os.path.join(out_dir, client.name + ("+" + "+".join(names) if names else ""))
    serve_config, serve_env = client.serve_config or client.extra_config, client.serve_env
    if hasattr(client, "serve_settings"):
        serve_config, serve_env = client.serve_settings(blocks)
    stack = Stack(args.cachet, scenario, policies, serve_config, serve_env, client.tool_steps)
    run = Run(client, names, [tomllib.load(open(p, "rb")) for p in policies])
    try:
        ctx = Context(stack.front.url, blocks, args.bin_dir, scenario)
        client.setup(ctx)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": ctx.home, "TERM": "dumb", "NO_COLOR": "1",
               "LANG": "C.UTF-8", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        env.update(client.env(ctx))
        for turn in range(client.turn_count()):
            client.before_turn(ctx, turn)
            start = len(stack.front.snapshot())
            name = os.path.join(scenario, f"turn{turn + 1}")
            out, err = open(name + ".out", "w+"), open(name + ".err", "w+")
            # Each in a process group of its own: Codex's launcher starts its binary as a
            # child, which a kill of the launcher alone would leave running.
            procs = [subprocess.Popen(argv, cwd=ctx.work, env={**env, **client.turn_env(ctx, turn)},
                                      stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
                     for argv in client.invocations(ctx, turn)]
            deadline = time.monotonic() + TURN_TIMEOUT
            note = interrupt(stack, start, procs, deadline) if client.interrupted(turn) else ""
            while any(p.poll() is None for p in procs):
                if len(stack.front.snapshot()) - start > MAX_REQUESTS_PER_TURN * len(procs):
                    note = f"stopped after more than {MAX_REQUESTS_PER_TURN} requests"
                elif time.monotonic() > deadline:
                    note = f"stopped after {TURN_TIMEOUT} s"
                if note:
                    kill(procs)
                    break
                time.sleep(0.05)
            rc = next((p.wait() for p in procs if p.wait() != 0), 0)
            out.seek(0)
            err.seek(0)
            run.turns.append((start, len(stack.front.snapshot()), rc, out.read(), err.read() + note))
            if client.pause_after(turn):
                stack.advance_emulator_clock(client.pause_after(turn))
        run.front = stack.front.snapshot()
        run.back = stack.back.snapshot()
        if True:  # sessions are kept for every generation request (monitoring is on)
            # The session log is written once each answer has ended: wait for every entry.
            # (None for an API cachet only forwards and counts.)
            expected = len(run.generation()) if getattr(client, "envelope", True) else 0
            deadline = time.monotonic() + 30
            while True:
                run.session_list = stack.admin("/sessions?limit=1000")["sessions"]
                if sum(s["requests"] for s in run.session_list) >= expected or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            for s in run.session_list:
                run.sessions[s["id"]] = stack.admin(f"/sessions/{s['id']}")
                if any(client.interrupted(i) for i in range(client.turn_count())):
                    run.timelines[s["id"]] = http_get(
                        f"{stack.admin_url}/sessions/{urllib.parse.quote(s['id'], safe='')}/timeline").decode()
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


def kill(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def is_warmup(ex):
    """A Responses warmup (`generate: false`), which Codex sends first on each socket: it
    prepares the turn, has no output, and is not the turn's own request."""
    return ex.request_json().get("generate") is False


def interrupt(stack, start, procs, deadline):
    """Kill the turn's client INTERRUPT_AFTER seconds into its first generation request's
    answer, as a user stopping it mid-stream does; what it says of the turn. A socket's
    warmup (`generate: false`, Codex's first message) prepares the turn: the answer is the
    turn's own."""
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        if any(e.method == "POST" and is_generation(e.path) and e.status
               and not is_warmup(e)
               for e in stack.front.snapshot()[start:]):
            time.sleep(INTERRUPT_AFTER)
            kill(procs)
            return f"interrupted {INTERRUPT_AFTER} s into its first answer"
        time.sleep(0.02)
    return "ended before it could be interrupted"


# ---------------------------------------------------------------- assertions

def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def check_turns(r, run):
    for i, (start, end, rc, out, err) in enumerate(run.turns):
        if run.client.interrupted(i):
            gone = [e for e in run.generation(run.front[start:end]) if e.client_gone
                    and not is_warmup(e)]
            r.check(len(gone) == 1 and "interrupted" in err,
                    f"{run.label}: turn {i + 1} is interrupted in the middle of its first answer",
                    f"{err[-200:]!r}; the client went away from {len(gone)} answers")
            continue
        shown = out.count(EMULATOR_TEXT) >= run.client.invocation_count(i) or not run.client.shows_text(i)
        r.check(rc == 0 and shown, f"{run.label}: turn {i + 1} completes and shows the emulator's text",
                f"exit {rc}; stdout: {out[-400:]!r}; stderr: {err[-600:]!r}")


# A fingerprint session's id; a second conversation with the same fingerprint (twin first
# prompts) adds 12 hex digits of its second message's key (docs/src/sessions.md).
FINGERPRINT_ID = re.compile(r"fp-[0-9a-f]{32}(-[0-9a-f]{12})?$")


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
        # A request that presented a cachet key has its sessions under the key's name.
        named = rec["session"].removeprefix(getattr(client, "session_namespace", ""))
        ok = bool(FINGERPRINT_ID.match(named)) if source == "fingerprint" else named == sid
        if not ok:
            wrong.append((source, sid, rec["session"]))
    r.check(bool(run.records) and not wrong and len(run.records) == len(gen),
            f"{run.label}: cachet names each request's session as the docs say",
            f"{len(run.records)} records for {len(gen)} requests; mismatches: {wrong[:3]}")
    ids = {rec["session"] for rec in run.records}
    if client.one_session:
        r.check(len(ids) == 1, f"{run.label}: its turns are one session", f"sessions: {sorted(ids)}")
    # Sessions are kept for every generation request, policy or not (monitoring).
    named = {rec["session"] for rec in run.records}
    listed = {s["id"] for s in run.session_list}
    if client.id_source == "fingerprint":
        # A trace names a request's session as known when it went out: its fingerprint's.
        # The log may put it in a twin's session or a compacted conversation's
        # (docs/src/trace-format.md); every request is in a listed session all the same.
        held = sum(s["requests"] for s in run.session_list)
        r.check(named and held == len(run.generation()),
                f"{run.label}: GET /sessions lists the sessions of every request",
                f"listed {sorted(listed)} holding {held} requests of {len(run.generation())}")
    else:
        r.check(listed == named and named, f"{run.label}: GET /sessions lists the session",
                f"listed {sorted(listed)}, the requests named {sorted(named)}")


# What a signature adds to a request (SigV4): the headers a re-signed request may differ in.
SIGNATURE_HEADERS = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
SHIM_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
# What cachet changes on every billed request (docs/src/operations/proxy.md): it asks for an
# uncompressed answer, whose usage it reads.
CACHET_REWRITES = {"accept-encoding"}


def check_cloud_headers(r, run):
    """A request through a team's cachet on Bedrock or Vertex goes upstream with the client's
    headers as they came, but for its cachet key (taken off) and the cloud's credential cachet
    holds: Bedrock's SigV4 signature headers, Vertex's bearer token."""
    front, back = run.generation(), run.generation(run.back)
    held = {"bedrock": None, "vertex": f"Bearer {HELD_VERTEX_TOKEN}"}[run.client.cloud]
    differ, unsigned = [], []
    for f, b in zip(front, back):
        fh = {k: v for k, v in f.req_headers if k not in SHIM_HOP and k != "x-api-key"}
        bh = {k: v for k, v in b.req_headers if k not in SHIM_HOP}
        changed = {k for k in fh.keys() | bh.keys() if fh.get(k) != bh.get(k)} - CACHET_REWRITES
        if not changed <= SIGNATURE_HEADERS:
            differ.append(sorted(changed - SIGNATURE_HEADERS))
        auth = bh.get("authorization") or ""
        ok = auth.startswith("AWS4-HMAC-SHA256 Credential=" + AWS_KEY_ID) if held is None else auth == held
        if not ok:
            unsigned.append(auth[:40])
    r.check(front and len(front) == len(back) and not differ,
            f"{run.label}: each request goes upstream with the headers it came with, but for the credential",
            f"headers changed beyond the credential: {differ[:3]}; {len(front)} sent, {len(back)} upstream")
    what = "signed with SigV4 by the credentials cachet holds" if held is None else "with the token cachet holds"
    r.check(not unsigned, f"{run.label}: each request goes upstream {what}", f"authorization {unsigned[:3]}")


def usage_seen(body):
    """(uncached, cache read, cache write, output) of an answer as the client read it: the
    Messages usage of its documents (a stream's later counts replace the earlier), or
    Converse's."""
    counts = {}
    for doc in json_documents(body):
        for usage in (doc.get("usage"), (doc.get("message") or {}).get("usage")):
            if isinstance(usage, dict):
                for k, v in usage.items():
                    if isinstance(v, int):
                        counts[k] = v
    get = lambda *names: next((counts[n] for n in names if n in counts), 0)
    return (get("input_tokens", "inputTokens"), get("cache_read_input_tokens", "cacheReadInputTokens"),
            get("cache_creation_input_tokens", "cacheWriteInputTokens"), get("output_tokens", "outputTokens"))


def check_usage_metrics(r, run):
    """cachet's token counters equal the usage the client was sent, kind by kind."""
    seen = [0, 0, 0, 0]
    for e in run.generation():
        for i, n in enumerate(usage_seen(e.resp_body)):
            seen[i] += n
    provider = next(iter(run.client.providers))
    def counted(name, kind=None):
        total = 0.0
        for line in run.metrics.splitlines():
            if line.startswith(name + "{") and f'provider="{provider}"' in line and \
                    (kind is None or f'kind="{kind}"' in line):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)
    metrics = [counted("cachet_input_tokens_total", "uncached"), counted("cachet_input_tokens_total", "cache_read"),
               counted("cachet_input_tokens_total", "cache_write"), counted("cachet_output_tokens_total")]
    r.check(seen == metrics and sum(seen) > 0,
            f"{run.label}: the metrics (provider={provider}) equal the usage the agent was sent "
            f"(uncached, read, written, output: {seen})", f"metrics {metrics}")


def check_bytes(r, run):
    forwarded = [e for e in run.front if e.path.startswith(("/v1/", "/v1beta/", "/model/"))
                 and not e.header("x-cachet-error", "resp")]
    back = {}
    for e in run.back:
        back.setdefault((e.method, e.path, sha(e.req_body)), []).append(e)
    unmatched, resp_diff, secret_diff = [], [], []
    for e in forwarded:
        candidates = back.get((e.method, e.path, sha(e.req_body)))
        if not candidates:
            unmatched.append(f"{e.method} {e.path} ({len(e.req_body)} bytes)")
            continue
        # An interrupted answer reached the client as far as it went: a start of the upstream's.
        def same_answer(b):
            return b.resp_body.startswith(e.resp_body) if e.client_gone else b.resp_body == e.resp_body
        # Requests with the same bytes (a socket's message and an HTTP request, or two alike
        # sent at once) may reach the upstream in another order: the one on the same kind of
        # connection with the same answer is this request's, if there is one.
        same_kind = [c for c in candidates if c.over_socket == e.over_socket] or candidates
        b = next((c for c in same_kind if same_answer(c)), same_kind[0])
        candidates.remove(b)
        whole = same_answer(b)
        if not whole or b.status != e.status:
            resp_diff.append(f"{e.method} {e.path}: upstream {b.status} {len(b.resp_body)} bytes, "
                             f"client {e.status} {len(e.resp_body)} bytes")
        for name in ("x-api-key", "authorization", "x-goog-api-key"):
            if b.header(name) != e.header(name) and not getattr(run.client, "cloud_client", False):
                secret_diff.append(name)
    r.check(not unmatched and len(forwarded) == len(run.back) and forwarded,
            f"{run.label}: the upstream receives exactly the bytes the agent sent ({len(forwarded)} requests)",
            f"not received as sent: {unmatched[:3]}; {len(run.back)} upstream requests")
    r.check(not resp_diff, f"{run.label}: the agent receives exactly the bytes the upstream sent",
            "; ".join(resp_diff[:3]))
    r.check(not secret_diff, f"{run.label}: credentials are forwarded as sent", ", ".join(secret_diff))


def check_websocket(r, run):
    """A client that asks for a WebSocket first (Codex on OpenAI's own provider, or signed in
    with ChatGPT) gets the upstream's socket through cachet: every upgrade reaches the
    upstream and is answered 101 with its headers (the ChatGPT backend's `x-codex-turn-state`
    included), none is answered 426 by cachet, and the agent opens no more sockets than it
    runs turns (no `Reconnecting...`). Its turns then are the sockets' `response.create`
    messages, which the other checks read as they read HTTP requests."""
    asked = [e for e in run.front if (e.header("upgrade") or "").lower() == "websocket"
             and not e.over_socket]
    if not asked and not getattr(run.client, "websocket_first", False):
        return
    if "websocket = false" in (run.client.extra_config or ""):
        # Switched off: cachet answers the upgrade 426 itself, which Codex falls back from at
        # once, for the rest of its process.
        answered = [e for e in asked if e.status == 426 and e.header("x-cachet-error", "resp") == "1"]
        forwarded = [e for e in run.back if (e.header("upgrade") or "")]
        r.check(asked and len(answered) == len(asked) and not forwarded
                and len(asked) <= len(run.turns),
                f"{run.label}: with server.websocket = false, upgrades are answered 426 by cachet "
                f"({len(asked)} asked in {len(run.turns)} turns)",
                f"{len(answered)} of {len(asked)} answered 426; {len(forwarded)} forwarded")
        return
    switched = [e for e in asked if e.status == 101]
    refused = [e for e in asked if e.header("x-cachet-error", "resp") == "1"]
    upstream = [e for e in run.back if (e.header("upgrade") or "").lower() == "websocket"
                and e.status == 101 and not e.over_socket]
    r.check(asked and len(switched) == len(asked) == len(upstream) and not refused,
            f"{run.label}: WebSocket upgrades reach the upstream and switch ({len(asked)} asked)",
            f"{len(switched)} of {len(asked)} switched, {len(upstream)} upstream, "
            f"{len(refused)} answered by cachet ({[e.status for e in asked]})")
    state = [e for e in switched if e.header("x-codex-turn-state", "resp")]
    if run.client.name.startswith("codex-chatgpt"):
        r.check(len(state) == len(switched),
                f"{run.label}: the backend's x-codex-turn-state reaches the agent",
                f"{len(state)} of {len(switched)} 101s carry it")
    over_socket = [e for e in run.generation() if e.over_socket]
    turns = len(run.turns)
    # Codex sends its compaction's summary request (no tools) on a socket of its own.
    summaries = [e for e in over_socket if not e.request_json().get("tools")
                 and last_text(e.request_json().get("input")).startswith(CODEX_SUMMARY_PROMPT)]
    r.check(len(asked) <= turns + len(summaries) and over_socket,
            f"{run.label}: the agent runs its turns over the socket "
            f"({len(asked)} sockets in {turns} turns and {len(summaries)} compactions, "
            f"{len(over_socket)} requests over them)",
            f"{len(asked)} sockets in {turns} turns: the agent reconnected; "
            f"{len(over_socket)} requests over sockets")
    # Codex warms each socket up (`generate: false`): no output, logged as a warmup, and
    # diagnosed only for a switch of model, which misses there (OpenAI's WebSocket mode
    # guide: it "prepares request state").
    warm = [x for x in requests_sent(run) if is_warmup(x.ex)]
    if warm:
        wrong = [(x.ex.seq, x.entry.get("warmup"), reason(x)) for x in warm
                 if not x.entry.get("warmup") or reason(x) not in (None, "model_changed")]
        outputs = [d.get("response", {}).get("output") for x in warm
                   for d in json_documents(x.ex.resp_body) if d.get("type") == "response.completed"]
        r.check(not wrong and outputs == [[]] * len(warm),
                f"{run.label}: the socket's {len(warm)} warmups have no output and are logged as "
                f"warmups, diagnosed only for a switch of model",
                f"(seq, warmup, diagnosis) {wrong}; outputs {outputs}")


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
        # A warm-up (`generate: false`, which Codex sends first on a new socket) prepares
        # the request and samples nothing: the turn's first request is the one after it.
        sampled = [e for e in turns[1] if not is_warmup(e)] if len(turns) > 1 else []
        if sampled:
            first = sampled[0]
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


Sent = collections.namedtuple("Sent", "ex turn session entry")


def response_id(ex):
    """The provider's id of an answer: its first event names it, so an interrupted one too."""
    for doc in json_documents(ex.resp_body):
        for v in (doc.get("message"), doc.get("response"), doc):
            if isinstance(v, dict) and isinstance(v.get("id"), str):
                return v["id"]
        if isinstance(doc.get("responseId"), str):  # Gemini
            return doc["responseId"]
    return None


def requests_sent(run):
    """Each generation request in the order sent, with its turn (the client's invocation),
    and the session and request entry cachet logged for it (found by its answer's id)."""
    by_answer = {e.get("response_id"): (sid, e) for sid, e in request_entries(run) if e.get("response_id")}
    # An answer cut before it named its id (a Responses stream names it in its last event)
    # leaves an entry without one: such entries go to such requests, in order.
    unnamed = [(sid, e) for sid, e in request_entries(run) if not e.get("response_id")]
    out = []
    for ex in run.generation():
        turn = next(i for i, t in enumerate(run.turns) if t[0] <= ex.seq < t[1])
        found = by_answer.get(response_id(ex))
        if found is None and ex.client_gone and unnamed:
            found = unnamed.pop(0)
        sid, entry = found or (None, {})
        out.append(Sent(ex, turn, sid, entry))
    return out


def reason(x):
    return (x.entry.get("diagnosis") or {}).get("reason")


def first_text(items):
    """The text of the first part of the first message of a history, or of a system prompt."""
    if isinstance(items, str):
        return items
    first = (items or [{}])[0]
    content = first.get("content", first.get("text", "")) if isinstance(first, dict) else ""
    if isinstance(content, list):
        content = (content or [{}])[0].get("text", "")
    return content if isinstance(content, str) else ""


def last_text(items):
    return first_text(list(reversed(items or [])))


def check_one_session(r, run, sent, what):
    unlogged = [x.ex.seq for x in sent if not x.entry]
    r.check(len(run.sessions) == 1 and not unlogged,
            f"{run.label}: one session through {what} ({len(sent)} requests)",
            f"sessions {sorted(run.sessions)}; requests without an entry: {unlogged}")


def check_turn_indexes(r, run, sent, expected=None):
    """Each request's turn index is the turn (invocation) it was sent in, or as `expected` says."""
    got = [x.entry.get("turn_index") for x in sent]
    want = expected or [x.turn for x in sent]
    r.check(got == want, f"{run.label}: the turn index goes on with the session's turns",
            f"turn indexes {got}, expected {want}")


def check_breaks(r, run, n, what):
    breaks = metric_sum(run.metrics, "cachet_prefix_breaks_total")
    r.check(breaks == n, f"{run.label}: {what}", f"cachet_prefix_breaks_total = {breaks:g}")


def check_gemini_cli(r, run):
    """Gemini CLI's turns are one session; each tool step reads what the step before sent
    and no request within a turn breaks the prefix. Resuming, Gemini CLI leaves out the
    earlier `thoughtSignature`s (no break) and repeats each function response of the turn it
    resumes: the one break is that client edit, named `message_edited` in `messages`, and
    turn 2 still reads everything before it from cache."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "two turns, the second resumed")
    found = [(x.turn, x.entry.get("diagnosis") or {}) for x in sent if x.entry.get("diagnosis")]
    within = [d for turn, d in found if turn == 0]
    resumed = [(d.get("section"), d.get("reason")) for turn, d in found if turn == 1]
    r.check(not within and resumed in ([], [("messages", "message_edited")]),
            f"{run.label}: no break within a turn; resuming, only the client's own edit is one",
            f"diagnoses {found}")
    reads = [cache_read(x.ex.resp_body) for x in sent]
    cold = [i for i, n in enumerate(reads) if i and n == 0]
    r.check(not cold, f"{run.label}: every request after the first reads from cache ({reads})",
            f"requests that read nothing: {cold}")


def check_twins(r, run):
    """Two conversations that share a fingerprint are two sessions, each its own lane and
    append-only: no break. Their first requests are the same bytes, which nothing tells
    apart: both go on the fingerprint's session (a known limit, docs/src/sessions.md)."""
    sent = requests_sent(run)
    unlogged = [x.ex.seq for x in sent if not x.entry]
    r.check(len(run.sessions) == 2 and not unlogged,
            f"{run.label}: the two conversations are two sessions ({len(sent)} requests)",
            f"sessions {sorted(run.sessions)}; requests without an entry: {unlogged}")
    # A conversation is told by its second message, the first answer (its tool-call ids).
    by_answer = {}
    for x in sent:
        messages = x.ex.request_json().get("messages") or []
        if len(messages) >= 2:
            by_answer.setdefault(canonical(messages[1]), set()).add(x.session)
    apart = [sorted(v) for v in by_answer.values()]
    r.check(len(apart) == 2 and all(len(v) == 1 for v in apart) and apart[0] != apart[1],
            f"{run.label}: each conversation's requests, from its first answer on, are in one session of its own",
            f"sessions by conversation: {apart}")
    firsts = {x.session for x in sent if len(x.ex.request_json().get("messages") or []) == 1}
    plain = [sid for sid in run.sessions if re.fullmatch(r"fp-[0-9a-f]{32}", sid)]
    r.check(len(firsts) == 1 and firsts == set(plain),
            f"{run.label}: the two first requests, the same bytes, go on the fingerprint's session",
            f"first requests in {sorted(firsts)}; fingerprint sessions {plain}")
    lanes = {(x.session, x.entry.get("lane")) for x in sent}
    r.check(len(lanes) == 2, f"{run.label}: each session is one lane", f"lanes {sorted(lanes)}")
    cold = [x.ex.seq for x in sent[1:] if cache_read(x.ex.resp_body) == 0]
    r.check(not cold, f"{run.label}: every request after the very first reads from cache", f"read 0: {cold}")
    check_no_breaks(r, run, "both conversations are append-only: no break")


PI_SUMMARY_SYSTEM = "You are a context summarization assistant"
PI_COMPACTED = "The conversation history before this point was compacted"


def check_pi_long(r, run):
    """pi compacts once inside turn 2's tool loop, then switches model: its conversation is
    one session; the compacted history (pi's summary, the turns kept, the new tool result)
    starts a lane of its own without a break, in the turn it was in; the switch is diagnosed
    `model_changed` on that lane, the session's only break. pi's summarisation request (its
    own system prompt, the conversation in one message) is a session of one request, a known
    limit (docs/src/sessions.md)."""
    sent = requests_sent(run)
    summaries = [x for x in sent if first_text(x.ex.request_json().get("system")).startswith(PI_SUMMARY_SYSTEM)]
    conversation = [x for x in sent if x not in summaries]
    conv_sessions = {x.session for x in conversation}
    alone = [x.session for x in summaries
             if x.session not in conv_sessions and len(request_entries_of(run, x.session)) == 1]
    r.check(len(summaries) == 1 and len(alone) == 1,
            f"{run.label}: pi compacts once; its summarisation request is a session of one request",
            f"{len(summaries)} summarisation requests, alone in their session: {alone}")
    unlogged = [x.ex.seq for x in conversation if not x.entry]
    r.check(len(conv_sessions) == 1 and not unlogged,
            f"{run.label}: the conversation is one session through the compaction and the switch "
            f"({len(conversation)} requests)", f"sessions {sorted(conv_sessions)}; unlogged {unlogged}")
    compacted = [i for i, x in enumerate(conversation)
                 if first_text(x.ex.request_json().get("messages")).startswith(PI_COMPACTED)]
    if not r.check(compacted and compacted[0] > 0, f"{run.label}: the compacted history is sent"):
        return
    before, after = conversation[compacted[0] - 1], conversation[compacted[0]:]
    new_lane = {x.entry.get("lane") for x in after}
    r.check(after[0].turn == 1 and len(new_lane) == 1 and before.entry.get("lane") not in new_lane
            and not reason(after[0]),
            f"{run.label}: the compacted history starts a lane of its own inside turn 2, without a break",
            f"turn {after[0].turn + 1}; lanes {before.entry.get('lane')} then {sorted(new_lane)}; "
            f"diagnosis {after[0].entry.get('diagnosis')}")
    check_turn_indexes(r, run, conversation)
    switch = next((x for x in conversation if x.turn == 2), None)
    r.check(switch and reason(switch) == "model_changed" and switch.entry.get("lane") in new_lane,
            f"{run.label}: the switch of model is diagnosed model_changed on the compacted lane",
            f"diagnosis {switch and switch.entry.get('diagnosis')}; lane {switch and switch.entry.get('lane')}")
    check_breaks(r, run, 1, "the switch is the only break")


def request_entries_of(run, session):
    return [e for e in run.sessions.get(session, {}).get("entries", []) if e.get("type") == "request"]


CODEX_SUMMARY_PROMPT = "You are performing a CONTEXT CHECKPOINT COMPACTION"


def check_codex_long(r, run):
    """Codex switches model, passes its compaction limit on the new model and compacts inside
    that turn: one session; the first request on the new model is diagnosed `model_changed`
    on the conversation's lane; Codex's summary request, sent without tools, reads nothing
    and is diagnosed `tools_changed` (the cached prefix starts with the tools); the compacted
    history starts a lane of its own without a break, and the turns go on."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "a switch of model and a compaction")
    summaries = [i for i, x in enumerate(sent) if not x.ex.request_json().get("tools")
                 and last_text(x.ex.request_json().get("input")).startswith(CODEX_SUMMARY_PROMPT)]
    if not r.check(len(summaries) == 1 and sent[summaries[0]].turn == 2,
                   f"{run.label}: Codex compacts once, in the turn on the new model",
                   f"summary requests at {[sent[i].ex.seq for i in summaries]}"):
        return
    summary = sent[summaries[0]]
    switch = next(x for x in sent if x.turn == 2)
    lane = sent[0].entry.get("lane")
    r.check(reason(switch) == "model_changed" and switch.entry.get("lane") == lane,
            f"{run.label}: the switch of model is diagnosed model_changed on the conversation's lane",
            f"diagnosis {switch.entry.get('diagnosis')}; lane {switch.entry.get('lane')}, was {lane}")
    r.check(reason(summary) == "tools_changed" and summary.entry.get("lane") == lane,
            f"{run.label}: the summary request, without tools, is diagnosed tools_changed on that lane",
            f"diagnosis {summary.entry.get('diagnosis')}; lane {summary.entry.get('lane')}")
    after = sent[summaries[0] + 1:]
    lanes = {x.entry.get("lane") for x in after}
    diagnosed = [x.entry.get("diagnosis") for x in after if x.entry.get("diagnosis")]
    r.check(after and len(lanes) == 1 and lane not in lanes and not diagnosed,
            f"{run.label}: the compacted history starts a lane of its own, without a break",
            f"lanes {sorted(lanes)}; diagnosed {diagnosed}")
    check_turn_indexes(r, run, sent)
    check_breaks(r, run, 2, "the switch and the summary request are the only breaks")


def check_codex_chatgpt_long(r, run):
    """Codex signed in with ChatGPT compacts before turn 2 by a Responses request ending with
    `compaction_trigger`, answered with exactly one compaction item; that request extends
    turn 1 (no break, its lane); the compacted history (the user messages, the compaction
    item, the new prompt) starts a lane of its own as the next turn; the switch of model is
    diagnosed `model_changed` on that lane, the only break."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "an inline compaction and a switch of model")
    triggers = [i for i, x in enumerate(sent)
                if ((x.ex.request_json().get("input") or [{}])[-1] or {}).get("type") == "compaction_trigger"]
    if not r.check(len(triggers) == 1 and sent[triggers[0]].turn == 1,
                   f"{run.label}: Codex compacts once, before turn 2, by compaction_trigger",
                   f"compaction requests at {[sent[i].ex.seq for i in triggers]}"):
        return
    t = sent[triggers[0]]
    done = [d.get("item", {}).get("type") for d in json_documents(t.ex.resp_body)
            if d.get("type") == "response.output_item.done"]
    r.check(done == ["compaction"], f"{run.label}: the compaction is answered with exactly one compaction item",
            f"output items {done}")
    lane = sent[0].entry.get("lane")
    r.check(not reason(t) and t.entry.get("lane") == lane,
            f"{run.label}: the compaction request extends turn 1: no break, on its lane",
            f"diagnosis {t.entry.get('diagnosis')}; lane {t.entry.get('lane')}, was {lane}")
    # Over a socket Codex opens each `codex exec` with a warmup (`generate: false`), shown on
    # the lane last active: the lanes are the turns'.
    after = [x for x in sent[triggers[0] + 1:] if not x.entry.get("warmup")]
    lanes = {x.entry.get("lane") for x in after}
    r.check(after and len(lanes) == 1 and lane not in lanes and not reason(after[0]),
            f"{run.label}: the compacted history starts a lane of its own, without a break",
            f"lanes {sorted(lanes)}; diagnosis {after and after[0].entry.get('diagnosis')}")
    # The switch misses on the turn's first request: over a socket, Codex's warmup.
    switch = next((x for x in sent[triggers[0] + 1:] if x.turn == 2), None)
    r.check(switch and reason(switch) == "model_changed",
            f"{run.label}: the switch of model is diagnosed model_changed on the compacted lane",
            f"diagnosis {switch and switch.entry.get('diagnosis')}")
    # The compaction request carries turn 1's history: it is in turn 1 (index 0).
    check_turn_indexes(r, run, sent, [0 if x is t else x.turn for x in sent])
    check_breaks(r, run, 1, "the switch is the only break")


def check_interrupt(r, run):
    """The client killed mid-answer: the request's entry says how its answer ended
    (`client_gone`), its timeline row says it was interrupted, and the next turn goes on in
    the same session and lane, without a break."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "an interrupt")
    gone = [x for x in sent if x.ex.client_gone]
    if not gone:
        return
    x = gone[0]
    others = [y.entry.get("outcome") for y in sent if y is not x and y.entry.get("outcome")]
    r.check(x.entry.get("outcome") == "client_gone" and not others,
            f"{run.label}: the interrupted request's entry says client_gone, and only its",
            f"outcome {x.entry.get('outcome')!r}; others {others}")
    page = run.timelines.get(x.session, "")
    r.check(page.count("interrupted by the client") == 1,
            f"{run.label}: its timeline row says it was interrupted by the client",
            f"{page.count('interrupted by the client')} such rows in the timeline")
    later = [y for y in sent if y.turn > x.turn]
    lanes = {y.entry.get("lane") for y in later}
    r.check(later and lanes == {x.entry.get("lane")},
            f"{run.label}: the next turn goes on in the interrupted request's lane",
            f"lanes {sorted(lanes)}, interrupted on {x.entry.get('lane')}")
    check_no_breaks(r, run, "no break after the interrupt")


def check_paced(r, run):
    """More than 15 requests, never more than 12 in a minute on the emulator's clock: none
    overflows to a machine without the prefix, and nothing is diagnosed (no `rate_overflow`,
    no `unexplained`)."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "three paced turns")
    r.check(len(sent) > 15, f"{run.label}: the session is over 15 requests ({len(sent)})")
    cold = [x.ex.seq for x in sent[1:] if cache_read(x.ex.resp_body) == 0]
    r.check(not cold, f"{run.label}: every request after the first reads from cache: none overflowed",
            f"read 0: {cold}")
    check_no_breaks(r, run, "nothing diagnosed: no rate_overflow, no unexplained")


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


def history(body):
    """A request's history: `messages`, `input` (Responses) or `contents` (Gemini)."""
    return body.get("messages") or body.get("input") or body.get("contents") or []


def check_storage(r, run):
    # Storage: every distinct message, system prompt and tool list once, plus a small entry
    # per request. A log that copies the history into every entry grows with its square.
    unique = set()
    for e in run.generation():
        body = e.request_json()
        items = history(body)
        for item in items if isinstance(items, list) else [items]:
            unique.add(canonical(item))
        for part in ("system", "tools", "instructions", "systemInstruction"):
            if body.get(part):
                unique.add(canonical(body[part]))
    content = sum(len(u) for u in unique)
    n = len(run.generation())
    bound = 2 * content + 2048 * n
    # Each request entry names the messages it adds to the one it extends: over the session
    # that is about the number of distinct messages, not the sum of every history's length.
    named = sum(len((e.get("sent") or {}).get("keys") or []) for _, e in request_entries(run))
    histories = sum(len(history(e.request_json())) for e in run.generation())
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
    secrets = [s for s in (ANTHROPIC_KEY, OAUTH_TOKEN, OPENAI_KEY, CHATGPT_TOKEN, GEMINI_KEY, TEAM_KEY,
                           HELD_ANTHROPIC, HELD_OPENAI, HELD_VERTEX_TOKEN, AWS_SECRET) if s in run.serve_log]
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


def check_burst(r, run):
    """18 requests within seconds: the 16th and later go to machines that have not cached
    the prefix (they read nothing), and each is diagnosed `rate_overflow`, never
    `unexplained`."""
    sent = requests_sent(run)
    check_one_session(r, run, sent, "three turns in a burst")
    cold = [i for i, x in enumerate(sent) if i and cache_read(x.ex.resp_body) == 0]
    r.check(cold == list(range(OVERFLOW_PER_MINUTE, len(sent))),
            f"{run.label}: the requests past {OVERFLOW_PER_MINUTE} in a minute read nothing",
            f"requests that read 0: {cold} of {len(sent)}")
    reasons = [reason(x) for x in sent]
    want = [None] * OVERFLOW_PER_MINUTE + ["rate_overflow"] * (len(sent) - OVERFLOW_PER_MINUTE)
    r.check(reasons == want, f"{run.label}: each of them is diagnosed rate_overflow, nothing else",
            f"diagnoses {reasons}")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachet", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--newest-bin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    NEWEST_BIN_DIR[0] = args.newest_bin_dir
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
        if getattr(client, "cloud_client", False):
            check_cloud_headers(r, base)
            check_usage_metrics(r, base)
        if client.serve_config:
            check_keyed(r, base)
            check_common(r, base)
            print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
            continue
        if getattr(client, "http2", False):
            spoken = [e.http2 for e in base.generation()]
            r.check(spoken and all(spoken), f"{base.label}: the agent speaks HTTP/2 to cachet",
                    f"{spoken.count(True)} of {len(spoken)} requests over HTTP/2")
        if not getattr(client, "envelope", True):
            # Forwarded and counted only: the bytes, the cache read, and no credential logged.
            check_bytes(r, base)
            check_cache(r, base)
            check_common(r, base)
            print(f"-- {client.name}: {time.monotonic() - t0:.1f} s")
            continue
        check_identity(r, base)
        check_bytes(r, base)
        check_websocket(r, base)
        check_cache(r, base)
        if client.check:
            client.check(r, base)
        else:
            check_no_breaks(r, base, "no prefix break without a policy (monitoring)")
        check_storage(r, base)
        check_common(r, base)
        if client.check:  # a scenario of its own: without a policy only
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
            if getattr(client, "cloud_client", False):
                check_usage_metrics(r, run)
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
