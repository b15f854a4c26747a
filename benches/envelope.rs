//! Envelope benchmarks: parse + one patch + compile for 2 KB, 100 KB and 500 KB Anthropic
//! bodies; the identity round trip; and, in the same run, serde_json parsing the body to a
//! `Value` and serialising it again (the cost cachet avoids by splicing); and the canonical
//! form of a new message, from a `Value` and copied from its raw bytes; and decoding a
//! compressed body (zstd, gzip) against checking it; and a `[[payload]]` edit (a merge
//! patch and a JSON Patch) on the body's bytes against the same edit on a `Value` of it.

use bytes::Bytes;
use cachet::envelope::{BreakpointMode, CompileOptions, Ttl};
use cachet::patch::{parse_ops, Op};
use cachet::route::Endpoint;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

/// An agent session body of about `target` bytes: system prompt, tools, a tool loop.
fn session_body(target: usize) -> Bytes {
    let system =
        "You are a coding assistant working in a terminal. Be careful and brief. ".repeat(12);
    let tools: Vec<Value> = ["read", "bash", "edit", "write"]
        .iter()
        .map(|n| json!({"name": n, "description": format!("The {n} tool."), "input_schema": {"type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path"]}}))
        .collect();
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}),
    ];
    let mut i = 0;
    loop {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": true,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "tools": tools, "messages": messages});
        let bytes = serde_json::to_vec(&body).expect("serialisable");
        if bytes.len() >= target {
            return Bytes::from(bytes);
        }
        let output = format!("line {i}: let value = compute(\"input\", {i});\n").repeat(8);
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Reading part {i}.")},
            {"type": "tool_use", "id": format!("toolu_{i:04}"), "name": "read", "input": {"path": format!("src/part{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i:04}"), "content": output}]}));
        if i % 5 == 4 {
            messages.push(
                json!({"role": "assistant", "content": [{"type": "text", "text": "Continuing."}]}),
            );
            messages.push(json!({"role": "user", "content": format!("Next step {i}.")}));
        }
        i += 1;
    }
}

fn one_patch() -> Vec<Op> {
    parse_ops(
        &json!([{"op": "messages_insert", "at": "before_last_user_prompt",
                 "messages": [{"role": "custom", "content": "Memory: the project uses tabs."}],
                 "invalidateCacheReason": "memory injection"}]),
        "bench",
    )
    .expect("valid patch")
}

