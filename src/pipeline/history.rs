//! Where the client's own history messages sit in the envelope once patches inserted
//! messages among them. Persisted message ops are stored against *client* positions (the
//! anchored history), so that on replay they land at the same place in a longer history,
//! whatever else was inserted since.

use crate::patch::Op;

/// One slot per envelope history message: `Some(i)` for the client's message `i`,
/// `None` for a message a patch put there.
#[derive(Debug, Clone)]
pub struct HistoryMap {
    slots: Vec<Option<usize>>,
}

impl HistoryMap {
    pub fn new(client_len: usize) -> Self {
        HistoryMap {
            slots: (0..client_len).map(Some).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The client position of envelope position `pos`: how many client messages precede it.
    pub fn client_index_at(&self, pos: usize) -> usize {
        self.slots[..pos.min(self.slots.len())]
            .iter()
            .filter(|s| s.is_some())
            .count()
    }

    /// The envelope position just before the client's message `client` (after anything
    /// already inserted there), or the end of the history.
    pub fn position_of_client(&self, client: usize) -> usize {
        self.slots
            .iter()
            .position(|s| s.is_some_and(|c| c >= client))
            .unwrap_or(self.slots.len())
    }

    /// Record an applied op's effect on the history.
    pub fn applied(&mut self, op: &Op, insert_at: Option<usize>) {
        match op {
            Op::MessagesInsert { messages, .. } => {
                if let Some(pos) = insert_at {
                    let pos = pos.min(self.slots.len());
                    self.slots
                        .splice(pos..pos, std::iter::repeat_n(None, messages.len()));
                }
            }
            Op::MessagesCachedReplace { messages, .. } => {
                self.slots = vec![None; messages.len()];
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn insert(n: usize) -> Op {
        Op::MessagesInsert {
            at: crate::patch::Selector::End,
            messages: vec![json!({"role": "user", "content": "x"}); n],
            invalidate_cache_reason: Some("r".into()),
        }
    }

    #[test]
    fn client_positions_survive_inserts() {
        let mut m = HistoryMap::new(4);
        m.applied(&insert(2), Some(1)); // [c0, -, -, c1, c2, c3]
        assert_eq!(m.client_index_at(1), 1);
        assert_eq!(m.client_index_at(3), 1);
        assert_eq!(m.client_index_at(4), 2);
        assert_eq!(
            m.position_of_client(1),
            3,
            "after what is already inserted there"
        );
        assert_eq!(m.position_of_client(4), 6);
        assert_eq!(m.position_of_client(0), 0);
    }
}
