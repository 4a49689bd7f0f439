//! The FPDU-granular send queue (RFC 5044 section 5.3 / draft 5.3, "MPA-aware TCP").
//!
//! The consumer pushes whole records (FPDUs, or an MPA Request/Reply frame before FPDU
//! mode). The queue remembers their boundaries until they are fully acknowledged, so that
//! every segment, new or retransmitted, can be cut at record boundaries.
//!
//! # Records shared with the device
//!
//! A record is immutable once pushed. For a port that transmits payloads without copying
//! them, [`SendQueue::share`] moves the record into a [`SharedRecord`] (an `Arc`) the
//! first time a segment is cut from it, so that the port can keep a reference until its
//! device has read the octets (DPDK: an mbuf attached to the record as an external
//! buffer, released when the PMD frees the mbuf). When an acknowledged record's buffer is
//! reused for a later record, that happens only if no such reference is left; otherwise
//! the last reference frees it. Records are shared only on request, so connections on
//! ports that copy pay nothing for it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

/// The octets of one record, shared with ports that transmit from them without copying.
pub type SharedRecord = Arc<Vec<u8>>;

/// A record's octets: owned by the queue alone, or shared ([`SendQueue::share`]).
#[derive(Debug, Clone)]
enum RecordBuf {
    Owned(Vec<u8>),
    Shared(SharedRecord),
}

impl std::ops::Deref for RecordBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            RecordBuf::Owned(v) => v,
            RecordBuf::Shared(a) => a,
        }
    }
}

/// Where a segment's payload lies, from [`SendQueue::payload`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// In one record, shared: `record[offset..offset + len]`.
    Shared {
        record: &'a SharedRecord,
        offset: usize,
    },
    /// In one record not shared (sharing was not asked for).
    Plain(&'a [u8]),
    /// Across several records: the caller copies it out ([`SendQueue::copy`]).
    Split,
}

/// One record as pushed: it occupies stream octets `off .. end`.
#[derive(Debug, Clone)]
struct Record {
    off: u64,
    /// `off + data.len()`, kept here so that lookups need not reach into the shared
    /// buffer.
    end: u64,
    data: RecordBuf,
    /// Wholly covered by SACK blocks (RFC 6675 scoreboard).
    sacked: bool,
    /// Retransmitted in the current loss recovery (RFC 6675 HighRxt, per record).
    rtx: bool,
    /// When it was last transmitted, as a count of the queue's transmissions
    /// ([`SendQueue::mark_sent`]); 0 before the first.
    tx_order: u64,
    /// The one's complement sum of `data` (as `wire::tcp::checksum::data` gives it),
    /// taken when the record was queued, while its octets were still in cache: a
    /// segment of whole records gets its TCP checksum without reading them again.
    sum: u16,
}

impl Record {
    fn end(&self) -> u64 {
        self.end
    }

