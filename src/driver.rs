//! The consumer driver every app shares: one QP's endpoint on the verbs surface, with the
//! waits, retries, timeouts and error reporting a consumer needs, written once.
//!
//! An [`Endpoint`] either drives a core itself between its steps ([`Endpoint::with_core`]:
//! run to completion, like a DPDK lcore running its application; the embedded default,
//! the `iwarp bench` client, rping and perftest do this, owning the core or borrowing it)
//! or leaves the core to another thread ([`Endpoint::new`]: `iwarp serve` sessions, which
//! run on the core's thread in turn). Every wait ends after [`Endpoint::stall`] without
//! progress.
//!
//! Two ways to take completions: [`Endpoint::pump`] hands over each poll's completions at
//! once (bandwidth loops), [`Endpoint::wait_wr`] waits for the next completion of one kind
//! of work request and keeps receives of other kinds for later (request-response
//! protocols: rping, perftest's control connection).

use dataplane::clock::Instant;
use std::borrow::BorrowMut;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use control::verbs::{
    CmError, Completion, ConnId, Core, Cq, Device, Pd, PostError, QpInit, QpRingState, QueuePair,
    RecvWr, SendWr, WcOpcode, WcStatus,
};

/// Empty CQ polls a consumer without a core spins before it yields.
pub const IDLE_SPINS: u32 = 64;
/// Empty CQ polls after which a consumer without a core sleeps between polls.
pub const IDLE_SLEEPS_AFTER: u32 = 1024;
/// How long it sleeps then.
pub const IDLE_SLEEP: Duration = Duration::from_micros(20);

/// Longest any wait goes without progress, by default.
pub const DEFAULT_STALL: Duration = Duration::from_secs(10);

/// A failed completion for an error message: work request, opcode, status and the
/// Terminate's layer/type/code when there was one.
pub fn describe_completion(c: &Completion) -> String {
    format!(
        "work request {} ({:?}) completed with {:?}{}",
        c.wr_id,
        c.opcode,
        c.status,
        c.term
            .map(|t| format!(" (Terminate {:?})", t.triple()))
            .unwrap_or_default()
    )
}

/// Why a driver step failed.
#[derive(Debug)]
pub enum DriverError {
    /// The connection could not be set up (or closed).
    Connect(CmError),
    /// A work request completed in error.
    Completion(Completion),
    /// No progress for the stall time while doing this.
    Stalled(&'static str, Duration),
    /// The QP refused a work request (it is in error).
    Post(PostError),
    /// The connection closed: a work request was flushed, or the QP went to error with
    /// nothing left to complete.
    Closed,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Connect(e) => write!(f, "connection failed: {e}"),
            DriverError::Completion(c) => f.write_str(&describe_completion(c)),
            DriverError::Stalled(what, d) => {
                write!(f, "no progress for {} s while {what}", d.as_secs_f64())
            }
            DriverError::Post(e) => write!(f, "posting a work request: {e}"),
            DriverError::Closed => f.write_str("the connection closed"),
        }
    }
}

impl std::error::Error for DriverError {}

/// Closes `conn` and polls `core` until it is gone: both FINs acknowledged (or reset at
/// the device's linger time). A process that ends its connections this way before it
/// exits leaves no peer retransmitting a FIN.
pub fn close(dev: &Device, core: &mut Core, conn: ConnId) {
    let p = dev.disconnect(conn);
    let _ = p.poll_with(core, dev.limits().linger + Duration::from_secs(1));
}

/// One QP and its CQ, driven by a consumer (see the module docs). `C` is how it holds the
/// core it drives, if any: owned ([`Core`], the default) or borrowed (`&mut Core`).
#[derive(Debug)]
pub struct Endpoint<C = Core> {
    core: Option<C>,
    /// The protection domain of this endpoint (one per session: its regions are not
    /// reachable from another session's QP).
    pub pd: Pd,
    /// The completion queue of both work queues.
    pub cq: Cq,
    /// The QP.
    pub qp: QueuePair,
    /// Completions taken by the last [`Endpoint::pump`], all successful.
    pub done: Vec<Completion>,
    /// Longest a wait goes without progress.
    pub stall: Duration,
    /// Completions [`Endpoint::wait_wr`] took from the CQ and has not handed out yet.
    backlog: VecDeque<Completion>,
    /// Empty polls in a row, without a core ([`Endpoint::back_off`]).
    idle: u32,
    back_off: bool,
}

impl<C: BorrowMut<Core>> Endpoint<C> {
    /// An endpoint whose core runs elsewhere: `sq`/`rq` work requests deep, in a PD of its
    /// own.
    pub fn new(dev: &Device, sq: usize, rq: usize) -> Endpoint<C> {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq((sq + rq) * 2 + 64);
        let mut init = QpInit::new(&cq, &cq);
        init.max_send_wr = sq;
        init.max_recv_wr = rq;
        let qp = pd.create_qp(&init);
        Endpoint {
            core: None,
            pd,
            cq,
            qp,
            done: Vec::with_capacity(256),
            stall: DEFAULT_STALL,
            backlog: VecDeque::new(),
            idle: 0,
            back_off: false,
        }
    }

