#!/usr/bin/env python3
"""Regenerate docs/src/images/timeline.png and docs/src/images/sessions.png from a real run.

It starts `cachet emulate` and `cachet serve` (with policies/stabilize-volatile.toml) on
loopback, drives a few scripted sessions through the proxy, and takes headless Chromium
screenshots of the admin pages. Every figure on them is what the emulator accounted and
cachet recorded. It pauses 5 minutes 10 seconds once, so that the 5-minute cache TTL
really expires: cachet records wall time, and the emulator's cache clock (which moves
only when told) is moved forward by the time that passed.

    cargo build --release && python3 docs/screenshots.py [path/to/cachet] [--quick]

`--quick` skips the pause (no TTL expiry) to check the script itself.

Needs python3 (standard library only) and Debian's chromium.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = [a for a in sys.argv[1:] if a != "--quick"]
CACHET = os.path.abspath(ARGS[0]) if ARGS else os.path.join(ROOT, "target", "release", "cachet")
IDLE_SECONDS = 0 if "--quick" in sys.argv else 310


def start(args, cwd):
    """Start a cachet command and return it with the URLs of the line it prints first."""
    proc = subprocess.Popen([CACHET] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=cwd, text=True)
    line = proc.stdout.readline()
    urls = [part.split()[0].rstrip(")").removesuffix("/metrics")
            for part in line.split("http://")[1:]]
    return proc, ["http://" + u for u in urls]


def post(url, headers, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def recorded(admin, session):
    try:
        with urllib.request.urlopen(f"{admin}/sessions/{session}", timeout=10) as resp:
            return json.loads(resp.read())["requests"]
    except urllib.error.HTTPError:
        return 0


def wait_recorded(admin, session, n):
    """Each entry is written once its answer has ended; wait for it, as a person typing
    would, so that the next request is compared with it."""
    for _ in range(500):
        if recorded(admin, session) >= n:
            return
        time.sleep(0.02)
    raise SystemExit(f"session {session} never reached {n} requests")


RULES = [
    "Read the relevant files before you change them, and keep changes small.",
    "Run the tests after every change and report failures with the command you ran.",
    "Never print secrets, tokens or keys, even when a file contains them.",
    "Prefer the project's existing helpers over writing new ones.",
    "Explain why in commit messages, not what; the diff shows what.",
    "When a command fails, read its output before trying again.",
]


def system_prompt(date):
    rules = "\n".join(f"{i + 1}. {RULES[i % len(RULES)]} (guideline {i % len(RULES) + 1})"
                      for i in range(110))
    return (f"You are an interactive coding agent working in a Rust repository.\n{rules}\n"
            f"<env>\nWorking directory: /home/dev/cachet\nToday's date: {date}\n</env>\n")


def tool(name, description, param):
    return {"name": name, "description": description,
            "input_schema": {"type": "object", "properties": {param: {"type": "string"}},
                             "required": [param]}}


TOOLS = [
    tool("bash", "Run a shell command in the repository and return its output.", "command"),
    tool("read_file", "Read a file of the repository.", "path"),
    tool("grep", "Search the repository for a regular expression.", "pattern"),
    tool("edit_file", "Replace the content of a file.", "path"),
]
MCP_TOOL = tool("mcp__github__create_pull_request", "Open a pull request on GitHub.", "title")


def output(lines, what):
    return "\n".join(f"src/{what}_{i}.rs:{i * 3 + 1}: let value_{i} = parse_field(&table, \"{what}_{i}\")?;"
                     for i in range(lines))


class Agent:
    """A coding agent in Claude Code's request shape: markers on the system prompt and on
    the last block of the last message, the session id in its own header."""

    def __init__(self, proxy, admin, session):
        self.proxy, self.admin, self.session = proxy, admin, session
        self.date = "2026-11-21"
        self.tools = list(TOOLS)
        self.messages = []
        self.sent = 0

    def headers(self):
        return {"x-api-key": "demo", "anthropic-version": "2023-06-01",
                "user-agent": "claude-cli/2.0.50 (external, cli)",
                "x-claude-code-session-id": self.session}

    def call(self, reply, model="claude-sonnet-4-5", system=None, messages=None):
        messages = json.loads(json.dumps(messages if messages is not None else self.messages))
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        body = {"model": model, "max_tokens": 1024, "messages": messages,
                "system": [{"type": "text", "text": system or system_prompt(self.date),
                            "cache_control": {"type": "ephemeral"}}]}
        if system is None:
            body["tools"] = self.tools
        answer = post(f"{self.proxy}/v1/messages",
                      {**self.headers(), "x-cachet-emulate-reply": reply}, body)
        self.sent += 1
        wait_recorded(self.admin, self.session, self.sent)
        return answer["content"]

    def turn(self, prompt, tool_name=None, tool_output=""):
        self.messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
        if tool_name:
            content = self.call(f"tool:{tool_name}")
            self.messages.append({"role": "assistant", "content": content})
            use = next(b for b in content if b["type"] == "tool_use")
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use["id"], "content": tool_output}]})
        self.messages.append({"role": "assistant", "content": self.call("text")})

    def title(self):
        """Claude Code names the conversation with a small model: a lane of its own."""
        first = self.messages[0]["content"][0]["text"]
        self.call("text", model="claude-haiku-4-5",
                  system="Write a 3-to-5-word title for this coding conversation.",
                  messages=[{"role": "user", "content": [{"type": "text", "text": first}]}])


def chat_session(proxy, admin, key, model, questions):
    """An OpenAI Chat Completions client with a prompt_cache_key (its session id)."""
    messages = [{"role": "system", "content": system_prompt("2026-11-22")}]
    for n, q in enumerate(questions, 1):
        messages.append({"role": "user", "content": q})
        answer = post(f"{proxy}/v1/chat/completions", {"authorization": "Bearer demo"},
                      {"model": model, "messages": messages, "prompt_cache_key": key})
        messages.append(answer["choices"][0]["message"])
        wait_recorded(admin, key, n)


def screenshot(url, path, height):
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--window-size=1280,{height}",
                        f"--screenshot={path}", url],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("wrote", os.path.relpath(path, ROOT))


def main():
    work = tempfile.mkdtemp(prefix="cachet-screenshots-")
    emulator, (upstream,) = start(["emulate", "--listen", "127.0.0.1:0"], work)
    started = time.time()
    serve, (proxy, admin) = start([
        "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
        "--anthropic-upstream", upstream, "--openai-upstream", upstream,
        "--store", os.path.join(work, "store"),
        "--policy", os.path.join(ROOT, "policies", "stabilize-volatile.toml")], work)
    try:
        agent = Agent(proxy, admin, "refactor-42")
        agent.turn("Where is the configuration file parsed?", "grep", output(40, "config"))
        agent.title()
        agent.turn("Add an idle time-out field to the upstream section.", "read_file",
                   output(60, "upstream"))
        agent.turn("Run the tests.", "bash", output(30, "test"))
        # Midnight: the date line changes; stabilize-volatile keeps it out of the prefix.
        agent.date = "2026-11-22"
        agent.turn("Summarise the change in two sentences.")
        # An MCP server connects: a new tool, and the cached prefix is lost from the tools on.
        agent.tools.append(MCP_TOOL)
        agent.turn("Open a pull request for it.", "mcp__github__create_pull_request", "PR #128 opened")
        paused = time.time()

        chat_session(proxy, admin, "notes-bot", "gpt-4.1",
                     ["Summarise yesterday's incident notes.", "Which service failed first?",
                      "Draft the follow-up tasks.", "Shorten them to five bullets."])
        chat_session(proxy, admin, "local-model", "llama-3.3-70b-local",
                     ["Explain the retry policy.", "And the back-off?"])
        reviewer = Agent(proxy, admin, "nightly-review")
        reviewer.turn("Review the diff of the last commit.", "bash", output(80, "diff"))
        reviewer.turn("Any risky change?")

        wait = IDLE_SECONDS - (time.time() - paused)
        print(f"waiting {wait:.0f} s so that the 5-minute cache TTL expires")
        time.sleep(max(0.0, wait))
        if IDLE_SECONDS:
            post(f"{upstream}/emulator/clock/advance", {}, {"seconds": time.time() - started})
        agent.turn("I'm back: did the pull request's checks pass?", "bash", output(12, "ci"))

        docs = os.path.join(ROOT, "docs", "src", "images")
        screenshot(f"{admin}/sessions/refactor-42/timeline", os.path.join(docs, "timeline.png"), 1450)
        screenshot(f"{admin}/sessions", os.path.join(docs, "sessions.png"), 440)
    finally:
        serve.terminate()
        emulator.terminate()
        serve.wait()
        emulator.wait()


if __name__ == "__main__":
    main()