    fn len(&self) -> usize {
        (self.end - self.off) as usize
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
#[derive(Debug, Clone)]
pub(crate) struct SendQueue {
    recs: VecDeque<Record>,
    /// Stream offset after the last queued octet.
    end: u64,
    /// Octets held.
    bytes: usize,
    /// Records dropped from the front so far: `recs[i]` is record number `popped + i`.
    popped: u64,
    /// Number of the record [`SendQueue::find`] found last: lookups try it, the one
    /// before and the one after (segments go out in order, so the next lookup is almost
    /// always there) before falling back to a binary search.
    hint: Cell<u64>,
    /// Buffers of acknowledged records no port refers to any more, for
    /// [`SendQueue::take_buffer`].
    spare: Vec<Vec<u8>>,
    /// The capacity of the spare buffers, octets.
    spare_octets: usize,
    /// Most octets of capacity the spare buffers may hold ([`SendQueue::new`]).
    spare_limit: usize,
    /// Whether records' sums are taken as they are queued ([`SendQueue::payload_sum`]).
    sums: bool,
    /// Empty `Arc`s of acknowledged shared records, to share records in without an
    /// allocation.
    shells: Vec<SharedRecord>,
    /// Transmissions so far ([`SendQueue::mark_sent`]).
    tx_count: u64,
    /// The latest `tx_order` of a record known delivered (SACKed or acknowledged).
    delivered_order: u64,
}

/// Segments transmitted after a retransmission, one of them delivered, before the
/// retransmission is taken as lost: reordering of fewer segments than this on the path
/// does not resend it needlessly (RFC 6675's DupThresh, applied to transmission order).
pub const LOST_RTX_REORDER: u64 = 3;

/// Most buffers (and `Arc` shells) of acknowledged records kept for reuse.
const SPARE_BUFFERS: usize = 4096;

impl SendQueue {
    /// An empty queue whose spare buffers hold at most `spare_limit` octets of capacity
    /// (and at most [`SPARE_BUFFERS`] buffers). A connection gives its send buffer size,
    /// so that a window of records, small or large, is built again without an
    /// allocation (buffers are reserved for a whole MULPDU, so small records hold more
    /// capacity than octets); an idle connection gives them back
    /// ([`SendQueue::shrink`]). With `sums`, each record's one's complement sum is taken
    /// as it is queued ([`SendQueue::payload_sum`]).
    pub fn new(spare_limit: usize, sums: bool) -> Self {
        SendQueue {
            recs: VecDeque::new(),
            end: 0,
            bytes: 0,
            popped: 0,
            hint: Cell::new(0),
            spare: Vec::new(),
            spare_octets: 0,
            spare_limit,
            sums,
            shells: Vec::new(),
            tx_count: 0,
            delivered_order: 0,
        }
    }

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
        let sum = if self.sums {
            wire::tcp::checksum::data(&data)
        } else {
            0
        };
        self.push_record(data, sum);
    }

    /// Appends one record whose one's complement sum (as `wire::tcp::checksum::data`
    /// gives it) is known already; empty records are ignored.
    pub fn push_with_sum(&mut self, data: Vec<u8>, sum: u16) {
        debug_assert!(!self.sums || sum == wire::tcp::checksum::data(&data));
        self.push_record(data, sum);
    }

    fn push_record(&mut self, data: Vec<u8>, sum: u16) {
        if data.is_empty() {
            return;
        }
        let off = self.end;
        self.end += data.len() as u64;
        self.bytes += data.len();
        self.recs.push_back(Record {
            off,
            end: self.end,
            data: RecordBuf::Owned(data),
            sacked: false,
            rtx: false,
            tx_order: 0,
            sum,
        });
    }

    /// The one's complement sum (as `wire::tcp::checksum::data` gives it) of stream
    /// octets `start .. start + len` when they are whole records, from the sums taken as
    /// the records were queued; `None` when sums are not taken, or the range starts or
    /// ends inside a record or reaches octets not held.
    pub fn payload_sum(&self, start: u64, len: usize) -> Option<u16> {
        if !self.sums {
            return None;
        }
        let end = start.checked_add(len as u64)?;
        let mut i = self.find(start)?;
        if self.recs[i].off != start {
            return None;
        }
        let mut sum = 0u16;
        let mut pos = start;
        while pos < end {
            let r = self.recs.get(i)?;
            if r.end() > end {
                return None;
            }
            sum = wire::tcp::checksum::combine(sum, r.sum, (pos - start) as usize);
            pos = r.end();
            i += 1;
        }
        Some(sum)
    }

    /// Drops every record wholly below stream offset `off` (acknowledged). A record a
    /// port still refers to is left to that reference to free.
    pub fn ack_to(&mut self, off: u64) {
        while let Some(r) = self.recs.front() {
            if r.end() <= off {
                self.delivered_order = self.delivered_order.max(r.tx_order);
                self.bytes -= r.len();
                let room = self.spare.len() < SPARE_BUFFERS;
                match self.recs.pop_front().map(|r| r.data) {
                    Some(RecordBuf::Owned(v))
                        if room && self.spare_octets + v.capacity() <= self.spare_limit =>
                    {
                        self.spare_octets += v.capacity();
                        self.spare.push(v);
                    }
                    Some(RecordBuf::Shared(mut a)) if room => {
                        if let Some(v) = Arc::get_mut(&mut a) {
                            if self.spare_octets + v.capacity() <= self.spare_limit {
                                self.spare_octets += v.capacity();
                                self.spare.push(std::mem::take(v));
                                self.shells.push(a);
                            }
                        }
                    }
                    _ => {}
                }
                self.popped += 1;
            } else {
                break;
            }
        }
    }

    /// Frees the spare buffers, and the record queue's memory when it is empty.
    pub fn shrink(&mut self) {
        self.spare = Vec::new();
        self.spare_octets = 0;
        self.shells = Vec::new();
        if self.recs.is_empty() {
            self.recs = VecDeque::new();
        }
    }

    /// An empty buffer for the next record: one of an acknowledged record (its capacity
    /// kept, so records of one size need no allocation) or a new one.
    pub fn take_buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        self.spare_octets = self.spare_octets.saturating_sub(b.capacity());
        b.clear();
        b
    }