    /// An endpoint that polls `core` whenever it waits.
    pub fn with_core(dev: &Device, core: C, sq: usize, rq: usize) -> Endpoint<C> {
        let mut e = Endpoint::new(dev, sq, rq);
        e.core = Some(core);
        e
    }

    /// Gives the core back (the QP, CQ and PD go).
    pub fn into_core(self) -> Option<C> {
        self.core
    }

    /// The core this endpoint drives, if it does.
    pub fn core(&self) -> Option<&Core> {
        self.core.as_ref().map(|c| c.borrow())
    }

    /// The core this endpoint drives, if it does, to drive it meanwhile (a connection
    /// being set up, another QP's traffic).
    pub fn core_mut(&mut self) -> Option<&mut Core> {
        self.core.as_mut().map(|c| c.borrow_mut())
    }

    /// Makes an endpoint without a core back off when its CQ is empty (spin, yield, then
    /// short sleeps): for a consumer alone on its thread, whose waiting must leave the
    /// CPUs to the poll-mode cores. Not for one stepped in turn with others on a core's
    /// thread, where a sleep would stall the core.
    pub fn back_off_when_idle(&mut self) {
        self.back_off = true;
    }

    /// One poll of the core (when this endpoint drives one), else a yield; the CQ is left
    /// alone. Also for a consumer busy with something long, so that the connections of
    /// the core it drives keep being served.
    pub fn poll_core(&mut self) {
        match self.core.as_mut() {
            Some(c) => {
                c.borrow_mut().poll();
            }
            None => std::thread::yield_now(),
        }
    }

    /// With [`Endpoint::back_off_when_idle`] (a consumer on a thread of its own, its core
    /// polled elsewhere), a consumer that finds nothing in its CQ backs off, so that the
    /// poll-mode cores (on threads of their own) keep the CPUs: it spins
    /// [`IDLE_SPINS`] empty polls, then yields, then sleeps [`IDLE_SLEEP`] per empty poll
    /// once [`IDLE_SLEEPS_AFTER`] have gone by. Any completion resets it.
    fn back_off(&mut self, n: usize) {
        if !self.back_off || self.core.is_some() {
            return;
        }
        if n > 0 {
            self.idle = 0;
            return;
        }
        self.idle = self.idle.saturating_add(1);
        if self.idle > IDLE_SLEEPS_AFTER {
            std::thread::sleep(IDLE_SLEEP);
        } else if self.idle > IDLE_SPINS {
            std::thread::yield_now();
        }
    }

    /// Polls the core (when this endpoint drives one) and takes up to 256 completions into
    /// [`Endpoint::done`] (cleared first). A failed completion is an error. Returns how
    /// many completions came.
    pub fn pump(&mut self) -> Result<usize, DriverError> {
        if let Some(c) = self.core.as_mut() {
            c.borrow_mut().poll();
        }
        self.done.clear();
        let n = self.cq.poll(&mut self.done, 256);
        self.back_off(n);
        if let Some(c) = self.done.iter().find(|c| c.status != WcStatus::Success) {
            return Err(DriverError::Completion(*c));
        }
        Ok(n)
    }

    /// Like [`Endpoint::pump`], but takes failed completions too (flushed work requests
    /// after the connection closed, which a closing endpoint expects).
    pub fn pump_any(&mut self) -> usize {
        if let Some(c) = self.core.as_mut() {
            c.borrow_mut().poll();
        }
        self.done.clear();
        let n = self.cq.poll(&mut self.done, 256);
        self.back_off(n);
        n
    }

    /// Waits for a pending connection answer.
    pub fn wait<T>(
        &mut self,
        p: &control::verbs::Pending<T>,
        what: &'static str,
    ) -> Result<T, DriverError> {
        let end = Instant::now() + self.stall;
        loop {
            self.poll_core();
            if let Some(r) = p.try_get() {
                return r.map_err(DriverError::Connect);
            }
            if Instant::now() > end {
                return Err(DriverError::Stalled(what, self.stall));
            }
        }
    }

