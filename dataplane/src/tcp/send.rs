//! The FPDU-granular send queue (RFC 5044 section 5.3 / draft 5.3, "MPA-aware TCP").
//!
//! The consumer pushes whole records (FPDUs, or an MPA Request/Reply frame before FPDU
//! mode). The queue remembers their boundaries until they are fully acknowledged, so that
//! every segment, new or retransmitted, can be cut at record boundaries.

use std::collections::VecDeque;

/// One record as pushed: it occupies stream octets `off .. off + data.len()`.
#[derive(Debug, Clone)]
struct Record {
    off: u64,
    data: Vec<u8>,
}

impl Record {
    fn end(&self) -> u64 {
        self.off + self.data.len() as u64
    }
}

/// A planned segment payload: `len` octets from stream offset `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub start: u64,
    pub len: usize,
    /// Starts and ends at record boundaries (holds only whole records).
    pub whole: bool,
}

/// Records not yet fully acknowledged, in stream order.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendQueue {
    recs: VecDeque<Record>,
    /// Stream offset after the last queued octet.
    end: u64,
    /// Octets held.
    bytes: usize,
}

impl SendQueue {
    /// Stream offset one past the last octet queued.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Octets held (sent or not, until acknowledged).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Records held (sent or not, until acknowledged).
    pub fn records(&self) -> usize {
        self.recs.len()
    }

    /// Appends one record; empty records are ignored.
    pub fn push(&mut self, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let off = self.end;
        self.end += data.len() as u64;
        self.bytes += data.len();
        self.recs.push_back(Record { off, data });
    }

    /// Drops every record wholly below stream offset `off` (acknowledged).
    pub fn ack_to(&mut self, off: u64) {
        while let Some(r) = self.recs.front() {
            if r.end() <= off {
                self.bytes -= r.data.len();
                self.recs.pop_front();
            } else {
                break;
            }
        }
    }

    /// Index of the record holding stream offset `off`.
    fn find(&self, off: u64) -> Option<usize> {
        let i = self.recs.partition_point(|r| r.end() <= off);
        match self.recs.get(i) {
            Some(r) if r.off <= off => Some(i),
            _ => None,
        }
    }

    /// `(start, end)` of the record holding `off`.
    pub fn record_bounds(&self, off: u64) -> Option<(u64, u64)> {
        self.find(off)
            .map(|i| (self.recs[i].off, self.recs[i].end()))
    }

    /// True when `off` is a record boundary (or past the queue).
    pub fn is_boundary(&self, off: u64) -> bool {
        match self.find(off) {
            Some(i) => self.recs[i].off == off,
            None => true,
        }
    }

    /// Plans a segment payload from stream offset `start`, at most `max_len` octets and
    /// ending at or before `max_end`.
    ///
    /// From a record boundary it packs as many whole records as fit. When the first record
    /// does not fit (or `start` is inside a record) the payload is a piece of one record,
    /// and `whole` is false. Returns a zero-length plan when nothing fits.
    pub fn plan(&self, start: u64, max_len: usize, max_end: u64) -> Plan {
        let empty = Plan {
            start,
            len: 0,
            whole: false,
        };
        let Some(i) = self.find(start) else {
            return empty;
        };
        if max_end <= start || max_len == 0 {
            return empty;
        }
        let room = (max_end - start).min(max_len as u64);
        let first = &self.recs[i];
        if first.off == start {
            let mut end = start;
            for r in self.recs.range(i..) {
                if r.end() - start > room {
                    break;
                }
                end = r.end();
            }
            if end > start {
                return Plan {
                    start,
                    len: (end - start) as usize,
                    whole: true,
                };
            }
        }
        let len = (first.end() - start).min(room) as usize;
        Plan {
            start,
            len,
            whole: false,
        }
    }

    /// Appends stream octets `start .. start + len` to `out`. Octets not held are skipped
    /// (callers only ask for held ranges).
    pub fn copy(&self, start: u64, len: usize, out: &mut Vec<u8>) {
        let end = start + len as u64;
        let Some(mut i) = self.find(start) else {
            return;
        };
        let mut pos = start;
        while pos < end {
            let Some(r) = self.recs.get(i) else {
                return;
            };
            let a = (pos - r.off) as usize;
            let b = (end.min(r.end()) - r.off) as usize;
            out.extend_from_slice(&r.data[a..b]);
            pos = r.off + b as u64;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(sizes: &[usize]) -> SendQueue {
        let mut q = SendQueue::default();
        for (n, &s) in sizes.iter().enumerate() {
            q.push(vec![n as u8; s]);
        }
        q
    }

    #[test]
    fn packs_whole_records() {
        let q = q(&[100, 200, 300, 1000]);
        assert_eq!(
            q.plan(0, 1000, u64::MAX),
            Plan {
                start: 0,
                len: 600,
                whole: true
            }
        );
        assert_eq!(q.plan(100, 1000, u64::MAX).len, 500);
        assert_eq!(q.plan(100, 1000, 350).len, 200);
        // First record too big for the window: a piece.
        assert_eq!(
            q.plan(600, 1000, 900),
            Plan {
                start: 600,
                len: 300,
                whole: false
            }
        );
        // Inside a record: the rest of it.
        assert_eq!(q.plan(650, 2000, u64::MAX).len, 950);
        assert!(!q.plan(650, 2000, u64::MAX).whole);
        assert_eq!(q.plan(1600, 2000, u64::MAX).len, 0);
        assert_eq!(q.record_bounds(650), Some((600, 1600)));
        assert!(q.is_boundary(300));
        assert!(!q.is_boundary(301));
    }

    #[test]
    fn copy_and_ack() {
        let mut q = q(&[3, 2, 4]);
        let mut out = Vec::new();
        q.copy(1, 6, &mut out);
        assert_eq!(out, [0, 0, 1, 1, 2, 2]);
        q.ack_to(4);
        assert_eq!(q.records(), 2);
        assert_eq!(q.bytes(), 6);
        q.ack_to(9);
        assert_eq!(q.records(), 0);
        assert_eq!(q.end(), 9);
        assert_eq!(q.plan(9, 10, 100).len, 0);
    }
}
