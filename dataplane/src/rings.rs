//! The rings that join the three kinds of threads: consumers, the control thread and the
//! poll-mode core.
//!
//! * Consumer ↔ core, per QP: the send queue and receive queue ([`QpRings`]) and the
//!   completion queues ([`CqRing`]) are bounded rings in shared memory that move work
//!   requests and completions in bursts ([`BurstRing`]): the core takes every posted
//!   request and the consumer every completion with one uncontended lock and one index
//!   update, never a system call.
//! * Control thread ↔ core: [`CoreCmd`] and [`CoreEvent`] travel through bounded channels
//!   ([`Limits::control_queue`](crate::limits::Limits::control_queue)). They carry
//!   connection management and the streaming-mode octets of the MPA startup, and end with
//!   [`CoreCmd::Publish`], which hands an established QP to the core.
//! * Doorbells: a QP's consumer rings its core ([`QpRings::ring`]) after posting, so a
//!   core looks only at the QPs that have work, never at every QP on every poll.
//!
//! # The startup octets have one owner at a time
//!
//! Before FPDU mode the core hands received octets to the control thread one chunk at a
//! time ([`CoreEvent::Data`]) and hands out nothing more until the control thread answers:
//! [`CoreCmd::Read`] (the startup machine consumed the chunk and wants more),
//! [`CoreCmd::Publish`] (FPDU mode starts; the octets the machine did not consume come
//! back in [`QpPublish::rx_pending`], with their stream position), or [`CoreCmd::Close`].
//! So an octet is in TCP's receive buffer, or with the control thread, or back with the
//! core, never in two places; the core keeps no copy and replays nothing.

use std::net::SocketAddrV4;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam::queue::ArrayQueue;
use rtrb::{Consumer, Producer, PushError, RingBuffer};

use proto::qp::{Completion, QpConfig, RecvWr, SendWr};
use proto::tcp::FourTuple;
use wire::mpa::fpdu::FpduMode;
use wire::rdmap::Terminate;

/// Names one TCP connection of a device. The control thread picks the ids of the
/// connections it opens ([`CONN_ID_ACTIVE`] set); the core picks those it accepts. Bits
/// [`CONN_ID_CORE_SHIFT`].. hold the index of the core that owns the connection
/// ([`conn_core`]), so the control thread knows where to send its commands.
pub type ConnId = u64;

/// Bit set in the [`ConnId`]s of actively opened connections.
pub const CONN_ID_ACTIVE: ConnId = 1 << 63;

/// Where the owning core's index starts in a [`ConnId`] (8 bits: up to 256 cores).
pub const CONN_ID_CORE_SHIFT: u32 = 48;

/// The most cores one device has ([`ConnId`] holds the index in 8 bits).
pub const MAX_CORES: usize = 256;

/// The index of the core that owns connection `id`.
pub fn conn_core(id: ConnId) -> usize {
    ((id >> CONN_ID_CORE_SHIFT) & 0xff) as usize
}

/// The id of the `n`-th connection (counting from 1) of core `core`, `active` for an
/// active open.
pub fn conn_id(core: usize, n: u64, active: bool) -> ConnId {
    let id = ((core as u64 & 0xff) << CONN_ID_CORE_SHIFT) | (n & ((1 << CONN_ID_CORE_SHIFT) - 1));
    if active {
        id | CONN_ID_ACTIVE
    } else {
        id
    }
}

