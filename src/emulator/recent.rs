//! What the emulator keeps of its recent answers, by the ids it answered with.

use std::collections::{HashMap, VecDeque};

/// Values by the id the emulator answered with, the latest `capacity` kept, oldest first
/// forgotten: what a provider keeps of its answers for a while.
pub struct Recent<V> {
    by_id: HashMap<String, V>,
    order: VecDeque<String>,
    capacity: usize,
}

impl<V> Recent<V> {
    pub fn new(capacity: usize) -> Self {
        Recent {
            by_id: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    pub fn get(&self, id: &str) -> Option<&V> {
        self.by_id.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        self.by_id.get_mut(id)
    }

    pub fn remove(&mut self, id: &str) -> Option<V> {
        let removed = self.by_id.remove(id)?;
        self.order.retain(|kept| kept != id);
        Some(removed)
    }

    pub fn insert(&mut self, id: String, value: V) {
        if self.order.len() >= self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.by_id.remove(&oldest);
            }
        }
        self.by_id.insert(id.clone(), value);
        self.order.push_back(id);
    }
}
