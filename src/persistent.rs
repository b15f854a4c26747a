//! Persistent collections that start as plain vectors.
//!
//! A session's loaded log and its indexes are shared between snapshots, so that a long
//! session grows by what is new and not by copying what it already holds: `imbl`'s
//! vector and map share their nodes between clones. But their nodes have a fixed size (64
//! slots a vector chunk, 32 a map node, whatever they hold), so a session of ten requests
//! pays a whole node for each index. These hold their first [`FEW`] elements in a plain
//! `Vec`, copied when a snapshot grows (as a shared node would be), and move to `imbl`
//! past that, so a short session pays for what it holds and a long one shares as before.

use std::hash::Hash;

/// How many elements stay in a plain `Vec`: copying this many on a clone costs about
/// what copying one shared node does.
pub const FEW: usize = 32;

/// A sequence: a `Vec` while short, an `imbl::Vector` once longer than [`FEW`].
#[derive(Clone)]
pub struct Vector<T: Clone>(Seq<T>);

#[derive(Clone)]
enum Seq<T: Clone> {
    Few(Vec<T>),
    Many(imbl::Vector<T>),
}

impl<T: Clone> Default for Vector<T> {
    fn default() -> Self {
        Vector(Seq::Few(Vec::new()))
    }
}

impl<T: Clone> Vector<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Seq::Few(v) => v.len(),
            Seq::Many(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        match &self.0 {
            Seq::Few(v) => v.get(index),
            Seq::Many(v) => v.get(index),
        }
    }

    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    /// Replace element `index` (which must exist), returning the old one.
    pub fn set(&mut self, index: usize, value: T) -> T {
        match &mut self.0 {
            Seq::Few(v) => std::mem::replace(&mut v[index], value),
            Seq::Many(v) => v.set(index, value),
        }
    }

    pub fn push_back(&mut self, value: T) {
        match &mut self.0 {
            Seq::Few(v) if v.len() < FEW => {
                // A clone holds exactly its length: grow by one, not by doubling.
                v.reserve_exact(1);
                v.push(value);
            }
            Seq::Few(v) => {
                let mut many: imbl::Vector<T> = std::mem::take(v).into_iter().collect();
                many.push_back(value);
                self.0 = Seq::Many(many);
            }
            Seq::Many(v) => v.push_back(value),
        }
    }

    pub fn pop_front(&mut self) -> Option<T> {
        match &mut self.0 {
            Seq::Few(v) if v.is_empty() => None,
            Seq::Few(v) => Some(v.remove(0)),
            Seq::Many(v) => v.pop_front(),
        }
    }

    pub fn truncate(&mut self, len: usize) {
        match &mut self.0 {
            Seq::Few(v) => v.truncate(len),
            Seq::Many(v) => v.truncate(len),
        }
    }

    pub fn iter(&self) -> Iter<'_, T> {
        match &self.0 {
            Seq::Few(v) => Iter::Few(v.iter()),
            Seq::Many(v) => Iter::Many(v.iter()),
        }
    }
}

impl<T: Clone + PartialEq> PartialEq for Vector<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: Clone + std::fmt::Debug> std::fmt::Debug for Vector<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// An iterator over a [`Vector`], from either end.
pub enum Iter<'a, T: Clone> {
    Few(std::slice::Iter<'a, T>),
    Many(imbl::vector::Iter<'a, T, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a, T: Clone> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        match self {
            Iter::Few(i) => i.next(),
            Iter::Many(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Few(i) => i.size_hint(),
            Iter::Many(i) => i.size_hint(),
        }
    }
}

impl<T: Clone> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Few(i) => i.next_back(),
            Iter::Many(i) => i.next_back(),
        }
    }
}

/// A map: a `Vec` of pairs while small, an `imbl::HashMap` once it holds more than
/// [`FEW`].
#[derive(Clone)]
pub struct HashMap<K: Clone, V: Clone>(Map<K, V>);

#[derive(Clone)]
enum Map<K: Clone, V: Clone> {
    Few(Vec<(K, V)>),
    Many(imbl::HashMap<K, V>),
}

impl<K: Clone, V: Clone> Default for HashMap<K, V> {
    fn default() -> Self {
        HashMap(Map::Few(Vec::new()))
    }
}