    /// Posts a send work request, polling the core (not the CQ) while the send queue is
    /// full.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), DriverError> {
        let end = Instant::now() + self.stall;
        loop {
            match self.qp.post_send(wr) {
                Ok(()) => return Ok(()),
                Err(PostError::QueueFull) => {
                    if let Some(c) = self.core.as_mut() {
                        c.borrow_mut().poll();
                    }
                    if Instant::now() > end {
                        return Err(DriverError::Stalled("posting a send", self.stall));
                    }
                }
                Err(e) => return Err(DriverError::Post(e)),
            }
        }
    }

    /// Posts `wrs` as post lists (one doorbell per call of the QP), polling the core (not
    /// the CQ) while the send queue is full.
    pub fn post_send_list(&mut self, mut wrs: &[SendWr]) -> Result<(), DriverError> {
        // The clock is read only once the queue is found full (a reading per post was a
        // tenth of an 8-octet send-bw's posting thread).
        let mut end: Option<Instant> = None;
        while !wrs.is_empty() {
            match self.qp.post_send_list(wrs) {
                Ok(n) => wrs = &wrs[n..],
                Err(PostError::QueueFull) => {
                    if let Some(c) = self.core.as_mut() {
                        c.borrow_mut().poll();
                    }
                    let now = Instant::now();
                    if now > *end.get_or_insert(now + self.stall) {
                        return Err(DriverError::Stalled("posting a send", self.stall));
                    }
                }
                Err(e) => return Err(DriverError::Post(e)),
            }
        }
        Ok(())
    }

    /// Posts a receive work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), DriverError> {
        self.qp.post_recv(wr).map_err(DriverError::Post)
    }

    /// Posts receive work requests with one doorbell; all of them, or an error
    /// ([`PostError::QueueFull`] when the receive queue took only some: the first of them
    /// were posted, so the list is not to be posted again whole).
    pub fn post_recv_list(&mut self, wrs: &[RecvWr]) -> Result<(), DriverError> {
        match self.qp.post_recv_list(wrs) {
            Ok(n) if n == wrs.len() => Ok(()),
            Ok(_) => Err(DriverError::Post(PostError::QueueFull)),
            Err(e) => Err(DriverError::Post(e)),
        }
    }

    /// Pumps until `f` finds what it waits for in the completions of a pump (or in state
    /// it checks itself); every completion is shown to `f` once.
    pub fn wait_for<R>(
        &mut self,
        what: &'static str,
        mut f: impl FnMut(&[Completion]) -> Option<R>,
    ) -> Result<R, DriverError> {
        let end = Instant::now() + self.stall;
        loop {
            self.pump()?;
            if let Some(r) = f(&self.done) {
                return Ok(r);
            }
            if Instant::now() > end {
                return Err(DriverError::Stalled(what, self.stall));
            }
        }
    }

    /// Closes the connection and waits until it is gone (both FINs acknowledged, or reset
    /// at the device's linger time), so that a process exiting next leaves no peer
    /// retransmitting its FIN.
    pub fn disconnect(&mut self, dev: &Device, conn: ConnId) {
        let p = dev.disconnect(conn);
        let end = Instant::now() + dev.limits().linger + Duration::from_secs(1);
        loop {
            self.poll_core();
            if p.try_get().is_some() || Instant::now() > end {
                return;
            }
        }
    }

    /// The first failed completion waiting in the backlog of [`Endpoint::wait_wr`], if
    /// any (for loops that drive another QP meanwhile).
    pub fn backlog_failure(&self) -> Option<Completion> {
        self.backlog
            .iter()
            .find(|c| c.status != WcStatus::Success)
            .copied()
    }

    /// Polls the core and moves what the CQ holds to the backlog of
    /// [`Endpoint::wait_wr`].
    pub fn pump_backlog(&mut self) {
        self.poll_core();
        while let Some(c) = self.cq.poll_one() {
            self.backlog.push_back(c);
        }
    }

    /// Waits for the next completion whose `wr_id & mask` is `kind`, pumping meanwhile.
    /// A failed completion ends the wait (a flushed one as [`DriverError::Closed`]), as
    /// does a QP in error with nothing left to complete. Successful completions of other
    /// kinds stay for a later wait when they are receives, and are dropped otherwise
    /// (signaled sends nobody waits for).
    pub fn wait_wr(
        &mut self,
        mask: u64,
        kind: u64,
        what: &'static str,
    ) -> Result<Completion, DriverError> {
        let end = Instant::now() + self.stall;
        loop {
            let mut i = 0;
            while i < self.backlog.len() {
                let c = self.backlog[i];
                if c.status == WcStatus::Flushed {
                    return Err(DriverError::Closed);
                }
                if c.status != WcStatus::Success {
                    return Err(DriverError::Completion(c));
                }
                if c.wr_id & mask == kind {
                    self.backlog.remove(i);
                    return Ok(c);
                }
                if c.opcode == WcOpcode::Recv {
                    i += 1;
                } else {
                    self.backlog.remove(i);
                }
            }
            if self.qp.state() == QpRingState::Error {
                // Flushes may still be on their way: one more round before giving up.
                self.pump_backlog();
                if self.backlog.is_empty() {
                    return Err(DriverError::Closed);
                }
                continue;
            }
            if Instant::now() > end {
                return Err(DriverError::Stalled(what, self.stall));
            }
            self.pump_backlog();
        }
    }
}