/// A bounded ring that moves elements in bursts: a single-producer single-consumer ring
/// (`rtrb`) whose producer side and consumer side each sit behind a lock of their own,
/// taken once per burst (std's mutex: uncontended it costs two atomic operations, and a
/// holder preempted while several threads post to one QP or poll one CQ makes the others
/// sleep, not spin). Where one thread produces and one consumes (a QP's work queues:
/// its consumer posts, its core takes; a CQ of one core's QPs) the locks are never
/// contended, and a burst of `n` elements costs one lock, one index update and `n`
/// copies, where a lock-free MPMC ring pays an atomic read-modify-write per element.
/// Several producers (or consumers) are still correct: they take turns.
///
/// A consumer finds an empty ring without taking its lock: the producers count what they
/// pushed (`pushed`, stored with Release under the producer's lock) and the consumers
/// what they took (`popped`, under the consumer's lock); equal counts mean empty. A core
/// looks at each of a QP's queues whenever the QP's doorbell rings, and a consumer polls
/// its CQ in a loop: most looks find nothing, and a look now costs two loads, not a
/// lock's two atomic read-modify-writes.
pub struct BurstRing<T> {
    producer: Mutex<Producer<T>>,
    consumer: Mutex<Consumer<T>>,
    /// Elements pushed since creation (written under the producer's lock).
    pushed: AtomicU64,
    /// Elements taken since creation (written under the consumer's lock).
    popped: AtomicU64,
    capacity: usize,
}

impl<T> std::fmt::Debug for BurstRing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurstRing")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// A poisoned lock's data is still consistent (the ring's indices are updated atomically
/// by `rtrb`): use it.
fn lock<U>(m: &Mutex<U>) -> std::sync::MutexGuard<'_, U> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T> BurstRing<T> {
    /// A ring with room for `capacity` elements (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let (producer, consumer) = RingBuffer::new(capacity);
        BurstRing {
            producer: Mutex::new(producer),
            consumer: Mutex::new(consumer),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
            capacity,
        }
    }

    /// Counts `n` elements pushed; the caller holds the producer's lock and has
    /// committed them.
    fn count_pushed(&self, n: usize) {
        if n > 0 {
            let was = self.pushed.load(Ordering::Relaxed);
            self.pushed.store(was + n as u64, Ordering::Release);
        }
    }

    /// Counts `n` elements taken; the caller holds the consumer's lock.
    fn count_popped(&self, n: usize) {
        if n > 0 {
            let was = self.popped.load(Ordering::Relaxed);
            self.popped.store(was + n as u64, Ordering::Relaxed);
        }
    }

    /// True when the producers' count says nothing waits, read without a lock. A push
    /// that has not been counted yet may be missed, as if it came a moment later; the
    /// Acquire load pairs with the count's Release store, so a push seen counted is in
    /// the ring for the consumer's lock to find.
    fn looks_empty(&self) -> bool {
        self.pushed.load(Ordering::Acquire) == self.popped.load(Ordering::Relaxed)
    }

    /// Adds one element; gives it back when the ring is full.
    pub fn push(&self, t: T) -> Result<(), T> {
        let mut p = lock(&self.producer);
        p.push(t).map_err(|PushError::Full(t)| t)?;
        self.count_pushed(1);
        Ok(())
    }

    /// Adds the elements of `items` in order as far as there is room, in one burst;
    /// returns how many were added (the rest of the iterator is not consumed).
    pub fn push_burst(&self, items: impl IntoIterator<Item = T>) -> usize {
        let mut p = lock(&self.producer);
        let room = p.slots();
        if room == 0 {
            return 0;
        }
        let n = match p.write_chunk_uninit(room) {
            Ok(chunk) => chunk.fill_from_iter(items),
            Err(_) => 0,
        };
        self.count_pushed(n);
        n
    }

    /// Takes the oldest element.
    pub fn pop(&self) -> Option<T> {
        if self.looks_empty() {
            return None;
        }
        let mut c = lock(&self.consumer);
        let t = c.pop().ok()?;
        self.count_popped(1);
        Some(t)
    }

    /// Takes up to `max` elements in one burst, handing each to `take` in order; stops
    /// early (leaving the rest in the ring) when `take` returns false for an element,
    /// which counts as taken. Returns how many were taken.
    pub fn pop_burst(&self, max: usize, mut take: impl FnMut(T) -> bool) -> usize {
        if self.looks_empty() {
            return 0;
        }
        let mut c = lock(&self.consumer);
        let n = c.slots().min(max);
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = c.read_chunk(n) else {
            return 0;
        };
        let mut taken = 0;
        // The iterator commits what it yielded when it is dropped.
        for t in chunk {
            taken += 1;
            if !take(t) {
                break;
            }
        }
        self.count_popped(taken);
        taken
    }

    /// Free room, in elements.
    pub fn room(&self) -> usize {
        lock(&self.producer).slots()
    }

    /// True when no more element fits.
    pub fn is_full(&self) -> bool {
        self.room() == 0
    }

    /// Elements waiting.
    pub fn len(&self) -> usize {
        self.capacity - self.room()
    }

    /// True when no element waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`BurstRing::is_empty`] as the consumer sees it: from the counts, without a lock,
    /// when they say empty; else through the consumer's lock. Either way a consumer
    /// polling its ring never waits on a producer in the middle of a burst.
    pub fn is_empty_to_consumer(&self) -> bool {
        self.looks_empty() || lock(&self.consumer).is_empty()
    }

    /// Room when empty, in elements.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A completion queue: filled by the core, drained by the consumer, in bursts.
