#!/usr/bin/env python3
"""A small agent on the official Python SDKs, for the end-to-end run.

Usage: python3 tests/e2e/sdk_client.py STATE.json TURN

Keeps six conversations (Anthropic Messages, Chat Completions, Responses; each streamed and
not) in STATE.json, and on each call adds one user turn to every one of them, running the
tool loop the emulator scripts until the reply is text, which it prints. Each turn also
calls count_tokens and both models.list; the first also uploads a file of UPLOAD_BYTES with
each SDK's Files API (above cachet's default 32 MiB limit for the bodies it reads) and checks
the size the emulator counted; from the second on, each compacts the whole Responses conversation
(`responses.compact`). Base URLs come from ANTHROPIC_BASE_URL and OPENAI_BASE_URL;
every conversation names its session with `x-cachet-session`.
"""

import json
import os
import sys

import anthropic
import openai

SYSTEM = "You are a careful assistant working in a scratch folder. Answer briefly. " * 150
PROMPTS = ["List the files in this folder.", "Now look at them again.", "And once more."]
MAX_STEPS = 10
TOOL_OUTPUT = "README.md\nnotes.txt"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-4.1"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
UPLOAD_BYTES = 40 * 1024 * 1024


def anthropic_client(name):
    return anthropic.Anthropic(api_key=os.environ["ANTHROPIC_API_KEY"], max_retries=0,
                               default_headers={"x-cachet-session": name})


def openai_client(name):
    return openai.OpenAI(api_key=os.environ["OPENAI_API_KEY"], max_retries=0,
                         default_headers={"x-cachet-session": name})


def marked(history):
    """The history with a cache marker on the last block, as agents place it."""
    out = json.loads(json.dumps(history))
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def system_prompt(name):
    """Each conversation its own prompt, so none reads what another one cached."""
    return f"Conversation {name}. {SYSTEM}"


def messages_turn(name, history, stream):
    client = anthropic_client(name)
    system = [{"type": "text", "text": system_prompt(name), "cache_control": {"type": "ephemeral"}}]
    tools = [{"name": "read", "description": "Read a file", "input_schema": SCHEMA}]
    for _ in range(MAX_STEPS):
        args = dict(model=ANTHROPIC_MODEL, max_tokens=256, system=system, tools=tools, messages=marked(history))
        if stream:
            with client.messages.stream(**args) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**args)
        history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return "".join(b.text for b in message.content if b.type == "text")
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": TOOL_OUTPUT} for c in calls]})
    raise SystemExit(f"{name}: no text after {MAX_STEPS} steps")


def chat_turn(name, history, stream):
    client = openai_client(name)
    tools = [{"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": SCHEMA}}]
    for _ in range(MAX_STEPS):
        messages = [{"role": "system", "content": system_prompt(name)}] + history
        if stream:
            with client.chat.completions.stream(model=OPENAI_MODEL, messages=messages, tools=tools,
                                                stream_options={"include_usage": True}) as s:
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=tools)
        message = completion.choices[0].message
        entry = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in message.tool_calls]
        history.append(entry)
        if not message.tool_calls:
            return message.content
        for c in message.tool_calls:
            history.append({"role": "tool", "tool_call_id": c.id, "content": TOOL_OUTPUT})
    raise SystemExit(f"{name}: no text after {MAX_STEPS} steps")


def responses_turn(name, history, stream):
    client = openai_client(name)
    tools = [{"type": "function", "name": "read", "description": "Read a file", "parameters": SCHEMA}]
    for _ in range(MAX_STEPS):
        args = dict(model=OPENAI_MODEL, instructions=system_prompt(name), input=history, tools=tools, store=False)
        if stream:
            with client.responses.stream(**args) as s:
                response = s.get_final_response()
        else:
            response = client.responses.create(**args)
        calls = [item for item in response.output if item.type == "function_call"]
        for item in response.output:
            history.append(item.model_dump(exclude_none=True))
        if not calls:
            return response.output_text
        for c in calls:
            history.append({"type": "function_call_output", "call_id": c.call_id, "output": TOOL_OUTPUT})
    raise SystemExit(f"{name}: no text after {MAX_STEPS} steps")


RUNNERS = {"messages": messages_turn, "chat": chat_turn, "responses": responses_turn}


def upload_files():
    """A batch file uploaded with each SDK's Files API; the sizes answered must be the file's."""
    line = b'{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{}}\n'
    data = (line * (UPLOAD_BYTES // len(line) + 1))[:UPLOAD_BYTES]
    anthropic_file = anthropic_client("sdk-files").beta.files.upload(
        file=("rows.jsonl", data, "application/jsonl"))
    openai_file = openai_client("sdk-files").files.create(file=("rows.jsonl", data), purpose="batch")
    sizes = (anthropic_file.size_bytes, openai_file.bytes)
    if sizes != (len(data), len(data)):
        raise SystemExit(f"uploads arrived with sizes {sizes}, not {len(data)}")
    print(f"uploads: {len(data)} bytes each")


def compact(name, history):
    """The conversation compacted (`POST /v1/responses/compact`): its user messages and one
    compaction item come back, with the usage cachet counts (run.py checks the count)."""
    compacted = openai_client(name).responses.compact(
        model=OPENAI_MODEL, instructions=system_prompt(name), input=history)
    kinds = [item.type for item in compacted.output]
    usage = compacted.usage
    if kinds[-1:] != ["compaction"] or not usage.input_tokens:
        raise SystemExit(f"{name}: compacted to {kinds} with usage {usage}")
    print(f"compaction: {len(kinds)} items, {usage.input_tokens} input tokens "
          f"({usage.input_tokens_details.cached_tokens} cached)")


def main():
    state_path, turn = sys.argv[1], int(sys.argv[2])
    state = json.load(open(state_path)) if os.path.exists(state_path) else {}
    for api, runner in RUNNERS.items():
        for stream in (False, True):
            name = f"sdk-{api}-{'stream' if stream else 'whole'}"
            history = state.setdefault(name, [])
            history.append({"role": "user", "content": PROMPTS[turn - 1]})
            text = runner(name, history, stream)
            print(f"{name}: {text}")
    counted = anthropic_client("sdk-count-tokens").messages.count_tokens(
        model=ANTHROPIC_MODEL, system=SYSTEM, messages=[{"role": "user", "content": PROMPTS[0]}])
    print(f"count_tokens: {counted.input_tokens}")
    print(f"anthropic models: {len(list(anthropic_client('sdk-models').models.list()))}")
    print(f"openai models: {len(list(openai_client('sdk-models').models.list()))}")
    if turn == 1:
        upload_files()
    if turn >= 2:
        compact("sdk-responses-whole", state["sdk-responses-whole"])
    json.dump(state, open(state_path, "w"))


if __name__ == "__main__":
    main()
