//! Generated agent sessions as trace records, built on real clients' request fixtures
//! (`tests/data/clients`): pi on the Anthropic API (its system prompt with its date line,
//! its tools and headers, extended thinking on a budget when asked) and Claude Code
//! (adaptive thinking that the model keeps), with tool loops, pauses between turns and
//! clock times that may cross midnight. Replay reads them as it reads recorded traces.

use cachet::trace::{Record, TRACE_VERSION};
use cachet::usage::Usage;
use serde_json::{json, Map, Value};

use super::sessions::fixture;

/// Which agent sends the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// pi 0.73 (`anthropic-messages`): Sonnet 4.5, which drops earlier turns' thinking.
    Pi,
    /// Claude Code with an API key: adaptive thinking on a model that keeps it.
    ClaudeCode,
}

/// One generated session.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: &'static str,
    pub agent: Agent,
    /// pi's `thinking.budget_tokens` (thinking blocks in every answer); `None`: off.
    /// Claude Code always thinks, adaptively.
    pub budget: Option<u64>,
    /// When the first request is sent (RFC 3339, UTC).
    pub start: &'static str,
    /// The person's pause before each turn after the first, in seconds.
    pub pauses: Vec<u64>,
    /// Tool calls per turn (each turn ends with a text answer).
    pub steps: usize,
    /// Seconds between the requests of a tool loop.
    pub tool_gap: u64,
}

impl Spec {
    /// Whether every pause between turns is longer than 5 minutes.
    pub fn paused(&self) -> bool {
        !self.pauses.is_empty() && self.pauses.iter().all(|&p| p > 300)
    }

    /// Whether the session's clock passes midnight (UTC).
    pub fn crosses_midnight(&self) -> bool {
        self.gaps().any(|(_, new_day)| new_day)
    }

    /// Whether midnight (UTC) falls between two requests less than 5 minutes apart, while
    /// the cached prefix is warm.
    pub fn crosses_midnight_warm(&self) -> bool {
        self.gaps().any(|(gap, new_day)| new_day && gap <= 300_000)
    }

    /// A session whose pauses keep one pattern (all within 5 minutes, or all longer) and
    /// whose clock passes midnight, if at all, while the prefix is warm: what a choice of
    /// lifetime learns from its first turns holds for the rest.
    pub fn regular(&self) -> bool {
        let long = self.pauses.iter().filter(|&&p| p > 300).count();
        let one_pattern = long == 0 || long == self.pauses.len();
        one_pattern && !self.gaps().any(|(gap, new_day)| new_day && gap > 300_000)
    }

    /// Each gap between consecutive requests (milliseconds), and whether a new day (UTC)
    /// began in it.
    fn gaps(&self) -> impl Iterator<Item = (u64, bool)> {
        let times: Vec<u64> = records(self).iter().map(|r| r.time_ms).collect();
        let pairs: Vec<(u64, bool)> = times
            .windows(2)
            .map(|w| (w[1] - w[0], w[0] / 86_400_000 != w[1] / 86_400_000))
            .collect();
        pairs.into_iter()
    }
}