pub type CqRing = BurstRing<Completion>;

/// Where a QP is, as its consumer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpRingState {
    /// Created, not connected yet: work requests wait in the rings.
    Init = 0,
    /// Connected and published to a core: work requests flow.
    Rts = 1,
    /// Failed or closed: every work request completes with an error.
    Error = 2,
}

/// A core's doorbell ring: the tokens of the QPs that have new work requests.
pub type Doorbells = ArrayQueue<u64>;

/// The work queues of one QP, shared by its consumer and its core.
#[derive(Debug)]
pub struct QpRings {
    /// QP number.
    pub qpn: u32,
    /// Send queue (consumer → core).
    pub sq: BurstRing<SendWr>,
    /// Receive queue (consumer → core).
    pub rq: BurstRing<RecvWr>,
    /// Where send-side completions go.
    pub send_cq: Arc<CqRing>,
    /// Where receive completions go.
    pub recv_cq: Arc<CqRing>,
    state: AtomicU8,
    /// The core's doorbell ring and this QP's token there, once published.
    bell: OnceLock<(Arc<Doorbells>, u64)>,
    /// A token of this QP is in the doorbell ring and not yet taken.
    rung: AtomicBool,
    /// The Terminates sent and received, set once when the QP leaves RTS (boxed: most QPs
    /// never have any, and an idle QP's rings stay small).
    terminates: OnceLock<Box<Terminates>>,
}

/// The Terminate messages of a QP that left RTS (RFC 5040 section 6.1): either may be
/// absent (a QP that failed on its own side, or whose connection broke without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terminates {
    /// The Terminate we sent.
    pub sent: Option<Terminate>,
    /// The Terminate the peer sent.
    pub received: Option<Terminate>,
}

impl QpRings {
    /// Rings with room for `max_send_wr` and `max_recv_wr` work requests.
    pub fn new(
        qpn: u32,
        max_send_wr: usize,
        max_recv_wr: usize,
        send_cq: Arc<CqRing>,
        recv_cq: Arc<CqRing>,
    ) -> Self {
        QpRings {
            qpn,
            sq: BurstRing::new(max_send_wr),
            rq: BurstRing::new(max_recv_wr),
            send_cq,
            recv_cq,
            state: AtomicU8::new(QpRingState::Init as u8),
            terminates: OnceLock::new(),
            bell: OnceLock::new(),
            rung: AtomicBool::new(false),
        }
    }

    /// Posts a send work request and rings the core; gives it back when the queue is full.
    pub fn post_send(&self, wr: SendWr) -> Result<(), SendWr> {
        self.sq.push(wr)?;
        self.ring();
        Ok(())
    }

    /// Posts the work requests of `wrs` in order, as far as the queue takes them, and
    /// rings the core once (a post list: one doorbell for many requests). Returns how
    /// many were queued.
    pub fn post_send_list(&self, wrs: &[SendWr]) -> usize {
        self.post_burst(&self.sq, wrs)
    }

