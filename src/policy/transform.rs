//! Built-in transforms: pure functions from the envelope's system parts to patch ops, so
//! the engine applies them like any declared patch.

use regex::Regex;
use serde_json::json;

use crate::patch::Op;

/// `move_lines { from = "system", pattern, to = "uncached_tail" }`: text of the system
/// prompt that changes between requests (dates, git status) leaves the cached prefix and
/// is appended, as one message, to the request-only tail.
///
/// With `when = "changed"` ([`MoveLines::hold`]) the lines move only once they changed:
/// the system prompt keeps the lines the session's cached prefix holds, and a request
/// whose lines differ tells the model the new ones in the tail.
#[derive(Debug, Clone)]
pub struct MoveLines {
    pub pattern: Regex,
    pub invalidate_cache_reason: String,
    /// `when = "changed"`: keep what the cached prefix holds (see [`MoveLines::hold_ops`]).
    pub hold: bool,
    /// The patterns of the policy's other holding handlers: what they hold may differ
    /// from the client's text without the rest of a part having changed.
    pub others: Vec<Regex>,
}

/// The system parts `(name, text)` as the session's cached prefix holds them, as a
/// holding `move_lines` last recorded them; and whether that prefix can still be read
/// (a prefix gone cold holds nothing worth keeping).
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    pub parts: &'a [(String, String)],
    pub warm: bool,
}

/// What a holding `move_lines` does to one request: ops to persist (the parts as the
/// cached prefix now holds them, when that changed; the request goes with those texts
/// already) and ops for this request only (the held lines put back, the client's lines
/// in the tail).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HoldOps {
    pub persist: Vec<Op>,
    pub now: Vec<Op>,
}

