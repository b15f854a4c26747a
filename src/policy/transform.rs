//! Built-in transforms: pure functions from the envelope's system parts to patch ops, so
//! the engine applies them like any declared patch.

use regex::Regex;
use serde_json::json;

use crate::patch::Op;

/// `move_lines { from = "system", pattern, to = "uncached_tail" }`: text of the system
/// prompt that changes between requests (dates, git status) leaves the cached prefix and
/// is appended, as one message, to the request-only tail.
#[derive(Debug, Clone)]
pub struct MoveLines {
    pub pattern: Regex,
    pub invalidate_cache_reason: String,
}

impl MoveLines {
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
        }
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