    /// Posts receive work requests in order with one doorbell, as far as the receive queue
    /// takes them; returns how many were posted.
    pub fn post_recv_list(&self, wrs: &[RecvWr]) -> usize {
        self.post_burst(&self.rq, wrs)
    }

    /// Pushes `wrs` to `queue` in one burst, as far as it takes them, and rings the core
    /// once if any went in.
    fn post_burst<T: Copy>(&self, queue: &BurstRing<T>, wrs: &[T]) -> usize {
        let n = queue.push_burst(wrs.iter().copied());
        if n > 0 {
            self.ring();
        }
        n
    }

    /// Posts a receive work request and rings the core; gives it back when the queue is
    /// full.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), RecvWr> {
        self.rq.push(wr)?;
        self.ring();
        Ok(())
    }

    /// Tells the core this QP has work (after pushing to `sq` or `rq` directly). Before
    /// the QP is published there is no core to tell: publication takes what is queued.
    ///
    /// The doorbell protocol: `rung` says a token of this QP waits in the core's ring.
    /// A post swaps it to true and pushes a token only if it was false; the core, before
    /// it drains the queues, swaps it back to false ([`QpRings::rearm_doorbell`]). Both
    /// are read-modify-writes of the one flag, so they are totally ordered: either the
    /// post's swap comes after the core's (it reads false and rings), or before, and then
    /// the core's swap reads the true that the post's wrote (or a later one's) and, by
    /// their release and acquire, the drain that follows sees the push. No fence is
    /// needed once the QP is published; the first posts race the core's attach (a
    /// store-load pattern between `bell` and the queues) and take a full fence, as the
    /// attach does.
    pub fn ring(&self) {
        let (bells, token) = match self.bell.get() {
            Some(b) => b,
            None => {
                fence(Ordering::SeqCst);
                match self.bell.get() {
                    Some(b) => b,
                    None => return,
                }
            }
        };
        if !self.rung.swap(true, Ordering::AcqRel) && bells.push(*token).is_err() {
            // Cannot happen: the core rearms a QP only when it takes its token and at
            // publication, so at most two of its tokens wait, and the ring holds two per
            // connection. Stay ringable, by a read-modify-write as the rearm is.
            self.rung.swap(false, Ordering::AcqRel);
        }
    }

    /// The core publishes the QP: from now on posts ring `bells` with `token`.
    pub fn attach_doorbell(&self, bells: Arc<Doorbells>, token: u64) {
        let _ = self.bell.set((bells, token));
        fence(Ordering::SeqCst);
    }

    /// The core took this QP's token (or publishes the QP): posts from now on ring again.
    /// Call before draining the queues (see [`QpRings::ring`]); a drain without a token
    /// needs no rearm (a post that found the flag set left a token for a later drain).
    pub fn rearm_doorbell(&self) {
        self.rung.swap(false, Ordering::AcqRel);
    }

    /// The state the core last published.
    pub fn state(&self) -> QpRingState {
        match self.state.load(Ordering::Acquire) {
            0 => QpRingState::Init,
            1 => QpRingState::Rts,
            _ => QpRingState::Error,
        }
    }

    /// Publishes a new state.
    pub fn set_state(&self, s: QpRingState) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// Publishes [`QpRingState::Error`] with the Terminates that went with it (the core
    /// does this once, when the QP leaves RTS).
    pub fn set_error(&self, t: Terminates) {
        let _ = self.terminates.set(Box::new(t));
        self.set_state(QpRingState::Error);
    }

    /// The Terminates of a QP in error (`None` while it is not).
    pub fn terminates(&self) -> Option<Terminates> {
        self.terminates.get().map(|t| **t)
    }
}

