//! What the provider holds of a replayed stateful Responses conversation. A request naming
//! `previous_response_id`, or a Conversations API `conversation`, carries only its new
//! input; the provider reads the answer's conversation (or the conversation's items) before
//! it, and bills every token of it. Replay keeps the same from the traces: each recorded
//! answer's output (`output`, written for answers a later request may continue), linked to
//! what it continued, so each such request is accounted on the prompt the provider read.
//!
//! Each answer keeps only its own input and output and a link to what came before, so a
//! long chain costs memory in proportion to its length, not its square.

use std::collections::HashMap;

use serde_json::Value;

use crate::providers::openai_responses::{conversation_of, input_items, stores_answer_of};
use crate::trace::Record;

/// What came before a held answer's own input.
#[derive(Clone)]
enum Before {
    Nothing,
    /// The answer its request named in `previous_response_id`.
    Answer(String),
    /// The first `items` items of a conversation.
    Conversation {
        id: String,
        items: usize,
    },
}

struct HeldAnswer {
    before: Before,
    /// Its request's input, then its output.
    items: Vec<Value>,
}

/// The answers and conversations of one arm's replay.
#[derive(Default)]
pub struct Held {
    answers: HashMap<String, HeldAnswer>,
    conversations: HashMap<String, Vec<Value>>,
    /// Stateful requests whose earlier turns are not in the traces (recorded before the
    /// answers' output was, or the chain started before the traces do): accounted on
    /// their own input.
    pub unknown: u64,
}

impl Held {
    /// The request as the provider reads it, when it continues what is held: `body` (the
    /// shaped request) with the earlier turns before its input (none yet for a conversation
    /// not seen before). `None` when it continues nothing, or an answer not held (counted).
    pub fn expand(&mut self, body: &Value) -> Option<Value> {
        let before = before_of(body);
        if matches!(before, Before::Nothing) {
            return None;
        }
        let Some(mut items) = self.items_before(&before) else {
            self.unknown += 1;
            return None;
        };
        items.extend(input_items(body));
        let mut expanded = body.clone();
        expanded["input"] = Value::Array(items);
        Some(expanded)
    }

    /// Keep what the provider keeps of a replayed request's answer: `body` is the request as
    /// shaped (its own input), `record` the recorded answer.
    pub fn answered(&mut self, record: &Record, body: &Value) {
        let Some(output) = record.output.as_ref().and_then(Value::as_array) else {
            return;
        };
        let mut items = input_items(body);
        items.extend(output.iter().cloned());
        let mut before = before_of(body);
        if let Some(id) = conversation_of(body) {
            let conversation = self.conversations.entry(id.clone()).or_default();
            before = Before::Conversation {
                id,
                items: conversation.len(),
            };
            conversation.extend(items.iter().cloned());
        }
        if let (Some(answer), true) = (&record.response_id, stores_answer_of(body)) {
            self.answers
                .insert(answer.clone(), HeldAnswer { before, items });
        }
    }

    /// Every item before a request's own input, oldest first; `None` when a link is not held.
    fn items_before(&self, before: &Before) -> Option<Vec<Value>> {
        let mut parts: Vec<&[Value]> = Vec::new();
        let mut at = before.clone();
        // A trace whose answers name each other in a loop ends the walk, as a link not held.
        for _ in 0..self.answers.len() + 2 {
            match at {
                Before::Nothing => {
                    return Some(parts.into_iter().rev().flatten().cloned().collect())
                }
                Before::Conversation { id, items } => {
                    // A conversation not seen yet holds nothing (or only what was added to
                    // it outside a response, which no trace has).
                    let held = self.conversations.get(&id).map_or(&[][..], Vec::as_slice);
                    parts.push(&held[..items.min(held.len())]);
                    at = Before::Nothing;
                }
                Before::Answer(id) => {
                    let held = self.answers.get(&id)?;
                    parts.push(&held.items);
                    at = held.before.clone();
                }
            }
        }
        None
    }
}

/// What a request continues: the answer it names, or all of the conversation it names.
fn before_of(body: &Value) -> Before {
    if let Some(answer) = body.get("previous_response_id").and_then(Value::as_str) {
        return Before::Answer(answer.to_string());
    }
    match conversation_of(body) {
        Some(id) => Before::Conversation {
            id,
            items: usize::MAX,
        },
        None => Before::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(body: Value, answer: &str, output: &str) -> Record {
        Record {
            v: 1,
            time_ms: 0,
            session: "s".into(),
            provider: "openai".into(),
            endpoint: "responses".into(),
            path: "/v1/responses".into(),
            headers: Default::default(),
            body,
            body_text: None,
            body_base64: None,
            usage: None,
            status: Some(200),
            response_id: Some(answer.into()),
            output: Some(json!([{"type": "message", "role": "assistant", "content": output}])),
        }
    }

    /// A chain of answers reads as one conversation; an answer in a conversation carries
    /// the conversation's items as they were when it was made.
    #[test]
    fn a_chain_is_read_as_its_whole_conversation() {
        let mut held = Held::default();
        let first = json!({"model": "m", "input": "one", "conversation": "conv_1"});
        assert_eq!(
            held.expand(&first),
            Some(json!({"model": "m",
            "input": [{"role": "user", "content": "one"}], "conversation": "conv_1"}))
        );
        held.answered(&record(first.clone(), "resp_1", "A"), &first);
        let second = json!({"model": "m", "input": "two", "conversation": "conv_1"});
        held.answered(&record(second.clone(), "resp_2", "B"), &second);
        // Continuing the first answer: the conversation as it was then, not as it is now.
        let branch = json!({"model": "m", "input": "three", "previous_response_id": "resp_1"});
        let read = held.expand(&branch).unwrap();
        let texts: Vec<&Value> = read["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["content"])
            .collect();
        assert_eq!(texts, [&json!("one"), &json!("A"), &json!("three")]);
        assert_eq!(held.unknown, 0);
    }

    /// An answer not in the traces, or answers naming each other in a loop, leave the
    /// request on its own input, counted.
    #[test]
    fn what_is_not_held_is_counted_and_a_loop_ends() {
        let mut held = Held::default();
        let orphan = json!({"model": "m", "input": "x", "previous_response_id": "resp_gone"});
        assert_eq!(held.expand(&orphan), None);
        let a = json!({"model": "m", "input": "a", "previous_response_id": "resp_b"});
        let b = json!({"model": "m", "input": "b", "previous_response_id": "resp_a"});
        held.answered(&record(a.clone(), "resp_a", "A"), &a);
        held.answered(&record(b.clone(), "resp_b", "B"), &b);
        assert_eq!(held.expand(&a), None);
        assert_eq!(held.unknown, 2);
        // `store: false`: nothing kept to continue.
        let unstored = json!({"model": "m", "input": "c", "store": false});
        held.answered(&record(unstored.clone(), "resp_c", "C"), &unstored);
        let next = json!({"model": "m", "input": "d", "previous_response_id": "resp_c"});
        assert_eq!(held.expand(&next), None);
    }
}