/// A few lines of code-like text, different for every `n`: what a tool reads. Generated
/// (not read from this repository's sources) so that the sessions, and the book's table of
/// what they cost, stay the same whatever the sources become.
fn source_lines(n: usize, lines: usize) -> String {
    const WORDS: [&str; 24] = [
        "let", "session", "gap", "lifetime", "write", "read", "prefix", "turn", "match", "Some",
        "None", "return", "self", "log", "entry", "marker", "cached", "tokens", "usage", "policy",
        "request", "answer", "keep", "warm",
    ];
    // A small linear congruential generator: the same text for the same `n` on every machine.
    let mut state = (n as u64).wrapping_mul(6_364_136_223_846_793_005) ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 33) as usize) % bound
    };
    (0..lines)
        .map(|_| {
            let indent = "    ".repeat(1 + next(3));
            let words: Vec<&str> = (0..3 + next(8)).map(|_| WORDS[next(WORDS.len())]).collect();
            format!("{indent}{};", words.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_time(text: &str) -> u64 {
    cachet::trace::time::parse_rfc3339(text).expect("an RFC 3339 time")
}

/// The records of a session, one per request, in time order.
pub fn records(spec: &Spec) -> Vec<Record> {
    let pi = fixture("pi_anthropic_tool_loop.json");
    let cc = fixture("claude_code_tool_loop.json");
    let mut time = parse_time(spec.start);
    let mut history: Vec<Value> = match spec.agent {
        Agent::Pi => Vec::new(),
        // Claude Code's environment message, its date fixed when the session starts.
        Agent::ClaudeCode => vec![cc["messages"][1].clone()],
    };
    let mut out = Vec::new();
    let mut call = 0;
    for turn in 0..=spec.pauses.len() {
        if turn > 0 {
            time += spec.pauses[turn - 1] * 1000;
        }
        let prompt = format!(
            "Turn {turn}: read the module and explain its part {turn}, then propose one change."
        );
        history.push(json!({"role": "user", "content": [{"type": "text", "text": prompt}]}));
        for step in 0..=spec.steps {
            let body = match spec.agent {
                Agent::Pi => pi_body(&pi, spec.budget, &history, time),
                Agent::ClaudeCode => cc_body(&cc, &history),
            };
            out.push(Record {
                v: TRACE_VERSION,
                time_ms: time,
                session: spec.name.to_string(),
                provider: "anthropic".into(),
                endpoint: "messages".into(),
                path: "/v1/messages".into(),
                headers: headers(spec.agent),
                body,
                body_text: None,
                body_base64: None,
                usage: Some(Usage {
                    output: 150,
                    ..Default::default()
                }),
                status: Some(200),
                response_id: None,
                output: None,
            });
            let mut content = Vec::new();
            if spec.budget.is_some() || spec.agent == Agent::ClaudeCode {
                call += 1;
                content.push(json!({"type": "thinking",
                    "thinking": format!("Step {step} of turn {turn}. {}", source_lines(call + 500, 12)),
                    "signature": format!("sig{call:08}{}", "A".repeat(120))}));
            }
            if step < spec.steps {
                call += 1;
                let id = format!("toolu_{:02}_{turn:02}_{step:02}", spec.name.len());
                let (tool, input) = match spec.agent {
                    Agent::Pi => (
                        "read",
                        json!({"path": "src/session/flow.rs", "offset": step * 40}),
                    ),
                    Agent::ClaudeCode => ("Read", json!({"file_path": "src/session/flow.rs"})),
                };
                content.push(json!({"type": "tool_use", "id": id, "name": tool, "input": input}));
                history.push(json!({"role": "assistant", "content": content}));
                history.push(json!({"role": "user", "content": [{"type": "tool_result",
                    "tool_use_id": id, "content": source_lines(call, 40)}]}));
                time += spec.tool_gap * 1000;
            } else {
                content.push(json!({"type": "text", "text": format!(
                    "Part {turn} keeps the session's state between requests. {}",
                    "It is small and tested. ".repeat(8))}));
                history.push(json!({"role": "assistant", "content": content}));
                time += 2_000;
            }
        }
    }
    out
}

/// The last block of the last message marked, as pi and Claude Code mark it.
fn marked(history: &[Value]) -> Value {
    let mut messages = history.to_vec();
    if let Some(Value::Array(blocks)) = messages.last_mut().and_then(|m| m.get_mut("content")) {
        if let Some(block) = blocks.last_mut() {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    Value::Array(messages)
}

fn pi_body(pi: &Value, budget: Option<u64>, history: &[Value], time: u64) -> Value {
    let system = pi["system"][0]["text"].as_str().unwrap().replace(
        "Current date: 2026-11-23",
        &format!("Current date: {}", cachet::trace::time::date_of(time)),
    );
    let mut body = Map::new();
    body.insert("model".into(), json!("claude-sonnet-4-5"));
    body.insert("messages".into(), marked(history));
    body.insert("max_tokens".into(), json!(16384 + budget.unwrap_or(0)));
    body.insert("stream".into(), json!(true));
    body.insert(
        "system".into(),
        json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
    );
    body.insert("tools".into(), pi["tools"].clone());
    if let Some(budget) = budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    Value::Object(body)
}

fn cc_body(cc: &Value, history: &[Value]) -> Value {
    let mut body = cc.clone();
    let mut messages = vec![cc["messages"][0].clone()];
    messages.extend(history.iter().cloned());
    body["messages"] = marked(&messages);
    body
}

fn headers(agent: Agent) -> Map<String, Value> {
    let pairs: &[(&str, &str)] = match agent {
        Agent::Pi => &[
            ("user-agent", "Anthropic/JS 0.91.1"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
            ("x-stainless-lang", "js"),
        ],
        Agent::ClaudeCode => &[
            ("user-agent", "claude-cli/2.1.330 (external, sdk-cli)"),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
            ),
            ("x-app", "cli"),
        ],
    };
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}