/// Everything the core needs to run an established QP: published by the control thread.
#[derive(Debug)]
pub struct QpPublish {
    /// FPDU mode of what we send.
    pub tx_mode: FpduMode,
    /// Transmit stream position from the transmit marker origin.
    pub tx_offset: u64,
    /// FPDU mode of what we receive.
    pub rx_mode: FpduMode,
    /// Receive stream position, from the receive marker origin, of the octet at
    /// `rx_stream_pos`.
    pub rx_offset: u64,
    /// TCP receive stream offset (0 = first octet after the SYN) where FPDU mode begins:
    /// the first octet the startup machine did not consume.
    pub rx_stream_pos: u64,
    /// The octets from `rx_stream_pos` on that the control thread holds (received in
    /// FPDU mode, not consumed by the startup machine): the core deframes them first.
    /// `rx_stream_pos + rx_pending.len()` is every octet the core handed out.
    pub rx_pending: Vec<u8>,
    /// The QP's parameters (negotiated IRD/ORD, next MSNs).
    pub config: QpConfig,
    /// The consumer's rings.
    pub rings: Arc<QpRings>,
}

/// A command from the control thread to a core.
#[derive(Debug)]
pub enum CoreCmd {
    /// Accept TCP connections on this local port.
    Listen {
        /// TCP port.
        port: u16,
    },
    /// Stop accepting on this port.
    Unlisten {
        /// TCP port.
        port: u16,
    },
    /// Open a TCP connection (active open) from an ephemeral port.
    Connect {
        /// The id to report it under (has [`CONN_ID_ACTIVE`]).
        conn: ConnId,
        /// Where to.
        remote: SocketAddrV4,
    },
    /// The startup machine consumed the last [`CoreEvent::Data`] and wants more octets.
    Read {
        /// Connection.
        conn: ConnId,
    },
    /// Write these octets (one record: an MPA startup frame or an FPDU the startup
    /// machine built) to the connection in streaming mode.
    Send {
        /// Connection.
        conn: ConnId,
        /// Octets.
        bytes: Vec<u8>,
    },
    /// The MPA startup completed: run the QP in FPDU mode from now on.
    Publish {
        /// Connection.
        conn: ConnId,
        /// The QP.
        qp: Box<QpPublish>,
    },
    /// Close the connection: gracefully (FIN after queued data) or by RST.
    Close {
        /// Connection.
        conn: ConnId,
        /// Send RST instead of FIN.
        abort: bool,
    },
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The peer closed (FIN), after which we closed too.
    PeerClosed,
    /// Reset by the peer.
    Reset,
    /// Retransmissions or the connect attempt timed out.
    TimedOut,
    /// We closed it (control thread request, Terminate, error).
    Local,
    /// The connect attempt failed (no route, no port).
    Unreachable,
    /// The MPA startup did not reach FPDU mode within
    /// [`Limits::startup_timeout`](crate::limits::Limits::startup_timeout): reset.
    StartupTimeout,
    /// The peer sent more octets before FPDU mode than MPA allows
    /// ([`Limits::startup_octets`](crate::limits::Limits::startup_octets)): reset.
    StartupOverflow,
    /// A graceful close did not complete within
    /// [`Limits::linger`](crate::limits::Limits::linger): reset.
    LingerExpired,
    /// No room for the connection (the core holds
    /// [`Limits::max_connections`](crate::limits::Limits::max_connections), or its
    /// control channel is full): refused.
    Refused,
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CloseReason::PeerClosed => "closed by the peer",
            CloseReason::Reset => "reset by the peer",
            CloseReason::TimedOut => {
                "timed out (retransmissions, or no progress for the user timeout)"
            }
            CloseReason::Local => "closed locally",
            CloseReason::Unreachable => "peer unreachable",
            CloseReason::StartupTimeout => "MPA startup took longer than the startup timeout",
            CloseReason::StartupOverflow => "the peer sent more before FPDU mode than MPA allows",
            CloseReason::LingerExpired => "graceful close took longer than the linger time: reset",
            CloseReason::Refused => "refused: connection limit reached or control plane busy",
        })
    }
}

