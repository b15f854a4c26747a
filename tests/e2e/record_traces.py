#!/usr/bin/env python3
"""Record the replay traces of tests/data/traces/ with real agents (run by
scripts/record-traces.sh; see tests/data/traces/README.md).

Each session runs through `cachet serve --record DIR` (no policy: the client's own
requests) in front of `cachet emulate --tool-calls first --tool-steps N`, one user turn
per client invocation, with the pieces of the agents end-to-end run (tests/e2e/run.py):
the same clients, configured from the book's client blocks (docs/src/agents.md), in scratch folders with their own
HOME and dummy keys. Between turns the person's pause is played on the emulator's clock
(`POST /emulator/clock/advance`): the emulator's cache expires as it would have, and the
records of every later turn are moved later by the same amount, so that their `time`
fields show the pause (replay reads time from the records).

Usage: record_traces.py --cachet BIN --bin-dir NODE_BIN --out DIR [--scratch DIR] [--only NAME,...]
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(__file__))
import run as e2e  # noqa: E402

ROOT = e2e.ROOT
TOOL_STEPS = 12
TURN_TIMEOUT = 600
MAX_REQUESTS_PER_TURN = 80


class Session:
    """One recorded session: a client, its prompts, and the pauses before turns 2, 3, ..."""

    def __init__(self, name, client, prompts, pauses, files=None):
        self.name = name
        self.client = client
        self.prompts = prompts
        self.pauses = pauses
        self.files = files or {}


class SdkUnmarked:
    """tests/e2e/sdk_unmarked.py: the Anthropic Python SDK, no cache_control."""

    name = "sdk-unmarked"

    def setup(self, ctx):
        pass

    def env(self, ctx):
        env = e2e.client_env(ctx.blocks, "sdk", ctx.base)
        env["ANTHROPIC_API_KEY"] = e2e.ANTHROPIC_KEY
        return env

    def argv(self, ctx, turn):
        return [sys.executable, os.path.join(ROOT, "tests", "e2e", "sdk_unmarked.py"),
                os.path.join(ctx.work, ".sdk-state.json"), str(turn + 1)]


class Prompted:
    """A run.py client with prompts of our own."""

    def __init__(self, client, prompts):
        self.inner = client
        self.prompts = prompts
        self.name = client.name

    def setup(self, ctx):
        self.inner.setup(ctx)

    def env(self, ctx):
        return self.inner.env(ctx)

    def argv(self, ctx, turn):
        argv = self.inner.argv(ctx, 0 if turn == 0 else 1)
        argv[-1] = self.prompts[turn]
        return argv


def source_file(rel):
    return open(os.path.join(ROOT, rel)).read()


PI_PROMPTS = [
    "Read the module in `example path` and tell me what it does.",
    "Read it again and list every function that can fail.",
    "One more pass: which of those failures reach the caller?",
]
CC_PROMPTS = [
    "Read `example file_path` and summarise what the module does.",
    "Read it again and list every function that can fail.",
    "One more pass: which of those failures reach the caller?",
]
# The file the emulator's scripted tool calls read: `read` gets {"path": "example path"}
# (pi), `Read` {"file_path": "example file_path"} (Claude Code).
SAMPLE_SOURCE = "src/session/flow.rs"

SESSIONS = [
    Session("pi-anthropic", Prompted(e2e.CLIENTS[0], PI_PROMPTS), PI_PROMPTS,
            pauses=[7 * 60, 2 * 60], files={"example path": SAMPLE_SOURCE}),
    Session("claude-code", Prompted(e2e.CLIENTS[3], CC_PROMPTS), CC_PROMPTS,
            pauses=[6 * 60, 18 * 60], files={"example file_path": SAMPLE_SOURCE}),
    Session("sdk-unmarked", SdkUnmarked(), [None, None, None], pauses=[60, 3 * 60]),
]


def rfc3339(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{ms % 1000:03d}Z"


def parse_time(text):
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
               .timestamp() * 1000)


def advance(emulator_url, seconds):
    req = urllib.request.Request(emulator_url + "/emulator/clock/advance",
                                 data=json.dumps({"seconds": seconds}).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def record(session, args, blocks):
    e2e.TOOL_STEPS = TOOL_STEPS
    scenario = os.path.join(args.scratch or os.path.join(args.out, "work"), session.name)
    shutil.rmtree(scenario, ignore_errors=True)
    stack = e2e.Stack(args.cachet, scenario, [])
    starts = []
    try:
        ctx = e2e.Context(stack.front.url, blocks, args.bin_dir, scenario)
        for name, rel in session.files.items():
            with open(os.path.join(ctx.work, name), "w") as f:
                f.write(source_file(rel))
        session.client.setup(ctx)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": ctx.home, "TERM": "dumb", "NO_COLOR": "1",
               "LANG": "C.UTF-8", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        env.update(session.client.env(ctx))
        for turn in range(len(session.prompts)):
            if turn > 0:
                advance(stack.emulator_url, session.pauses[turn - 1])
            starts.append(int(time.time() * 1000))
            before = len(stack.front.snapshot())
            out = open(os.path.join(scenario, f"turn{turn + 1}.out"), "w+")
            err = open(os.path.join(scenario, f"turn{turn + 1}.err"), "w+")
            p = subprocess.Popen(session.client.argv(ctx, turn), cwd=ctx.work, env=env, stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + TURN_TIMEOUT
            while p.poll() is None:
                if len(stack.front.snapshot()) - before > MAX_REQUESTS_PER_TURN or time.monotonic() > deadline:
                    p.kill()
                    raise RuntimeError(f"{session.name}: turn {turn + 1} did not finish")
                time.sleep(0.05)
            out.seek(0)
            text = out.read()
            if p.returncode != 0 or e2e.EMULATOR_TEXT not in text:
                err.seek(0)
                raise RuntimeError(f"{session.name}: turn {turn + 1} failed: {text[-300:]!r} {err.read()[-600:]!r}")
            print(f"{session.name}: turn {turn + 1}: {len(stack.front.snapshot()) - before} requests", flush=True)
            time.sleep(1)  # the recorder's queue is written out
    finally:
        stack.stop()
    records = []
    record_dir = os.path.join(scenario, "record")
    for name in sorted(os.listdir(record_dir)):
        records += [json.loads(line) for line in open(os.path.join(record_dir, name)) if line.strip()]
    # The pause before turn k moves every record of turn k and later by the pauses so far.
    for rec in records:
        t = parse_time(rec["time"])
        shift = sum(pause for start, pause in zip(starts[1:], session.pauses) if t >= start)
        rec["time"] = rfc3339(t + shift * 1000)
    records.sort(key=lambda r: r["time"])
    check_secrets(records)
    path = os.path.join(args.out, f"{session.name}.jsonl.gz")
    text = "".join(json.dumps(rec, separators=(",", ":")) + "\n" for rec in records)
    with open(path, "wb") as f:
        f.write(gzip.compress(text.encode(), mtime=0))
    print(f"{session.name}: {len(records)} records in {path}", flush=True)


def check_secrets(records):
    text = json.dumps(records)
    for secret in (e2e.ANTHROPIC_KEY, e2e.OAUTH_TOKEN, e2e.OPENAI_KEY):
        if secret in text:
            raise RuntimeError("a credential reached the trace")


def versions(args):
    out = {}
    for name, cmd in [("pi", ["pi", "--version"]), ("claude", ["claude", "--version"])]:
        try:
            out[name] = subprocess.run([os.path.join(args.bin_dir, cmd[0]), *cmd[1:]], capture_output=True,
                                       text=True, timeout=60)
            out[name] = (out[name].stdout + out[name].stderr).strip()
        except OSError:
            out[name] = "?"
    import anthropic
    out["anthropic-python"] = anthropic.__version__
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachet", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--scratch", default="", help="folder for the clients' scratch folders and homes")
    args = ap.parse_args()
    blocks = e2e.client_blocks()
    only = set(filter(None, args.only.split(",")))
    print(f"clients: {versions(args)}", flush=True)
    for session in SESSIONS:
        if only and session.name not in only:
            continue
        record(session, args, blocks)


if __name__ == "__main__":
    main()
