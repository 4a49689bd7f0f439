//! The connection table of a core: slots reused through a free list, O(1) lookup by
//! 4-tuple and by connection id, and a generation per slot so that stale references
//! (timers, doorbells, the last-segment cache) to a reused slot are recognised.
//!
//! The hash is foldhash with a per-process random seed: fast enough for a lookup per
//! received segment, and keyed, so a peer choosing its ports and addresses cannot
//! predict collisions (hash flooding).

use std::collections::HashMap;

use crate::rings::ConnId;
use proto::tcp::FourTuple;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A slot number and its generation: names one occupant of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Token {
    pub slot: u32,
    pub gen: u32,
}

impl Token {
    /// As one word (for rings).
    pub fn to_u64(self) -> u64 {
        u64::from(self.slot) | (u64::from(self.gen) << 32)
    }

    /// From [`Token::to_u64`].
    pub fn from_u64(v: u64) -> Token {
        Token {
            slot: v as u32,
            gen: (v >> 32) as u32,
        }
    }
}

struct Slot<T> {
    gen: u32,
    val: Option<Box<T>>,
}

/// Slots of `T`, each under one 4-tuple and one connection id.
pub(crate) struct Table<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    by_tuple: Map<FourTuple, u32>,
    by_id: Map<ConnId, u32>,
}

impl<T> Table<T> {
    pub fn new() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            by_tuple: Map::default(),
            by_id: Map::default(),
        }
    }

    /// Occupied slots.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Stores `val` under `tuple` and `id`; `None` if either is taken already.
    pub fn insert(&mut self, tuple: FourTuple, id: ConnId, val: T) -> Option<Token> {
        if self.by_tuple.contains_key(&tuple) || self.by_id.contains_key(&id) {
            return None;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot { gen: 0, val: None });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.gen = s.gen.wrapping_add(1);
        s.val = Some(Box::new(val));
        self.by_tuple.insert(tuple, slot);
        self.by_id.insert(id, slot);
        Some(Token { slot, gen: s.gen })
    }

    /// Removes the occupant of `slot` (known by its tuple and id).
    pub fn remove(&mut self, slot: u32, tuple: &FourTuple, id: ConnId) -> Option<Box<T>> {
        let s = self.slots.get_mut(slot as usize)?;
        let v = s.val.take()?;
        if self.by_tuple.get(tuple) == Some(&slot) {
            self.by_tuple.remove(tuple);
        }
        if self.by_id.get(&id) == Some(&slot) {
            self.by_id.remove(&id);
        }
        self.free.push(slot);
        Some(v)
    }

    /// The token of the connection on `tuple`.
    pub fn find_tuple(&self, tuple: &FourTuple) -> Option<Token> {
        let slot = *self.by_tuple.get(tuple)?;
        Some(Token {
            slot,
            gen: self.slots[slot as usize].gen,
        })
    }

    /// The token of connection `id`.
    pub fn find_id(&self, id: ConnId) -> Option<Token> {
        let slot = *self.by_id.get(&id)?;
        Some(Token {
            slot,
            gen: self.slots[slot as usize].gen,
        })
    }

    /// Whether a connection uses `tuple`.
    pub fn has_tuple(&self, tuple: &FourTuple) -> bool {
        self.by_tuple.contains_key(tuple)
    }

    /// The occupant named by `t`, if it is still there.
    pub fn get_mut(&mut self, t: Token) -> Option<&mut T> {
        let s = self.slots.get_mut(t.slot as usize)?;
        if s.gen != t.gen {
            return None;
        }
        s.val.as_deref_mut()
    }

    /// Every occupant.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.val.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv4Address;

    fn t(port: u16) -> FourTuple {
        FourTuple {
            local_addr: Ipv4Address::new(10, 0, 0, 1),
            local_port: 1,
            remote_addr: Ipv4Address::new(10, 0, 0, 2),
            remote_port: port,
        }
    }

    #[test]
    fn slots_are_reused_with_a_new_generation() {
        let mut tab: Table<u32> = Table::new();
        let a = tab.insert(t(1), 1, 10).unwrap();
        let b = tab.insert(t(2), 2, 20).unwrap();
        assert!(tab.insert(t(1), 3, 0).is_none(), "tuple taken");
        assert!(tab.insert(t(3), 2, 0).is_none(), "id taken");
        assert_eq!(tab.len(), 2);
        assert_eq!(*tab.remove(a.slot, &t(1), 1).unwrap(), 10);
        assert!(tab.get_mut(a).is_none());
        let c = tab.insert(t(4), 4, 40).unwrap();
        assert_eq!(c.slot, a.slot);
        assert_ne!(c.gen, a.gen);
        assert!(tab.get_mut(a).is_none(), "stale token");
        assert_eq!(tab.get_mut(c).copied(), Some(40));
        assert_eq!(tab.find_tuple(&t(4)), Some(c));
        assert_eq!(tab.find_id(2), Some(b));
        assert_eq!(Token::from_u64(c.to_u64()), c);
        assert_eq!(tab.iter().count(), 2);
    }
}