/// An event from a core to the control thread.
#[derive(Debug)]
pub enum CoreEvent {
    /// An active open completed its handshake.
    Connected {
        /// Connection.
        conn: ConnId,
        /// Its 4-tuple.
        tuple: FourTuple,
    },
    /// A passive open completed its handshake on a listening port.
    Accepted {
        /// Connection (chosen by the core).
        conn: ConnId,
        /// Its 4-tuple.
        tuple: FourTuple,
    },
    /// Octets received in streaming mode (before [`CoreCmd::Publish`]), in order. The
    /// core sends no more until it gets [`CoreCmd::Read`] (see the module docs).
    Data {
        /// Connection.
        conn: ConnId,
        /// Octets.
        bytes: Vec<u8>,
    },
    /// The peer's FIN arrived in streaming mode (after every octet before it went out in
    /// [`CoreEvent::Data`]).
    PeerFin {
        /// Connection.
        conn: ConnId,
    },
    /// The connection is gone.
    Closed {
        /// Connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_ring_keeps_order_and_exact_capacity() {
        let r: BurstRing<u32> = BurstRing::new(5);
        assert_eq!((r.capacity(), r.room(), r.len()), (5, 5, 0));
        assert!(r.is_empty());
        assert_eq!(r.push_burst(0..3), 3);
        assert_eq!(r.push(3), Ok(()));
        // One slot left: a burst takes what fits and leaves the rest of the iterator.
        let mut it = 4..10;
        assert_eq!(r.push_burst(&mut it), 1);
        assert_eq!(it.next(), Some(5));
        assert!(r.is_full());
        assert_eq!(r.push(99), Err(99));
        assert_eq!(r.push_burst(0..1), 0);
        assert_eq!(r.pop(), Some(0));
        // A burst that stops early: the element refused counts as taken, the rest stay.
        let mut got = Vec::new();
        assert_eq!(
            r.pop_burst(10, |x| {
                got.push(x);
                x < 2
            }),
            2
        );
        assert_eq!(got, [1, 2]);
        assert_eq!(r.len(), 2);
        got.clear();
        assert_eq!(
            r.pop_burst(1, |x| {
                got.push(x);
                true
            }),
            1
        );
        assert_eq!(
            r.pop_burst(10, |x| {
                got.push(x);
                true
            }),
            1
        );
        assert_eq!(got, [3, 4]);
        assert_eq!(r.pop(), None);
        assert_eq!(r.pop_burst(10, |_| true), 0);
        // The counts that tell an empty ring without a lock follow pushes and takes,
        // the refused element of a stopped burst included.
        assert!(r.looks_empty() && r.is_empty_to_consumer());
        assert_eq!(r.push(7), Ok(()));
        assert!(!r.looks_empty() && !r.is_empty_to_consumer());
        assert_eq!(r.pop_burst(10, |_| false), 1);
        assert!(r.looks_empty() && r.is_empty_to_consumer());
        assert_eq!(r.pop(), None);
        // Every push and take counted, after bursts of every kind above.
        let (pushed, popped) = (
            r.pushed.load(Ordering::Relaxed),
            r.popped.load(Ordering::Relaxed),
        );
        assert_eq!((pushed, popped), (6, 6));
        assert_eq!(BurstRing::<u8>::new(0).capacity(), 1);
    }