fn benches(c: &mut Criterion) {
    let sizes = [("2KB", 2_000), ("100KB", 100_000), ("500KB", 500_000)];
    let patch = one_patch();
    let default = CompileOptions::default();
    let auto = CompileOptions {
        breakpoints: BreakpointMode::Auto {
            ttl: Ttl::FiveMinutes,
        },
        ..Default::default()
    };
    let mut group = c.benchmark_group("envelope");
    for (name, size) in sizes {
        let body = session_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("identity_round_trip", name),
            &body,
            |b, body| {
                b.iter(|| {
                    let env = cachet::providers::parse_envelope(Endpoint::Messages, body.clone())
                        .expect("parses");
                    black_box(env.compile(&default))
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("parse_patch_compile", name),
            &body,
            |b, body| {
                b.iter(|| {
                    let mut env =
                        cachet::providers::parse_envelope(Endpoint::Messages, body.clone())
                            .expect("parses");
                    env.apply(&patch, "bench").expect("applies");
                    black_box(env.compile(&default))
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("parse_patch_compile_auto_markers", name),
            &body,
            |b, body| {
                b.iter(|| {
                    let mut env =
                        cachet::providers::parse_envelope(Endpoint::Messages, body.clone())
                            .expect("parses");
                    env.apply(&patch, "bench").expect("applies");
                    black_box(env.compile(&auto))
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("serde_value_round_trip", name),
            &body,
            |b, body| {
                b.iter(|| {
                    let v: Value = serde_json::from_slice(body).expect("parses");
                    black_box(serde_json::to_vec(&v).expect("serialises"))
                })
            },
        );
    }
    group.finish();

    // The check every proxied generation request pays for, against the serde_json pass it
    // replaced (a struct with `model`, and the rest skipped).
    let mut group = c.benchmark_group("body_check");
    for (name, size) in sizes {
        let body = session_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("shape_check", name), &body, |b, body| {
            b.iter(|| {
                black_box(cachet::providers::check::check(Endpoint::Messages, body).expect("valid"))
            })
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json_head", name),
            &body,
            |b, body| {
                #[derive(serde::Deserialize)]
                struct Head<'a> {
                    #[serde(borrow)]
                    model: std::borrow::Cow<'a, str>,
                    #[serde(borrow)]
                    messages: &'a serde_json::value::RawValue,
                }
                b.iter(|| {
                    let head: Head = serde_json::from_slice(body).expect("valid");
                    black_box((head.model.len(), head.messages.get().len()))
                })
            },
        );
    }
    group.finish();

    // A compressed body is decoded before it is checked (Codex signed in with ChatGPT sends
    // zstd at level 3): the decode against the check of the decoded body, in the same run.
    let mut group = c.benchmark_group("content_decode");
    for (name, size) in sizes {
        let body = session_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        let zstd = Bytes::from(zstd::encode_all(&body[..], 3).expect("compresses"));
        let gzip = {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(&body).expect("compresses");
            Bytes::from(enc.finish().expect("compresses"))
        };
        for (coding, sent) in [("zstd", zstd), ("gzip", gzip)] {
            let mut headers = http::HeaderMap::new();
            headers.insert(
                http::header::CONTENT_ENCODING,
                http::HeaderValue::from_static(coding),
            );
            group.bench_with_input(BenchmarkId::new(coding, name), &sent, |b, sent| {
                b.iter(|| {
                    black_box(
                        cachet::content_encoding::decode(&headers, sent.clone(), 64 << 20)
                            .expect("decodes"),
                    )
                })
            });
        }
        group.bench_with_input(BenchmarkId::new("shape_check", name), &body, |b, body| {
            b.iter(|| {
                black_box(cachet::providers::check::check(Endpoint::Messages, body).expect("valid"))
            })
        });
    }
    group.finish();

    // `before_provider_request` edits: on the body's bytes (`cachet::json_edit`), against the
    // same edits on a `Value` parsed and cloned from the body and written back (the way
    // they ran before); and a hook's re-serialised payload spliced over the body.
    let mut group = c.benchmark_group("payload_edit");
    let merge = json!({"temperature": 0});
    let add: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata", "value": {"user_id": "session-1"}}
    ]))
    .expect("valid patch");
    for (name, size) in sizes {
        let body = session_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("on_bytes", name), &body, |b, body| {
            b.iter(|| {
                let mut edited = body.to_vec();
                cachet::json_edit::merge(&mut edited, &merge);
                cachet::json_edit::patch(&mut edited, &add).expect("applies");
                black_box(edited)
            })
        });
        group.bench_with_input(BenchmarkId::new("on_value", name), &body, |b, body| {
            b.iter(|| {
                let original: Value = serde_json::from_slice(body).expect("parses");
                let mut edited = original.clone();
                json_patch::merge(&mut edited, &merge);
                json_patch::patch(&mut edited, &add).expect("applies");
                black_box((serde_json::to_vec(&edited).expect("serialises"), original))
            })
        });
        let mut replaced: Value = serde_json::from_slice(&body).expect("parses");
        replaced["max_tokens"] = json!(64);
        let replaced = serde_json::to_vec_pretty(&replaced).expect("serialises");
        group.bench_with_input(
            BenchmarkId::new("splice_replacement", name),
            &body,
            |b, body| b.iter(|| black_box(cachet::json_edit::splice(body, &replaced))),
        );
    }
    group.finish();

    // The canonical form of a new message (what its content address hashes and the store
    // keeps): from a `Value` of it, and written as it is parsed.
    let mut group = c.benchmark_group("canonical_form");
    for (name, lines) in [("2KB", 40), ("20KB", 400)] {
        let output = (0..lines)
            .map(|i| format!("{i:>5}\tlet value = compute(\"input\", {i}); // é\n"))
            .collect::<String>();
        let message = serde_json::to_vec(&json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": output,
             "cache_control": {"type": "ephemeral"}}]}))
        .expect("serialisable");
        group.throughput(Throughput::Bytes(message.len() as u64));
        group.bench_with_input(BenchmarkId::new("from_value", name), &message, |b, raw| {
            b.iter(|| {
                let value: Value = serde_json::from_slice(raw).expect("valid");
                black_box(cachet::providers::cache_key::canonical_bytes(&value))
            })
        });
        group.bench_with_input(BenchmarkId::new("from_raw", name), &message, |b, raw| {
            b.iter(|| black_box(cachet::providers::cache_key::canonical_bytes_of_raw(raw)))
        });
    }
    group.finish();
}

criterion_group!(envelope, benches);
criterion_main!(envelope);
