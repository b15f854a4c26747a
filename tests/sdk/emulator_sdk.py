#!/usr/bin/env python3
"""Drive `cachet emulate` with the official Python SDKs (anthropic, openai).

Usage: python3 tests/sdk/emulator_sdk.py BASE_URL   (e.g. http://127.0.0.1:8790)

Makes streaming and non-streaming calls on Messages, Chat Completions and Responses,
parses every response with the SDKs' own types, and checks the usage they expose against
the emulator's cache accounting. Exits non-zero on the first failure.
"""

import json
import sys

import anthropic
import openai

BASE = sys.argv[1].rstrip("/")
SYSTEM = "You are a careful assistant who answers briefly. " * 300  # ~2700 tokens
CONTEXT = "Reference material for the conversation. " * 300


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def anthropic_checks():
    client = anthropic.Anthropic(base_url=BASE, api_key="sk-ant-emulator", max_retries=0)
    model = "claude-sonnet-4-6"
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "Say hello."}]

    first = client.messages.create(model=model, max_tokens=64, system=system, messages=messages)
    written = first.usage.cache_creation_input_tokens
    check(written > 1024 and first.usage.cache_read_input_tokens == 0, "anthropic: first call writes the system prefix")
    check(first.usage.cache_creation.ephemeral_5m_input_tokens == written, "anthropic: 5m split equals creation")
    check(first.content[0].type == "text" and first.stop_reason == "end_turn", "anthropic: text reply")

    counted = client.messages.count_tokens(model=model, system=system, messages=messages)
    check(counted.input_tokens == written + first.usage.input_tokens, "anthropic: count_tokens equals billed input")

    second = client.messages.create(model=model, max_tokens=64, system=system, messages=messages)
    check(second.usage.cache_read_input_tokens == written, "anthropic: repeat reads the written prefix")
    check(second.usage.cache_creation_input_tokens == 0, "anthropic: repeat writes nothing")

    with client.messages.stream(model=model, max_tokens=64, system=system, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(text == first.content[0].text, "anthropic: streamed text equals the non-streamed reply")
    check(final.usage.cache_read_input_tokens == written, "anthropic: stream usage reads the prefix")
    check(final.usage.output_tokens == first.usage.output_tokens, "anthropic: stream output tokens")

    check(first.usage.inference_geo == "global", "anthropic: usage says where inference ran")
    us = client.messages.create(model=model, max_tokens=64, system=system, messages=messages,
                                inference_geo="us")
    check(us.usage.inference_geo == "us", "anthropic: inference_geo us is answered us")

    types = [e.type for e in client.messages.create(
        model=model, max_tokens=64, system=system, messages=messages, stream=True)]
    check(types[0] == "message_start" and types[-1] == "message_stop", "anthropic: raw stream event order")

    tools = [{"name": "read_file", "description": "Read a file",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
    call = client.messages.create(model=model, max_tokens=64, system=system, messages=messages, tools=tools,
                                  extra_headers={"x-cachet-emulate-reply": "tool"})
    check(call.stop_reason == "tool_use" and call.content[0].input == {"path": "example path"},
          "anthropic: scripted tool call")
    loop = messages + [
        {"role": "assistant", "content": [b.model_dump() for b in call.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.content[0].id, "content": "hello"}]},
    ]
    with client.messages.stream(model=model, max_tokens=64, system=system, messages=loop, tools=tools,
                                extra_headers={"x-cachet-emulate-reply": "tool"}) as stream:
        after = stream.get_final_message()
    check(after.content[0].type == "text", "anthropic: text after the tool result")

    try:
        client.messages.create(model=model, max_tokens=8, messages=messages,
                               extra_headers={"x-cachet-emulate-fault": "529"})
        check(False, "anthropic: 529 raises")
    except anthropic.APIStatusError as e:
        check(e.status_code == 529 and e.body["error"]["type"] == "overloaded_error", "anthropic: 529 overloaded_error")
    try:
        client.messages.create(model=model, max_tokens=8, messages=messages,
                               extra_headers={"x-cachet-emulate-fault": "429"})
        check(False, "anthropic: 429 raises")
    except anthropic.RateLimitError as e:
        check(e.response.headers.get("retry-after") is not None, "anthropic: 429 with retry-after")
    try:
        with client.messages.stream(model=model, max_tokens=8, messages=messages,
                                    extra_headers={"x-cachet-emulate-fault": "cut:2"}) as stream:
            stream.get_final_message()
        check(False, "anthropic: a cut stream raises")
    except Exception as e:  # httpx / SDK connection errors differ between versions
        check(True, f"anthropic: a cut stream raises ({type(e).__name__})")


def openai_checks():
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-emulator", max_retries=0)
    model = "gpt-4o"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}]

    first = client.chat.completions.create(model=model, messages=messages)
    check(first.usage.prompt_tokens_details.cached_tokens == 0, "chat: first call reads nothing")
    second = client.chat.completions.create(model=model, messages=messages)
    cached = second.usage.prompt_tokens_details.cached_tokens
    check(cached == second.usage.prompt_tokens // 128 * 128 and cached >= 1024,
          "chat: repeat reads the prompt in 128-token steps")
    check(first.choices[0].message.content and first.choices[0].finish_reason == "stop", "chat: text reply")

    chunks = list(client.chat.completions.create(model=model, messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(text == first.choices[0].message.content, "chat: streamed text equals the reply")
    check(chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens_details.cached_tokens == cached,
          "chat: include_usage chunk carries cached_tokens")
    check(all(c.usage is None for c in chunks[:-1]), "chat: other chunks have usage null")

    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    call = client.chat.completions.create(model=model, messages=messages, tools=tools,
                                          extra_headers={"x-cachet-emulate-reply": "tool"})
    fn = call.choices[0].message.tool_calls[0].function
    check(fn.name == "lookup" and json.loads(fn.arguments) == {"q": "example q"}, "chat: scripted tool call")

    key = "session-42"
    instructions = CONTEXT
    r1 = client.responses.create(model="gpt-5", instructions=instructions, input="Say hello.", prompt_cache_key=key)
    r2 = client.responses.create(model="gpt-5", instructions=instructions, input="Say hello.", prompt_cache_key=key)
    c2 = r2.usage.input_tokens_details.cached_tokens
    check(r1.usage.input_tokens_details.cached_tokens == 0 and c2 == r2.usage.input_tokens // 128 * 128,
          "responses: repeat reads in 128-token steps")
    other = client.responses.create(model="gpt-5", instructions=instructions, input="Say hello.",
                                    prompt_cache_key="another")
    check(other.usage.input_tokens_details.cached_tokens == 0, "responses: prompt_cache_key partitions")
    check(r1.output_text == first.choices[0].message.content, "responses: output_text")
    check(r1.prompt_cache_options is None, "responses: no prompt_cache_options before GPT-5.6")

    with client.responses.stream(model="gpt-5", instructions=instructions, input="Say hello.",
                                 prompt_cache_key=key) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    check(kinds[0] == "response.created" and kinds[-1] == "response.completed", "responses: stream event order")
    check(final.usage.input_tokens_details.cached_tokens == c2 and final.output_text == r1.output_text,
          "responses: streamed final response")

    ftools = [{"type": "function", "name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]
    with client.responses.stream(model="gpt-5", input="find it", tools=ftools,
                                 extra_headers={"x-cachet-emulate-reply": "tool"}) as stream:
        fc = stream.get_final_response().output[0]
    check(fc.type == "function_call" and json.loads(fc.arguments) == {"q": "example q"},
          "responses: streamed function call")

    conversations_checks(client)
    twelve_hour_checks(client)
    fast_mode_checks(client)

    ids = [m.id for m in client.models.list()]
    check("gpt-4o" in ids, "models: list")
    try:
        client.chat.completions.create(model=model, messages=messages, extra_headers={"x-cachet-emulate-fault": "500"})
        check(False, "chat: 500 raises")
    except openai.InternalServerError as e:
        check(e.status_code == 500, "chat: 500 in OpenAI shape")


def twelve_hour_checks(client):
    """GPT-5.6 and later: `prompt_cache_options.ttl` "12h" on Responses keeps what the
    request writes half a day, and the usage splits the writes by lifetime."""
    model = "gpt-6.2-sol"
    long = client.responses.create(model=model, instructions=CONTEXT, input="Say hello.",
                                   prompt_cache_options={"ttl": "12h"})
    details = long.usage.input_tokens_details
    check(details.cache_write_tokens >= 1024
          and details.cache_write_tokens_details.ttl_12h_tokens == details.cache_write_tokens
          and details.cache_write_tokens_details.ttl_30m_tokens == 0,
          "responses: a 12h ttl's writes are reported as ttl_12h_tokens")
    check(long.prompt_cache_options.ttl == "12h" and long.prompt_cache_options.mode == "implicit",
          "responses: the applied prompt_cache_options are echoed")
    short = client.responses.create(model=model, instructions=CONTEXT, input="Say hi.",
                                    prompt_cache_options={"ttl": "30m"})
    check(short.usage.input_tokens_details.cache_write_tokens_details.ttl_12h_tokens == 0,
          "responses: a 30m ttl writes no 12-hour tokens")
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"prompt_cache_options": {"ttl": "12h"}})
        check(False, "chat: ttl 12h is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "chat: ttl 12h is refused")


def fast_mode_checks(client):
    """Fast mode: `service_tier="fast"` (or "priority") is served as "priority" on a model
    with a fast price, and caches apart from the standard tier; flex likewise, as "flex"."""
    model = "gpt-6.2-sol"
    context = "Fast mode. " + CONTEXT  # a prefix no other check cached
    fast = [client.responses.create(model=model, instructions=context, input="Say hello.",
                                    service_tier=tier) for tier in ("fast", "priority")]
    check([r.service_tier for r in fast] == ["priority", "priority"],
          "responses: fast mode is answered as service_tier priority")
    check(fast[1].usage.input_tokens_details.cached_tokens > 0,
          "responses: fast and priority share the fast cache")
    standard = client.responses.create(model=model, instructions=context, input="Say hello.")
    check(standard.service_tier == "default"
          and standard.usage.input_tokens_details.cached_tokens == 0,
          "responses: the standard tier reads nothing the fast one cached")
    chat = client.chat.completions.create(model=model, service_tier="fast",
                                          messages=[{"role": "user", "content": "x"}])
    check(chat.service_tier == "priority", "chat: fast mode is answered as priority")
    # Flex processing: answered "flex", a tier of its own (service_tier_changed).
    flex = [client.responses.create(model=model, instructions=context, input="Say hello.",
                                    service_tier="flex") for _ in range(2)]
    check([r.service_tier for r in flex] == ["flex", "flex"],
          "responses: flex processing is answered as service_tier flex")
    check(flex[0].usage.input_tokens_details.cached_tokens == 0
          and flex[1].usage.input_tokens_details.cached_tokens > 0,
          "responses: flex reads only what flex cached")
    chat = client.chat.completions.create(model=model, service_tier="flex",
                                          messages=[{"role": "user", "content": "x"}])
    check(chat.service_tier == "flex", "chat: flex processing is answered as flex")


def conversations_checks(client):
    """The Conversations API: each request names the conversation and carries only its new
    input; the provider reads the conversation's items first, from its cache where it can."""
    conv = client.conversations.create(metadata={"topic": "sdk"},
                                       items=[{"role": "user", "content": CONTEXT}])
    check(conv.id.startswith("conv_") and conv.metadata == {"topic": "sdk"}, "conversations: create")
    first = client.responses.create(model="gpt-5", input="First question?", conversation=conv.id)
    check(first.conversation.id == conv.id, "conversations: the response names its conversation")
    with client.responses.stream(model="gpt-5", input="Second question?", conversation=conv.id) as stream:
        second = stream.get_final_response()
    cached = second.usage.input_tokens_details.cached_tokens
    check(cached >= 1024 and cached > first.usage.input_tokens_details.cached_tokens
          and second.usage.input_tokens > first.usage.input_tokens,
          "conversations: the next request reads the conversation, from cache")
    items = list(client.conversations.items.list(conv.id, order="asc", limit=2))
    roles = [item.role for item in items]
    check(roles == ["user", "user", "assistant", "user", "assistant"],
          f"conversations: items in order, paged ({roles})")
    try:
        client.responses.create(model="gpt-5", input="x", conversation=conv.id,
                                previous_response_id=first.id)
        check(False, "conversations: conversation with previous_response_id is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "conversations: conversation with previous_response_id is refused")
    check(client.conversations.delete(conv.id).deleted, "conversations: delete")
    try:
        client.responses.create(model="gpt-5", input="x", conversation=conv.id)
        check(False, "conversations: a deleted conversation is not found")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "conversations: a deleted conversation is not found")


if __name__ == "__main__":
    anthropic_checks()
    openai_checks()
    print("all SDK checks passed")
