//! Per-connection deadlines of a core in one heap, so that a poll visits only the
//! connections whose time has come.
//!
//! Each connection has at most one live entry: the earliest deadline asked for. A later
//! deadline asked for while an earlier one is pending adds nothing (the connection is
//! looked at early and asks again); an earlier one adds an entry and makes the old one
//! stale. Stale entries are recognised (slot generation, or a deadline that is no longer
//! the connection's) and skipped when they come out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::table::Token;

/// Deadlines in microseconds since the core's epoch.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl Timers {
    /// Schedules `t` at `at` unless `current` (its live deadline) is already at or before
    /// it; returns the live deadline afterwards.
    pub fn schedule(&mut self, t: Token, current: Option<u64>, at: u64) -> Option<u64> {
        if current.is_some_and(|c| c <= at) {
            return current;
        }
        self.heap.push(Reverse((at, t.to_u64())));
        Some(at)
    }

    /// The next entry due at `now`: its token and deadline (maybe stale; the caller checks).
    pub fn pop_due(&mut self, now: u64) -> Option<(Token, u64)> {
        let Reverse((at, t)) = *self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        Some((Token::from_u64(t), at))
    }

    /// Entries held (live and stale).
    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_later_requests_add_nothing() {
        let mut tm = Timers::default();
        let a = Token { slot: 1, gen: 1 };
        let b = Token { slot: 2, gen: 1 };
        let live_a = tm.schedule(a, None, 100);
        assert_eq!(tm.schedule(a, live_a, 200), Some(100));
        assert_eq!(tm.len(), 1);
        let live_b = tm.schedule(b, None, 50);
        let live_b2 = tm.schedule(b, live_b, 10);
        assert_eq!(live_b2, Some(10));
        assert_eq!(tm.pop_due(5), None);
        assert_eq!(tm.pop_due(60), Some((b, 10)));
        assert_eq!(
            tm.pop_due(60),
            Some((b, 50)),
            "the stale entry comes out too"
        );
        assert_eq!(tm.pop_due(60), None);
        assert_eq!(tm.pop_due(100), Some((a, 100)));
        assert_eq!(tm.len(), 0);
    }
}