impl MoveLines {
    /// `when = "changed"`: for each system part, the first request the handler sees (or
    /// the first after the cached prefix went cold, or after the rest of the part changed)
    /// goes as it is, and the part is recorded as what the prefix holds; a later request
    /// whose lines differ from the held ones while the rest of the part is the same gets
    /// the held lines back in the system prompt and its own lines in the uncached tail.
    pub fn hold_ops(&self, parts: &[(String, String)], held: Held<'_>) -> HoldOps {
        let mut out = HoldOps::default();
        let mut moved = Vec::new();
        for (name, text) in parts {
            let was = held
                .parts
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.as_str());
            let now = self.cuts(text);
            if was.is_none() && now.is_empty() {
                continue;
            }
            let keep = match was {
                Some(was) if held.warm => self.put_back(text, &now, was),
                _ => None,
            };
            match keep {
                Some(None) => {}
                Some(Some(kept)) => {
                    moved.extend(
                        now.iter().map(|&(start, end, _)| {
                            text[start..end].trim_matches('\n').to_string()
                        }),
                    );
                    out.now.push(self.set(name, kept));
                }
                None if was == Some(text.as_str()) => {}
                None => out.persist.push(self.set(name, text.clone())),
            }
        }
        if !moved.is_empty() {
            out.now.push(Op::MessagesUncachedAppend {
                messages: vec![json!({"role": "user", "content": moved.join("\n")})],
                invalidate_cache_reason: None,
            });
        }
        out
    }

    /// `text` with the lines `was` holds in place of its own (whose cuts are `now`):
    /// `Some(None)` when they are the same already, `None` when `was` is not the same part
    /// but for those lines (the rest changed, or the lines are not as many).
    fn put_back(
        &self,
        text: &str,
        now: &[(usize, usize, usize)],
        was: &str,
    ) -> Option<Option<String>> {
        let then = self.cuts(was);
        if then.len() != now.len() || self.rest(text) != self.rest(was) {
            return None;
        }
        let same = now
            .iter()
            .zip(then.iter())
            .all(|(&(a, b, _), &(c, d, _))| text[a..b] == was[c..d]);
        if same {
            return Some(None);
        }
        let mut kept = String::with_capacity(text.len());
        let mut last = 0;
        for (&(start, end, _), &(from, to, _)) in now.iter().zip(then.iter()) {
            kept.push_str(&text[last..start]);
            kept.push_str(&was[from..to]);
            last = end;
        }
        kept.push_str(&text[last..]);
        Some(Some(kept))
    }

    /// The text without this handler's lines and the lines the policy's other holding
    /// handlers hold: what must be the same for the held lines to be put back.
    fn rest(&self, text: &str) -> String {
        let mut rest = self.split(text).0;
        for other in &self.others {
            rest = other.replace_all(&rest, "").into_owned();
        }
        rest
    }

    fn set(&self, name: &str, text: String) -> Op {
        Op::SystemPartSet {
            part_name: name.to_string(),
            text,
            before: None,
            after: None,
            invalidate_cache_reason: Some(self.invalidate_cache_reason.clone()),
        }
    }

    /// The ops for the system parts `(name, text)`: one `system_part_set` per changed part,
    /// then one `messages_uncached_append`. No match, no ops.
    pub fn ops(&self, parts: &[(String, String)]) -> Vec<Op> {
        let mut ops = Vec::new();
        let mut moved = Vec::new();
        for (name, text) in parts {
            let (kept, taken) = self.split(text);
            if taken.is_empty() {
                continue;
            }
            moved.extend(taken);
            ops.push(Op::SystemPartSet {
                part_name: name.clone(),
                text: kept,
                before: None,
                after: None,
                invalidate_cache_reason: Some(self.invalidate_cache_reason.clone()),
            });
        }
        if !moved.is_empty() {
            ops.push(Op::MessagesUncachedAppend {
                messages: vec![json!({"role": "user", "content": moved.join("\n")})],
                invalidate_cache_reason: None,
            });
        }
        ops
    }

    /// The text without the matches, and the matched texts. A match that covers whole
    /// lines takes its line break with it, so no blank line is left behind.
    pub fn split(&self, text: &str) -> (String, Vec<String>) {
        let cuts = self.cuts(text);
        let mut kept = String::with_capacity(text.len());
        let mut taken = Vec::with_capacity(cuts.len());
        let mut last = 0;
        for &(start, end, cut_end) in cuts.iter() {
            kept.push_str(&text[last..start]);
            taken.push(text[start..end].trim_matches('\n').to_string());
            last = cut_end;
        }
        kept.push_str(&text[last..]);
        (kept, taken)
    }

    /// Where the matches are (start, end, and the end of what is cut: the match and its
    /// line break). Remembered by the pattern and a hash of the text: an agent sends the
    /// same system prompt on every request, and the regex scan of it was 4% of cachet's
    /// CPU under full shaping.
    fn cuts(&self, text: &str) -> std::sync::Arc<Vec<(usize, usize, usize)>> {
        static SEEN: crate::memo::Memo<std::sync::Arc<Vec<(usize, usize, usize)>>> =
            crate::memo::Memo::new(4096);
        let key = crate::memo::key(self.pattern.as_str().as_bytes(), text.as_bytes());
        SEEN.get_or_insert_with(key, || {
            let mut cuts = Vec::new();
            let mut last = 0;
            for m in self.pattern.find_iter(text) {
                if m.is_empty() || m.start() < last {
                    continue;
                }
                let at_line_start = m.start() == 0 || text[..m.start()].ends_with('\n');
                last = m.end();
                if at_line_start && text[last..].starts_with('\n') && !m.as_str().ends_with('\n') {
                    last += 1;
                }
                cuts.push((m.start(), m.end(), last));
            }
            std::sync::Arc::new(cuts)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mover(pattern: &str) -> MoveLines {
        MoveLines {
            pattern: Regex::new(pattern).unwrap(),
            invalidate_cache_reason: "move volatile lines".into(),
            hold: false,
            others: Vec::new(),
        }
    }

    fn holder(pattern: &str, others: &[&str]) -> MoveLines {
        MoveLines {
            hold: true,
            others: others.iter().map(|o| Regex::new(o).unwrap()).collect(),
            ..mover(pattern)
        }
    }

    fn parts(text: &str) -> Vec<(String, String)> {
        vec![("base".to_string(), text.to_string())]
    }

    fn warm(parts: &[(String, String)]) -> Held<'_> {
        Held { parts, warm: true }
    }

    fn set_text(op: &Op) -> &str {
        match op {
            Op::SystemPartSet { text, .. } => text,
            other => panic!("{other:?}"),
        }
    }

    /// The first request goes as sent and is recorded; the same day changes nothing; the
    /// next day keeps the held date in the system prompt and tells the new one in the
    /// tail.
    #[test]
    fn a_held_line_stays_until_it_changes_then_the_new_one_goes_to_the_tail() {
        let m = holder(r"(?m)^Current date: .*$", &[]);
        let monday = parts("You are pi.\nCurrent date: 2026-11-23\nCwd: /w\n");
        let first = m.hold_ops(
            &monday,
            Held {
                parts: &[],
                warm: false,
            },
        );
        assert!(first.now.is_empty(), "the first request goes as sent");
        assert_eq!(first.persist.len(), 1);
        assert_eq!(set_text(&first.persist[0]), monday[0].1);
        assert_eq!(m.hold_ops(&monday, warm(&monday)), HoldOps::default());
        let tuesday = parts("You are pi.\nCurrent date: 2026-11-24\nCwd: /w\n");
        let next = m.hold_ops(&tuesday, warm(&monday));
        assert!(next.persist.is_empty(), "the prefix still holds Monday");
        assert_eq!(set_text(&next.now[0]), monday[0].1);
        let tail = serde_json::to_value(&next.now[1]).unwrap();
        assert_eq!(tail["messages"][0]["content"], "Current date: 2026-11-24");
        assert!(next.now.iter().all(|o| o.check_reason().is_ok()));
    }

    /// A prefix gone cold, or a part whose other text changed, holds nothing worth
    /// keeping: the client's text goes as sent and becomes what is held.
    #[test]
    fn a_cold_prefix_or_a_changed_part_takes_the_clients_lines() {
        let m = holder(r"(?m)^Current date: .*$", &[]);
        let monday = parts("A\nCurrent date: 2026-11-23\n");
        let tuesday = parts("A\nCurrent date: 2026-11-24\n");
        let cold = m.hold_ops(
            &tuesday,
            Held {
                parts: &monday,
                warm: false,
            },
        );
        assert!(cold.now.is_empty());
        assert_eq!(set_text(&cold.persist[0]), tuesday[0].1);
        let edited = parts("B\nCurrent date: 2026-11-24\n");
        let changed = m.hold_ops(&edited, warm(&monday));
        assert!(changed.now.is_empty());
        assert_eq!(set_text(&changed.persist[0]), edited[0].1);
    }

    /// Two holding handlers of one policy: a change of the other's lines is not a change
    /// of the rest of the part, so each keeps its own held line.
    #[test]
    fn holding_handlers_of_one_policy_each_keep_their_line() {
        let (date, git) = (r"(?m)^Date: .*$", r"(?m)^git: .*$");
        let dates = holder(date, &[git]);
        let status = holder(git, &[date]);
        let then = parts("A\nDate: 1\ngit: clean\n");
        let now = parts("A\nDate: 2\ngit: dirty\n");
        let first = dates.hold_ops(&now, warm(&then));
        let after_dates = parts(set_text(&first.now[0]));
        assert_eq!(after_dates[0].1, "A\nDate: 1\ngit: dirty\n");
        let second = status.hold_ops(&after_dates, warm(&then));
        assert_eq!(set_text(&second.now[0]), then[0].1);
    }

    #[test]
    fn moves_whole_lines_without_leaving_blank_lines() {
        let m = mover(r"(?m)^Current date and time:.*$");
        let (kept, taken) = m.split(
            "You are pi.\nCurrent date and time: 2026-11-22 00:17\nCurrent working directory: /w\n",
        );
        assert_eq!(kept, "You are pi.\nCurrent working directory: /w\n");
        assert_eq!(taken, vec!["Current date and time: 2026-11-22 00:17"]);
    }

    /// The remembered cuts are those of the pattern asked: the same text under another
    /// pattern, or asked again, splits as it would the first time.
    #[test]
    fn a_remembered_split_is_the_one_of_its_pattern() {
        let text = "a\nDate: 1\nb\nTime: 2\n";
        let date = mover(r"(?m)^Date: .*$");
        let time = mover(r"(?m)^Time: .*$");
        for _ in 0..2 {
            assert_eq!(
                date.split(text),
                ("a\nb\nTime: 2\n".into(), vec!["Date: 1".into()])
            );
            assert_eq!(
                time.split(text),
                ("a\nDate: 1\nb\n".into(), vec!["Time: 2".into()])
            );
        }
    }

    #[test]
    fn ops_set_changed_parts_and_append_one_tail_message() {
        let m = mover(r"(?m)^Today's date: .*$");
        let parts = vec![
            (
                "base".to_string(),
                "Hello\nToday's date: 2026-11-22\nBye".to_string(),
            ),
            ("policy".to_string(), "unchanged".to_string()),
        ];
        let ops = m.ops(&parts);
        let wire: Vec<_> = ops
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect();
        assert_eq!(
            wire,
            vec![
                json!({"op": "system_part_set", "partName": "base", "text": "Hello\nBye",
                    "invalidateCacheReason": "move volatile lines"}),
                json!({"op": "messages_uncached_append",
                    "messages": [{"role": "user", "content": "Today's date: 2026-11-22"}]}),
            ]
        );
        assert!(ops.iter().all(|o| o.check_reason().is_ok()));
        assert!(m
            .ops(&[("base".into(), "nothing volatile".into())])
            .is_empty());
    }

    #[test]
    fn multi_line_blocks_move_as_one() {
        let m = mover(r"(?ms)^gitStatus:.*?\n\n");
        let (kept, taken) = m.split("a\ngitStatus: clean\nM x.rs\n\nb\n");
        assert_eq!(kept, "a\nb\n");
        assert_eq!(taken, vec!["gitStatus: clean\nM x.rs"]);
    }
}
