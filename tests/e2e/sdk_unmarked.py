#!/usr/bin/env python3
"""An app on the official Anthropic Python SDK that sends no `cache_control` at all, for the
recorded trace tests/data/traces/sdk-unmarked.jsonl (see tests/e2e/record_traces.py).

Usage: python3 tests/e2e/sdk_unmarked.py STATE.json TURN

A code-review assistant: a system prompt, three tools, and one user turn per call, whose
tool loop the emulator scripts (`read_file` calls until its step limit). Tool results are
slices of this repository's own source files, so they have the size and shape of real
file reads. The second turn's prompt attaches every file of a folder as its own text
block, more blocks than the provider's 20-block cache lookback. The base URL comes from
ANTHROPIC_BASE_URL; nothing here names a session or marks a cache breakpoint.
"""

import json
import os
import sys

import anthropic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = "claude-sonnet-4-5"
MAX_STEPS = 20
SYSTEM = (
    "You are Reviewer, a code-review assistant for a Rust code base. You read the files the "
    "user points at, find defects, and explain each in two sentences: what is wrong and what "
    "to change. Prefer small, local fixes. Never invent APIs; quote the code you refer to. "
    "When a change touches error handling, say which caller sees the error and how. When it "
    "touches concurrency, name the lock or channel involved. Answer in plain text.\n\n"
) + "".join(
    f"House rule {i}: {rule}\n"
    for i, rule in enumerate(
        [
            "no unwrap, expect or panic on request paths; every failure is a typed error",
            "a function does one thing and its name says which",
            "comments say why, not what; the code says what",
            "every new dependency is justified in the README",
            "tests assert relations and invariants, never totals copied from a fixture",
            "secrets never reach logs, metrics or error messages",
            "untouched request bytes are forwarded exactly as received",
            "bounded memory: every cache and queue a client can grow has a limit",
        ]
        * 6,
        start=1,
    )
)
TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository, or a slice of it.",
     "input_schema": {"type": "object", "properties": {
         "path": {"type": "string", "description": "Path relative to the repository root."},
         "offset": {"type": "integer", "description": "First line to read (0-based)."}},
         "required": ["path"]}},
    {"name": "grep", "description": "Search the repository for a regular expression.",
     "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}},
                      "required": ["pattern"]}},
    {"name": "list_dir", "description": "List a folder of the repository.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                      "required": ["path"]}},
]
PROMPTS = [
    "Review the session store for durability bugs: what happens to a patch when the process dies?",
    None,  # the attachment turn, built below
    "Summarise the three most important fixes as a checklist.",
]
# Source files whose slices answer the tool calls, in order.
SOURCES = sorted(
    os.path.join(dp, f)
    for dp, _, files in os.walk(os.path.join(ROOT, "src", "session"))
    for f in files
    if f.endswith(".rs")
)
SLICE_LINES = 60


def tool_output(n):
    """The n-th file slice of the session: 60 lines of a source file."""
    path = SOURCES[n % len(SOURCES)]
    lines = open(path).read().splitlines()
    start = (n // len(SOURCES)) * SLICE_LINES % max(len(lines), 1)
    rel = os.path.relpath(path, ROOT)
    body = "\n".join(lines[start:start + SLICE_LINES])
    return f"{rel} (lines {start + 1}-{start + SLICE_LINES}):\n{body}"


def attachment_prompt():
    """Every file of src/policy/ as its own text block, then the question."""
    folder = os.path.join(ROOT, "src", "policy")
    blocks = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".rs"):
            head = "\n".join(open(os.path.join(folder, name)).read().splitlines()[:12])
            blocks.append({"type": "text", "text": f"Attached: src/policy/{name}\n{head}"})
    while len(blocks) < 24:
        blocks.append({"type": "text", "text": f"Attached note {len(blocks)}: see the policy README."})
    blocks.append({"type": "text", "text": "Now review these policy files the same way."})
    return blocks


def main():
    state_path, turn = sys.argv[1], int(sys.argv[2])
    state = json.load(open(state_path)) if os.path.exists(state_path) else {"history": [], "calls": 0}
    history = state["history"]
    prompt = PROMPTS[turn - 1] if PROMPTS[turn - 1] is not None else attachment_prompt()
    history.append({"role": "user", "content": prompt})
    client = anthropic.Anthropic(api_key=os.environ["ANTHROPIC_API_KEY"], max_retries=0)
    for _ in range(MAX_STEPS):
        message = client.messages.create(model=MODEL, max_tokens=1024, system=SYSTEM, tools=TOOLS,
                                         messages=history)
        history.append({"role": "assistant",
                        "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            print("".join(b.text for b in message.content if b.type == "text"))
            break
        results = []
        for c in calls:
            results.append({"type": "tool_result", "tool_use_id": c.id, "content": tool_output(state["calls"])})
            state["calls"] += 1
        history.append({"role": "user", "content": results})
    else:
        raise SystemExit(f"no answer after {MAX_STEPS} steps")
    json.dump(state, open(state_path, "w"))


if __name__ == "__main__":
    main()