    /// Index of the record holding stream offset `off`.
    fn find(&self, off: u64) -> Option<usize> {
        let h = self.hint.get().saturating_sub(self.popped) as usize;
        // One back too: a transmission looks up its segment's record, then the boundary
        // after it (the next record), then marks the segment sent from its start.
        for i in h.saturating_sub(1)..(h + 2).min(self.recs.len()) {
            let r = &self.recs[i];
            if r.off <= off && off < r.end() {
                self.hint.set(self.popped + i as u64);
                return Some(i);
            }
        }
        let i = self.recs.partition_point(|r| r.end() <= off);
        match self.recs.get(i) {
            Some(r) if r.off <= off => {
                self.hint.set(self.popped + i as u64);
                Some(i)
            }
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

    /// Stream octets `start .. start + len` when one record holds them all.
    #[cfg(test)]
    pub fn slice(&self, start: u64, len: usize) -> Option<&[u8]> {
        match self.payload(start, len) {
            Payload::Plain(p) => Some(p),
            Payload::Shared { record, offset } => Some(&record[offset..offset + len]),
            Payload::Split => None,
        }
    }

    /// Index of the record holding all of stream octets `start .. start + len`, and the
    /// offset of `start` in it.
    fn holding(&self, start: u64, len: usize) -> Option<(usize, usize)> {
        let i = self.find(start)?;
        let r = &self.recs[i];
        let a = (start - r.off) as usize;
        (a.checked_add(len)? <= r.len()).then_some((i, a))
    }

    /// Moves the record holding all of stream octets `start .. start + len` (if one
    /// does) into a [`SharedRecord`], so that [`SendQueue::payload`] gives
    /// [`Payload::Shared`] for it.
    pub fn share(&mut self, start: u64, len: usize) {
        let Some((i, _)) = self.holding(start, len) else {
            return;
        };
        if let RecordBuf::Owned(v) = &mut self.recs[i].data {
            let v = std::mem::take(v);
            let shared = match self.shells.pop() {
                Some(mut shell) => match Arc::get_mut(&mut shell) {
                    Some(slot) => {
                        *slot = v;
                        shell
                    }
                    // Shells are kept only while unshared; never reached.
                    None => Arc::new(v),
                },
                None => Arc::new(v),
            };
            self.recs[i].data = RecordBuf::Shared(shared);
        }
    }

    /// Where stream octets `start .. start + len` lie: in one shared record
    /// ([`SendQueue::share`]), in one record not shared, or across records (also for
    /// octets not held).
    pub fn payload(&self, start: u64, len: usize) -> Payload<'_> {
        match self.holding(start, len) {
            Some((i, a)) => match &self.recs[i].data {
                RecordBuf::Shared(record) => Payload::Shared { record, offset: a },
                RecordBuf::Owned(v) => Payload::Plain(&v[a..a + len]),
            },
            None => Payload::Split,
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

/// Why a record is chosen for retransmission in SACK recovery (RFC 6675 section 4,
/// NextSeg).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoleRule {
    /// Rule 1: presumed lost (IsLost) and not yet retransmitted.
    Lost,
    /// Rule 3: not SACKed, not retransmitted, with SACKed data above it.
    Unsacked,
}

impl SendQueue {
    /// Marks the records wholly inside stream offsets `[lo, hi)` SACKed. Returns the
    /// octets newly marked.
    pub fn mark_sacked(&mut self, lo: u64, hi: u64) -> u64 {
        let mut i = self.recs.partition_point(|r| r.off < lo);
        let mut n = 0;
        let mut delivered = self.delivered_order;
        while let Some(r) = self.recs.get_mut(i) {
            if r.end() > hi {
                break;
            }
            if !r.sacked {
                r.sacked = true;
                n += r.len() as u64;
                delivered = delivered.max(r.tx_order);
            }
            i += 1;
        }
        self.delivered_order = delivered;
        n
    }

    /// Counts one transmission of the records overlapping `[start, start + len)`: they
    /// were sent after every earlier one.
    pub fn mark_sent(&mut self, start: u64, len: usize) {
        self.tx_count += 1;
        let order = self.tx_count;
        let end = start + len as u64;
        // Segments go out in order: the lookup starts where the last one was found.
        let Some(mut i) = self.find(start) else {
            return;
        };
        while let Some(r) = self.recs.get_mut(i) {
            if r.off >= end {
                break;
            }
            r.tx_order = order;
            i += 1;
        }
    }

    /// Lost retransmissions in `[una, high)`: records retransmitted in this recovery, not
    /// SACKed, transmitted at least [`LOST_RTX_REORDER`] transmissions before a record
    /// known delivered. Their retransmitted marks are cleared (so NextSeg may send them
    /// again and pipe no longer counts them); returns how many.
    pub fn take_lost_retransmissions(&mut self, una: u64, high: u64) -> u64 {
        let first = self.recs.partition_point(|r| r.end() <= una);
        let last = self.recs.partition_point(|r| r.off < high);
        let delivered = self.delivered_order;
        let mut n = 0;
        for r in self.recs.range_mut(first..last) {
            if r.rtx && !r.sacked && r.tx_order + LOST_RTX_REORDER <= delivered {
                r.rtx = false;
                n += 1;
            }
        }
        n
    }

    /// Forgets all SACK information (after a retransmission timeout, RFC 2018 section 8).
    pub fn clear_sacked(&mut self) {
        for r in &mut self.recs {
            r.sacked = false;
            r.rtx = false;
        }
    }

    /// Clears the retransmitted marks (a new recovery episode starts).
    pub fn clear_rtx(&mut self) {
        for r in &mut self.recs {
            r.rtx = false;
        }
    }

    /// Marks the records overlapping `[start, start + len)` retransmitted.
    pub fn mark_rtx(&mut self, start: u64, len: usize) {
        let end = start + len as u64;
        let mut i = self.recs.partition_point(|r| r.end() <= start);
        while let Some(r) = self.recs.get_mut(i) {
            if r.off >= end {
                break;
            }
            r.rtx = true;
            i += 1;
        }
    }

    /// Visits each record overlapping `[una, high)` (stream offsets), from the last down
    /// to the first, with the octets of it in that range, whether it is presumed lost
    /// (IsLost, RFC 6675 section 4: not SACKed, and more than `(DupThresh - 1) * SMSS`
    /// octets or at least DupThresh records SACKed above it; DupThresh = 3), and whether
    /// any record above it in the range is SACKed. One pass, no allocation: it runs on
    /// every ACK and every transmission of a recovery.
    fn scan_down(
        &self,
        una: u64,
        high: u64,
        smss: u64,
        mut visit: impl FnMut(&Record, u64, bool, bool),
    ) {
        debug_assert!(una <= high, "scoreboard range {una}..{high}");
        let first = self.recs.partition_point(|r| r.end() <= una);
        let last = self.recs.partition_point(|r| r.off < high);
        let (mut bytes, mut count) = (0u64, 0u32);
        for r in self.recs.range(first..last.max(first)).rev() {
            let span = r.end().min(high) - r.off.max(una);
            let lost = !r.sacked && (bytes > 2 * smss || count >= 3);
            visit(r, span, lost, count > 0);
            if r.sacked {
                bytes += span;
                count += 1;
            }
        }
    }

    /// RFC 6675 SetPipe over `[una, high)`: of the octets not SACKed, those not presumed
    /// lost, plus those retransmitted in this recovery (a retransmission SACKed since has
    /// left the network: it counts no more).
    pub fn pipe(&self, una: u64, high: u64, smss: u64) -> u64 {
        let mut pipe = 0;
        self.scan_down(una, high, smss, |r, span, lost, _| {
            if r.sacked {
                return;
            }
            if !lost {
                pipe += span;
            }
            if r.rtx {
                pipe += span;
            }
        });
        pipe
    }

    /// Whether, of the records in `[una, high)`, the first is not SACKed and every later
    /// one (there being at least one) is: what RFC 5827 early retransmission waits for
    /// when a flight is too small for three duplicate ACKs.
    pub fn only_first_missing(&self, una: u64, high: u64) -> bool {
        let first = self.recs.partition_point(|r| r.end() <= una);
        let last = self.recs.partition_point(|r| r.off < high);
        last > first + 1
            && !self.recs[first].sacked
            && (first + 1..last).all(|k| self.recs[k].sacked)
    }

    /// IsLost for the record holding `una`.
    pub fn first_is_lost(&self, una: u64, high: u64, smss: u64) -> bool {
        // The first record is the last one visited.
        let mut first_lost = false;
        self.scan_down(una, high, smss, |_, _, lost, _| first_lost = lost);
        first_lost
    }

    /// NextSeg rules 1 or 3 (RFC 6675 section 4) at record granularity: the start of the
    /// first record to retransmit under `rule`, if any.
    pub fn next_hole(&self, una: u64, high: u64, smss: u64, rule: HoleRule) -> Option<u64> {
        // Visited from the last down: the last pick is the first record's.
        let mut hole = None;
        self.scan_down(una, high, smss, |r, _, lost, sacked_above| {
            if r.sacked || r.rtx {
                return;
            }
            let pick = match rule {
                HoleRule::Lost => lost,
                HoleRule::Unsacked => sacked_above,
            };
            if pick {
                hole = Some(r.off.max(una));
            }
        });
        hole
    }

    /// Plans a retransmission from `start` (a record start or SND.UNA) packing the records
    /// of the same hole: not SACKed, not yet retransmitted, at most `max_len` octets,
    /// ending at or before `max_end`.
    pub fn plan_hole(&self, start: u64, max_len: usize, max_end: u64) -> Plan {
        let mut plan = self.plan(start, max_len, max_end);
        if !plan.whole {
            return plan;
        }
        // Trim the packed records at the first SACKed or retransmitted one.
        let Some(i) = self.find(start) else {
            return plan;
        };
        let mut end = start;
        for (n, r) in self.recs.range(i..).enumerate() {
            if r.end() > start + plan.len as u64 || (n > 0 && (r.sacked || r.rtx)) {
                break;
            }
            end = r.end();
        }
        plan.len = (end - start) as usize;
        plan
    }
}

/// The payload of a segment as it lies in a send-queue record: `record[offset..offset +
/// len]`. A port that transmits it without copying keeps a clone of `record` until its
/// device has read the octets.
#[derive(Debug, Clone, Copy)]
pub struct TxPayload<'a> {
    /// The record (immutable while shared).
    pub record: &'a SharedRecord,
    /// Where the payload starts in it.
    pub offset: usize,
    /// Payload octets.
    pub len: usize,
}

impl<'a> TxPayload<'a> {
    /// The payload octets (empty if the range lies outside the record).
    pub fn bytes(&self) -> &'a [u8] {
        let end = self.offset.saturating_add(self.len);
        self.record.get(self.offset..end).unwrap_or(&[])
    }

    /// Whether a frame of `header_len` header octets and this payload keeps the rules of
    /// `Port::tx_zero_copy` (the `dataplane` crate's port): headers of at least Ethernet, IPv4 and TCP (54 octets),
    /// a non-empty payload inside its record, both of even length, the whole at most
    /// `max_frame` octets.
    pub fn fits(&self, header_len: usize, max_frame: usize) -> bool {
        const MIN_HEADERS: usize = 14 + 20 + 20;
        header_len >= MIN_HEADERS
            && header_len.is_multiple_of(2)
            && self.len > 0
            && self.len.is_multiple_of(2)
            && self.bytes().len() == self.len
            && header_len.saturating_add(self.len) <= max_frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The sum of a run of whole records, from the sums taken as they were queued,
        /// is the sum of their octets read again; a run that splits a record has none.
        #[test]
        fn payload_sums_of_whole_records(
            recs in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300), 1..12),
            first in 0usize..12,
            count in 1usize..12,
            acked in 0usize..4,
        ) {
            let mut sq = SendQueue::new(1 << 20, true);
            for r in &recs {
                sq.push(r.clone());
            }
            let offs: Vec<u64> = recs
                .iter()
                .scan(0u64, |o, r| { let a = *o; *o += r.len() as u64; Some(a) })
                .collect();
            let acked = acked.min(recs.len() - 1);
            sq.ack_to(offs[acked]);
            let first = first.clamp(acked, recs.len() - 1);
            let last = (first + count).min(recs.len());
            let bytes: Vec<u8> = recs[first..last].concat();
            let start = offs[first];
            proptest::prop_assert_eq!(
                sq.payload_sum(start, bytes.len()),
                Some(wire::tcp::checksum::data(&bytes))
            );
            // Starting inside a record, or ending inside one: no sum.
            if recs[first].len() > 1 {
                proptest::prop_assert_eq!(sq.payload_sum(start + 1, bytes.len() - 1), None);
            }
            if recs[last - 1].len() > 1 {
                proptest::prop_assert_eq!(sq.payload_sum(start, bytes.len() - 1), None);
            }
            // Past what is held: none.
            proptest::prop_assert_eq!(sq.payload_sum(start, bytes.len() + 1 + sq.bytes()), None);
        }
    }

    fn q(sizes: &[usize]) -> SendQueue {
        let mut q = SendQueue::new(1 << 20, true);
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

    /// IsLost, SetPipe and NextSeg as the scoreboard states them (RFC 6675 at record
    /// granularity: SACKed records counted rather than discontiguous SACKed sequences, a
    /// record's retransmitted mark for HighRxt), written as plainly as they read over a
    /// list of `(offset, length, sacked, retransmitted)` records: the reference for the
    /// one-pass forms (it shows the single pass changed nothing, not that the record
    /// granularity is RFC 6675's own).
    fn scoreboard_reference(
        recs: &[(u64, u64, bool, bool)],
        una: u64,
        high: u64,
        smss: u64,
    ) -> (u64, bool, Option<u64>, Option<u64>) {
        let inside: Vec<_> = recs
            .iter()
            .filter(|r| r.0 + r.1 > una && r.0 < high)
            .collect();
        let span = |r: &(u64, u64, bool, bool)| (r.0 + r.1).min(high) - r.0.max(una);
        let is_lost = |k: usize| {
            let above = &inside[k + 1..];
            let bytes: u64 = above.iter().filter(|r| r.2).map(|r| span(r)).sum();
            let count = above.iter().filter(|r| r.2).count();
            !inside[k].2 && (bytes > 2 * smss || count >= 3)
        };
        let mut pipe = 0;
        for (k, r) in inside.iter().enumerate() {
            // SetPipe walks the octets not SACKed.
            if !r.2 && !is_lost(k) {
                pipe += span(r);
            }
            if !r.2 && r.3 {
                pipe += span(r);
            }
        }
        let first_lost = !inside.is_empty() && is_lost(0);
        let hole = |unsacked: bool| {
            (0..inside.len())
                .find(|&k| {
                    let r = inside[k];
                    !r.2 && !r.3
                        && if unsacked {
                            inside[k + 1..].iter().any(|r| r.2)
                        } else {
                            is_lost(k)
                        }
                })
                .map(|k| inside[k].0.max(una))
        };
        (pipe, first_lost, hole(false), hole(true))
    }

    proptest::proptest! {
        /// SetPipe, IsLost of the first record and NextSeg (both rules), as the scoreboard
        /// computes them in one pass, against the plain statement: random records, SACKs,
        /// retransmissions, and ranges that start and end inside records.
        #[test]
        fn scoreboard_agrees_with_its_plain_statement(
            sizes in proptest::collection::vec(1usize..400, 1..40),
            sacks in proptest::collection::vec((0u64..8000, 0u64..1500), 0..6),
            rtx in proptest::collection::vec((0u64..8000, 1usize..1200), 0..3),
            una in 0u64..4000,
            high_extra in 0u64..9000,
            smss in 50u64..300,
        ) {
            let mut q = q(&sizes);
            for &(lo, len) in &sacks {
                q.mark_sacked(lo, lo + len);
            }
            for &(start, len) in &rtx {
                q.mark_rtx(start, len);
            }
            let recs: Vec<_> = q.recs.iter().map(|r| (r.off, r.end() - r.off, r.sacked, r.rtx)).collect();
            let high = una + high_extra;
            let (pipe, first_lost, lost_hole, unsacked_hole) = scoreboard_reference(&recs, una, high, smss);
            proptest::prop_assert_eq!(q.pipe(una, high, smss), pipe);
            proptest::prop_assert_eq!(q.first_is_lost(una, high, smss), first_lost);
            proptest::prop_assert_eq!(q.next_hole(una, high, smss, HoleRule::Lost), lost_hole);
            proptest::prop_assert_eq!(q.next_hole(una, high, smss, HoleRule::Unsacked), unsacked_hole);
        }
    }

    #[test]
    fn scoreboard() {
        let mut q = q(&[100; 10]);
        // SACK records 3..=6 (offsets 300..700).
        assert_eq!(q.mark_sacked(250, 700), 400);
        // Four records (400 octets, more than 2 * SMSS of 100) above 0..3: lost.
        assert!(q.first_is_lost(0, 1000, 100));
        assert_eq!(q.next_hole(0, 1000, 100, HoleRule::Lost), Some(0));
        // Pipe: records 0..=2 lost (not counted), 3..=6 SACKed, 7..=9 in flight.
        assert_eq!(q.pipe(0, 1000, 100), 300);
        let p = q.plan_hole(0, 1000, u64::MAX);
        assert_eq!((p.len, p.whole), (300, true));
        q.mark_rtx(0, 300);
        assert_eq!(q.pipe(0, 1000, 100), 600);
        assert_eq!(q.next_hole(0, 1000, 100, HoleRule::Lost), None);
        assert_eq!(q.next_hole(0, 1000, 100, HoleRule::Unsacked), None);
        // A retransmitted record SACKed since has left the network.
        let mut r = q.clone();
        r.mark_sacked(100, 200);
        assert_eq!(r.pipe(0, 1000, 100), 500);
        q.clear_rtx();
        assert_eq!(q.next_hole(50, 1000, 100, HoleRule::Unsacked), Some(50));
        q.clear_sacked();
        assert!(!q.first_is_lost(0, 1000, 100));
        assert_eq!(q.pipe(0, 1000, 100), 1000);
    }

    #[test]
    fn slices_and_lookups_across_acks() {
        let mut q = q(&[3, 2, 4]);
        assert_eq!(q.slice(0, 3), Some(&[0u8, 0, 0][..]));
        assert_eq!(q.slice(1, 2), Some(&[0u8, 0][..]));
        assert_eq!(q.slice(2, 2), None, "spans two records");
        assert_eq!(q.slice(9, 1), None, "past the queue");
        // Lookups in any order, before and after records are dropped, agree with the
        // record layout (the hint must follow the front of the queue).
        for off in [8, 0, 4, 3, 5, 2, 7] {
            assert_eq!(
                q.record_bounds(off),
                Some(match off {
                    0..=2 => (0, 3),
                    3..=4 => (3, 5),
                    _ => (5, 9),
                })
            );
        }
        q.ack_to(3);
        assert_eq!(q.record_bounds(2), None);
        assert_eq!(q.record_bounds(3), Some((3, 5)));
        assert_eq!(q.slice(5, 4), Some(&[2u8; 4][..]));
        q.ack_to(5);
        assert_eq!(q.record_bounds(4), None);
        assert_eq!(q.record_bounds(6), Some((5, 9)));
        q.push(vec![9; 2]);
        assert_eq!(q.record_bounds(10), Some((9, 11)));
        assert_eq!(q.record_bounds(5), Some((5, 9)));
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
        let b = q.take_buffer();
        assert!(
            b.is_empty() && b.capacity() >= 2,
            "an acknowledged record's buffer"
        );
        assert_eq!(q.end(), 9);
        assert_eq!(q.plan(9, 10, 100).len, 0);
    }

    /// Acknowledged buffers are kept up to the spare limit of capacity, no further; the
    /// ones kept are handed out again.
    #[test]
    fn spare_buffers_stay_within_their_limit() {
        let mut q = SendQueue::new(10 * 1000, true);
        for n in 0..50u8 {
            let mut b = Vec::with_capacity(1000);
            b.extend_from_slice(&[n; 8]);
            q.push(b);
        }
        q.ack_to(50 * 8);
        assert_eq!(
            q.spare.len(),
            10,
            "ten buffers of 1000 fit a limit of 10,000"
        );
        assert!(q.spare_octets <= 10 * 1000);
        for _ in 0..10 {
            assert!(q.take_buffer().capacity() >= 1000, "a kept buffer");
        }
        assert_eq!(q.spare_octets, 0);
        assert_eq!(q.take_buffer().capacity(), 0, "none left");
        // With no room at all, nothing is kept.
        let mut q = SendQueue::new(0, true);
        q.push(vec![1; 8]);
        q.ack_to(8);
        assert!(q.spare.is_empty());
    }

    /// Without sums, no segment gets one (its checksum is computed over its octets).
    #[test]
    fn no_payload_sums_when_not_taken() {
        let mut q = SendQueue::new(1 << 20, false);
        q.push(vec![1; 8]);
        q.push(vec![2; 8]);
        assert_eq!(q.payload_sum(0, 16), None);
        let mut q = SendQueue::new(1 << 20, true);
        q.push(vec![1; 8]);
        q.push(vec![2; 8]);
        let all: Vec<u8> = [[1u8; 8], [2u8; 8]].concat();
        assert_eq!(q.payload_sum(0, 16), Some(wire::tcp::checksum::data(&all)));
    }

    #[test]
    fn a_record_a_port_still_holds_is_not_reused() {
        let mut q = SendQueue::new(1 << 20, true);
        q.push(vec![7; 100]);
        q.push(vec![8; 100]);
        // A port keeps a reference to the first record (a frame not yet sent by its
        // device).
        q.share(10, 50);
        let (held, at) = match q.payload(10, 50) {
            Payload::Shared { record, offset } => (record.clone(), offset),
            other => panic!("{other:?}"),
        };
        assert_eq!((at, held.len()), (10, 100));
        // The second record is shared too, and released before its acknowledgement.
        q.share(100, 100);
        assert!(matches!(q.payload(100, 100), Payload::Shared { .. }));
        q.share(90, 20);
        assert!(matches!(q.payload(90, 20), Payload::Split));
        let held_ptr = held.as_ptr();
        q.ack_to(200);
        assert_eq!(q.records(), 0);
        // Only the second record's buffer came back; the held one is not handed out.
        let mut b = q.take_buffer();
        assert_ne!(b.as_ptr(), held_ptr);
        b.extend_from_slice(&[9; 100]);
        q.push(b);
        assert!(q.take_buffer().capacity() == 0, "no spare buffer left");
        assert_eq!(*held, vec![7; 100], "the held record is untouched");
        // Once released, the next acknowledged record's buffer is reusable again.
        drop(held);
        q.ack_to(300);
        assert!(q.take_buffer().capacity() >= 100);
    }

    #[test]
    fn steady_shared_records_reuse_buffers_and_shells() {
        let mut q = SendQueue::new(1 << 20, true);
        let mut b = q.take_buffer();
        b.extend_from_slice(&[1; 64]);
        q.push(b);
        q.share(0, 64);
        assert!(matches!(q.payload(0, 64), Payload::Shared { .. }));
        q.ack_to(64);
        let (bufs, shells) = (q.spare.len(), q.shells.len());
        assert_eq!((bufs, shells), (1, 1));
        for n in 1..100u64 {
            let mut b = q.take_buffer();
            assert!(b.capacity() >= 64, "a reused buffer");
            b.extend_from_slice(&[n as u8; 64]);
            q.push(b);
            q.share(n * 64, 64);
            match q.payload(n * 64, 64) {
                Payload::Shared { record, offset } => {
                    assert_eq!(&record[offset..], &[n as u8; 64][..]);
                }
                other => panic!("{other:?}"),
            }
            assert!(q.shells.is_empty(), "the record went into the spare shell");
            q.ack_to((n + 1) * 64);
        }
        assert_eq!((q.spare.len(), q.shells.len()), (1, 1));
        // Without sharing, records stay owned and no shell is used.
        let mut b = q.take_buffer();
        b.extend_from_slice(&[5; 64]);
        q.push(b);
        assert!(matches!(q.payload(6400, 64), Payload::Plain(p) if p == [5; 64]));
        assert_eq!(q.shells.len(), 1);
    }
}