impl<K: Clone + Hash + Eq, V: Clone> HashMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Map::Few(v) => v.len(),
            Map::Many(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.0 {
            Map::Few(v) => v.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            Map::Many(m) => m.get(key),
        }
    }

    /// Set `key` to `value`, returning the value it had.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(slot) = self.get_mut(&key) {
            return Some(std::mem::replace(slot, value));
        }
        self.add(key, value);
        None
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        match &mut self.0 {
            Map::Few(v) => {
                let at = v.iter().position(|(k, _)| k == key)?;
                Some(v.remove(at).1)
            }
            Map::Many(m) => m.remove(key),
        }
    }

    /// The value of `key`, set to the default first when it has none.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        if self.get(&key).is_none() {
            self.add(key.clone(), V::default());
        }
        self.get_mut(&key).expect("just added")
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    pub fn iter(&self) -> MapIter<'_, K, V> {
        match &self.0 {
            Map::Few(v) => MapIter::Few(v.iter()),
            Map::Many(m) => MapIter::Many(m.iter()),
        }
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.0 {
            Map::Few(v) => v.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            Map::Many(m) => m.get_mut(key),
        }
    }

    /// Add `key`, which the map does not hold.
    fn add(&mut self, key: K, value: V) {
        match &mut self.0 {
            Map::Few(v) if v.len() < FEW => {
                v.reserve_exact(1);
                v.push((key, value));
            }
            Map::Few(v) => {
                let mut many: imbl::HashMap<K, V> = std::mem::take(v).into_iter().collect();
                many.insert(key, value);
                self.0 = Map::Many(many);
            }
            Map::Many(m) => {
                m.insert(key, value);
            }
        }
    }
}

/// An iterator over a [`HashMap`]'s pairs, in no particular order.
// Lives on the stack for one walk; boxing the larger variant would allocate per walk.
#[allow(clippy::large_enum_variant)]
pub enum MapIter<'a, K: Clone, V: Clone> {
    Few(std::slice::Iter<'a, (K, V)>),
    Many(imbl::hashmap::Iter<'a, K, V, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a, K: Clone, V: Clone> Iterator for MapIter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<(&'a K, &'a V)> {
        match self {
            MapIter::Few(i) => i.next().map(|(k, v)| (k, v)),
            MapIter::Many(i) => i.next(),
        }
    }
}

impl<K: Clone + Hash + Eq, V: Clone + PartialEq> PartialEq for HashMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl<K, V> std::fmt::Debug for HashMap<K, V>
where
    K: Clone + Hash + Eq + std::fmt::Debug,
    V: Clone + std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(u16),
        PopFront,
        Truncate(usize),
        Set(usize, u16),
        Insert(u8, u16),
        Remove(u8),
        Default(u8),
        Clone,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<u16>().prop_map(Op::Push),
            1 => Just(Op::PopFront),
            1 => (0usize..80).prop_map(Op::Truncate),
            1 => (0usize..80, any::<u16>()).prop_map(|(i, x)| Op::Set(i, x)),
            6 => (0u8..60, any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0u8..60).prop_map(Op::Remove),
            1 => (0u8..60).prop_map(Op::Default),
            1 => Just(Op::Clone),
        ]
    }

    proptest! {
        /// Whatever its representation, each behaves as the std collection it stands for,
        /// across the move from small to shared and across clones.
        #[test]
        fn they_behave_as_std_collections(ops in prop::collection::vec(op(), 0..300)) {
            behave_as_std_collections(ops)?;
        }
    }

    /// A value at its largest, then counted up by `get_or_default`: the case the property
    /// once found in its own arithmetic.
    #[test]
    fn a_value_at_its_largest_is_counted_up_alike() {
        behave_as_std_collections(vec![Op::Insert(19, u16::MAX), Op::Default(19)]).unwrap();
    }

    fn behave_as_std_collections(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let (mut vector, mut expected) = (Vector::<u16>::new(), Vec::<u16>::new());
        let (mut map, mut expected_map) = (
            HashMap::<u8, u16>::new(),
            std::collections::HashMap::<u8, u16>::new(),
        );
        let mut kept = Vec::new();
        for op in ops {
            match op {
                Op::Push(x) => {
                    vector.push_back(x);
                    expected.push(x);
                }
                Op::PopFront => {
                    let want = (!expected.is_empty()).then(|| expected.remove(0));
                    prop_assert_eq!(vector.pop_front(), want);
                }
                Op::Truncate(n) => {
                    vector.truncate(n);
                    expected.truncate(n);
                }
                Op::Set(i, x) if i < expected.len() => {
                    prop_assert_eq!(vector.set(i, x), std::mem::replace(&mut expected[i], x));
                }
                Op::Set(..) => {}
                Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), expected_map.insert(k, v)),
                Op::Remove(k) => prop_assert_eq!(map.remove(&k), expected_map.remove(&k)),
                Op::Default(k) => {
                    // Wrapping: a value may already be the largest.
                    let value = map.get_or_default(k);
                    *value = value.wrapping_add(1);
                    let want = expected_map.entry(k).or_default();
                    *want = want.wrapping_add(1);
                }
                Op::Clone => kept.push((vector.clone(), expected.clone())),
            }
            prop_assert_eq!(vector.len(), expected.len());
            prop_assert!(vector.iter().eq(expected.iter()));
            prop_assert!(vector.iter().rev().eq(expected.iter().rev()));
            prop_assert_eq!(vector.front(), expected.first());
            prop_assert_eq!(map.len(), expected_map.len());
            for k in 0u8..60 {
                prop_assert_eq!(map.get(&k), expected_map.get(&k));
            }
        }
        // A clone is a snapshot: what was done after it does not show in it.
        for (snapshot, want) in kept {
            prop_assert!(snapshot.iter().eq(want.iter()));
        }
        Ok(())
    }
}