    /// Two threads, bursts of every size on both sides: every element arrives once, in
    /// order.
    #[test]
    fn burst_ring_between_threads_loses_and_reorders_nothing() {
        const N: u64 = 200_000;
        let r = Arc::new(BurstRing::<u64>::new(64));
        let producer = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut next = 0u64;
                let mut burst = 1u64;
                while next < N {
                    let end = (next + burst).min(N);
                    let k = r.push_burst(next..end) as u64;
                    next += k;
                    if k == 0 {
                        std::thread::yield_now();
                    }
                    burst = burst % 37 + 1;
                }
            })
        };
        let mut want = 0u64;
        let mut max = 1;
        while want < N {
            let k = r.pop_burst(max, |x| {
                assert_eq!(x, want);
                want += 1;
                true
            });
            if k == 0 {
                std::thread::yield_now();
            }
            max = max % 23 + 1;
        }
        producer.join().unwrap();
        assert!(r.is_empty());
    }

    /// The doorbell loses no wakeup: a consumer posts as fast as the receive queue takes
    /// requests (two at most), and the core drains only after taking a token (or at
    /// attach), so that posts keep landing while the core rearms and drains. The QP is
    /// attached while the posts are already going, so the first posts race the attach
    /// too. A post whose ring were lost would leave its request untaken with no token
    /// to fetch it (and the queue full), and the test would stop making progress (both
    /// threads yield while they wait, so a machine with fewer cores than threads still
    /// runs them; the test fails after 10 s without progress). (On x86 the
    /// locked instructions of the queues' own locks order much of this anyway: the test
    /// catches a rearm or a ring that is missing, not a weaker ordering.)
    #[test]
    fn no_post_waits_for_a_doorbell_that_never_rings() {
        const N: u64 = 300_000;
        let cq = Arc::new(CqRing::new(4));
        let rings = Arc::new(QpRings::new(1, 4, 2, cq.clone(), cq));
        let bells = Arc::new(Doorbells::new(4));
        const STALL: std::time::Duration = std::time::Duration::from_secs(10);
        let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let core = {
            let (rings, bells, progress) = (rings.clone(), bells.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut taken = 0u64;
                let mut drain = |rings: &QpRings| {
                    rings.rearm_doorbell();
                    rings.rq.pop_burst(usize::MAX, |wr| {
                        assert_eq!(wr.wr_id, taken);
                        taken += 1;
                        true
                    });
                    taken
                };
                // Publication: attach, rearm and take what was queued before it.
                rings.attach_doorbell(bells.clone(), 7);
                let mut done = drain(&rings);
                let mut since = std::time::Instant::now();
                while done < N {
                    if let Some(t) = bells.pop() {
                        assert_eq!(t, 7);
                        done = drain(&rings);
                        progress.store(done, Ordering::Relaxed);
                        since = std::time::Instant::now();
                    } else {
                        std::thread::yield_now();
                    }
                    assert!(
                        since.elapsed() < STALL,
                        "{done} of {N} requests taken, no token for the rest: a doorbell \
                         was lost"
                    );
                }
            })
        };
        let mut i = 0;
        let mut since = std::time::Instant::now();
        while i < N {
            let wr = RecvWr {
                wr_id: i,
                local: proto::qp::Sge {
                    stag: 0x100,
                    to: 0,
                    len: 8,
                },
            };
            if rings.post_recv_list(&[wr]) == 1 {
                i += 1;
                since = std::time::Instant::now();
            } else {
                assert!(
                    since.elapsed() < STALL,
                    "the queue stayed full at request {i} ({} taken): a doorbell was lost",
                    progress.load(Ordering::Relaxed)
                );
                std::thread::yield_now();
            }
        }
        core.join().unwrap();
    }

    #[test]
    fn a_receive_post_list_rings_the_core_and_stops_at_a_full_queue() {
        let cq = Arc::new(CqRing::new(4));
        let rings = QpRings::new(1, 4, 3, cq.clone(), cq);
        let bells = Arc::new(Doorbells::new(4));
        rings.attach_doorbell(bells.clone(), 7);
        let wrs: Vec<RecvWr> = (0..5)
            .map(|i| RecvWr {
                wr_id: i,
                local: proto::qp::Sge {
                    stag: 0x100,
                    to: i * 8,
                    len: 8,
                },
            })
            .collect();
        assert_eq!(rings.post_recv_list(&wrs), 3);
        assert_eq!((bells.pop(), bells.pop()), (Some(7), None));
        let mut got = Vec::new();
        rings.rq.pop_burst(8, |wr| {
            got.push(wr.wr_id);
            true
        });
        assert_eq!(got, [0, 1, 2]);
        // Nothing taken, nothing rung.
        rings.rearm_doorbell();
        assert_eq!(rings.post_recv_list(&[]), 0);
        assert_eq!(bells.pop(), None);
    }
}
