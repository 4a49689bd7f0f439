//! The `iwarp bench` server: many sessions at once, each a state machine stepped in turn
//! on the thread that runs the core (run to completion, as a DPDK lcore does; nothing
//! blocks, no thread per client).
//!
//! A connection request is checked before it is accepted: its private data must be a
//! [`Hello`], the memory its test needs ([`session_memory`]) must fit both the
//! per-session budget and what is left of the server's ([`Budget`]), and there must be
//! room for another session. Otherwise it gets an MPA Reject whose private data says why
//! (the client prints it). Each session has its own protection domain, so no session's
//! QP can reach another's memory, and its memory is given back when it ends.

use dataplane::clock::Instant;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::time::Duration;

use control::verbs::{
    AcceptParams, Access, ConnId, ConnInfo, ConnRequest, Core, Device, Listener, Mr, Pending,
    QpRingState, RecvWr, SendOp, SendWr, Sge, WcOpcode,
};

use super::session::{self, Hello, RemoteBuffer, ServerResult, RESULT_LEN};
use super::verify;
use super::{BenchError, Length, Test, STALL};
use crate::driver::Endpoint;

/// Memory limits of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Most octets one session may register.
    pub session: u64,
    /// Most octets all sessions together may register.
    pub total: u64,
    /// Most sessions running at once (connections still starting are not counted: they
    /// hold their memory, and end within the startup limits).
    pub sessions: usize,
    /// Most sessions still starting from one client address: one host that opens
    /// sessions and never finishes their startup cannot crowd out the others.
    pub pending_per_peer: usize,
}

impl Budget {
    /// The `iwarp serve` budget of a deployment file's `[limits]`.
    pub fn from_limits(l: &appconfig::Limits) -> Budget {
        Budget {
            session: u64::from(l.session_memory_mib) << 20,
            total: u64::from(l.serve_memory_mib) << 20,
            sessions: l.max_sessions as usize,
            pending_per_peer: l.pending_sessions_per_peer as usize,
        }
    }
}

impl Default for Budget {
    /// 256 MiB per session, 1 GiB in all, 64 sessions, 16 starting per client address
    /// (the `[limits]` defaults).
    fn default() -> Self {
        Budget {
            session: 256 << 20,
            total: 1 << 30,
            sessions: 64,
            pending_per_peer: 16,
        }
    }
}

/// Control receives a server session keeps posted (tests without data Sends).
const CTL_RECVS: u64 = 16;
const CTL_SLOT: u64 = 64;
const WR_CTL: u64 = 1 << 62;
const WR_RESULT: u64 = 1 << 61;
/// Credit grants in flight (each from its own 8-octet slot: a Send's payload is read
/// when the core frames it, after later grants may have been written).
const GRANT_SLOTS: u64 = 64;
/// Octets `--verify` reads or builds at a time ([`Session::data_mismatches`],
/// [`Session::fill_source`]): a session's scratch buffer is never longer.
const VERIFY_CHUNK: usize = 64 << 10;

/// The largest message of a session.
fn max_size(h: &Hello) -> usize {
    h.sizes.iter().copied().max().unwrap_or(1).max(1)
}

/// The receives a send-bw server keeps posted without `--verify`, as perftest's
/// `ib_send_bw` does (its `DEF_RX_SEND`), when the tx depth is smaller.
pub const SEND_RX_DEPTH: usize = 512;

/// The receives a send test keeps posted: one per credit the client has (each a Send it
/// may have in flight to us), and one more for the zero-length control Sends (the first
/// message, each size's *done*). The client sends *done* once its data Sends have
/// completed, which can be before this server has taken their receives and posted them
/// again: without the spare, *done* could find no receive (RFC 5040 7.2: a TERM, "no
/// buffer").
///
/// The credits: the tx depth with `--verify` (a slot of the data region per receive, which
/// the budget counts) and for send-lat, else at least [`SEND_RX_DEPTH`] (all receives
/// share one slot). More
/// credits than Sends in flight keep the client posting while grants are on their way
/// back: with the tx depth alone, 8-octet send-bw spent most client rounds waiting for
/// credit.
fn send_recvs(h: &Hello) -> usize {
    send_credits(h) + 1
}

/// The credits of a send test's client: a receive posted for each (see [`send_recvs`]).
fn send_credits(h: &Hello) -> usize {
    if h.verify || h.test != Test::SendBw {
        h.tx_depth
    } else {
        h.tx_depth.max(SEND_RX_DEPTH)
    }
}

/// The receive queue of a session's QP: its receives (a send test's, or the control
/// receives) and room to spare.
fn session_rq(h: &Hello) -> usize {
    let recvs = if h.test.is_send() {
        send_recvs(h)
    } else {
        h.tx_depth
    };
    recvs + CTL_RECVS as usize + 16
}

/// The octets of a session's data region: a slot per message in flight for write-bw, and
/// per posted receive for send-bw, with `--verify`; the moving-offset region of the read
/// tests with `--verify`; else one message.
fn data_len(h: &Hello) -> usize {
    let max = max_size(h);
    match h.test {
        Test::WriteBw if h.verify => h.tx_depth * max,
        Test::SendBw if h.verify => send_recvs(h) * max,
        Test::ReadBw | Test::ReadLat if h.verify => {
            verify::region_slots(h.test.is_latency(), h.tx_depth) * max + verify::READ_SLACK
        }
        _ => max,
    }
}

/// The octets of a session's source region: the answers of the ping-pong tests, else the
/// result message.
fn source_len(h: &Hello) -> usize {
    match h.test {
        Test::WriteLat | Test::SendLat => max_size(h).max(RESULT_LEN),
        _ => RESULT_LEN,
    }
}

/// The octets a session for `h` registers on the server: what [`Server`] budgets.
pub fn session_memory(h: &Hello) -> u64 {
    let depth = h.tx_depth as u64;
    let data = data_len(h) as u64;
    let src = source_len(h) as u64;
    // The session's work queues and CQ (the rings are allocated whole).
    let (sq, rq) = (depth.max(64) + 16, session_rq(h) as u64);
    let rings = sq * std::mem::size_of::<control::verbs::SendWr>() as u64
        + rq * std::mem::size_of::<RecvWr>() as u64
        + ((sq + rq) * 2 + 64) * std::mem::size_of::<control::verbs::Completion>() as u64;
    data + src + CTL_RECVS * CTL_SLOT + GRANT_SLOTS * 8 + rings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// send-bw's *done* must always find a receive: it follows the client's last data
    /// Sends at once, before this server may have reposted their receives. Without the
    /// spare receive, 5 to 20 in 150 runs of this shape from the command line ended in a
    /// TERM ("no buffer"); in this loop the race is rarer (timing), so the loop is long.
    #[test]
    fn send_bw_done_always_finds_a_receive() {
        for run in 0..100 {
            let o = crate::bench::BenchOptions {
                test: Test::SendBw,
                sizes: vec![512],
                length: crate::bench::Length::Iterations(64),
                tx_depth: 8,
                verify: run % 2 == 0,
                progress: false,
                ..crate::bench::BenchOptions::default()
            };
            if let Err(e) = crate::bench::run_embedded(&o) {
                panic!("run {run}: {e}");
            }
        }
    }

    /// Without `--verify` a send-bw server keeps perftest's 512 receives posted (at least
    /// the tx depth and a spare) and grants the client a credit for each beyond its tx
    /// depth before the first size: the client runs that far ahead of the reposts, and
    /// every Send still finds a receive (one that did not would end the run in a TERM).
    #[test]
    fn send_bw_credits_beyond_the_tx_depth_each_have_a_receive() {
        let hello = |tx_depth, verify| Hello {
            test: Test::SendBw,
            sizes: vec![8],
            length: crate::bench::Length::Iterations(1),
            tx_depth,
            verify,
            client_sink: None,
        };
        assert_eq!(send_recvs(&hello(8, false)), SEND_RX_DEPTH + 1);
        assert_eq!(send_recvs(&hello(1000, false)), 1001);
        assert_eq!(send_recvs(&hello(8, true)), 9);
        assert!(session_rq(&hello(8, false)) > SEND_RX_DEPTH + CTL_RECVS as usize);
        for run in 0..4 {
            let o = crate::bench::BenchOptions {
                test: Test::SendBw,
                sizes: vec![8, 64],
                length: crate::bench::Length::Iterations(20_000),
                tx_depth: 4,
                progress: false,
                ..crate::bench::BenchOptions::default()
            };
            let out = crate::bench::run_embedded(&o).unwrap_or_else(|e| panic!("run {run}: {e}"));
            assert_eq!(out.report.samples.len(), 2);
        }
    }

    #[test]
    fn the_budget_comes_from_the_file_and_its_defaults_are_budget_defaults() {
        assert_eq!(
            Budget::from_limits(&appconfig::Limits::default()),
            Budget::default()
        );
        let l = appconfig::Limits {
            session_memory_mib: 3,
            serve_memory_mib: 5,
            max_sessions: 7,
            pending_sessions_per_peer: 11,
            ..appconfig::Limits::default()
        };
        assert_eq!(
            Budget::from_limits(&l),
            Budget {
                session: 3 << 20,
                total: 5 << 20,
                sessions: 7,
                pending_per_peer: 11,
            }
        );
    }
}

/// What one served session was.
#[derive(Debug)]
pub struct SessionOutcome {
    /// The client.
    pub peer: SocketAddrV4,
    /// What it asked for.
    pub hello: Hello,
    /// What this server checked, or why the session failed.
    pub result: Result<ServerResult, BenchError>,
}

/// What a connection request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Accepted as a session.
    Accepted,
    /// Rejected (MPA Reject) with this reason in the private data.
    Rejected(String),
}

/// A server: its listeners, its sessions and their budget.
pub struct Server {
    /// Each listener with the device it listens on.
    listeners: Vec<(Device, Listener)>,
    budget: Budget,
    used: u64,
    sessions: Vec<Session>,
    finished: VecDeque<SessionOutcome>,
    admissions: u64,
    rejections: u64,
    /// The last few rejection reasons (for tests and the log).
    pub last_rejections: VecDeque<(SocketAddrV4, String)>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("sessions", &self.sessions.len())
            .field("used", &self.used)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server on `dev`'s `listeners` with `budget`.
    pub fn new(dev: Device, listeners: Vec<Listener>, budget: Budget) -> Server {
        Self::on_devices(
            listeners.into_iter().map(|l| (dev.clone(), l)).collect(),
            budget,
        )
    }

    /// A server on several devices (the ports of a deployment): each listener with its
    /// device, one `budget` for all.
    pub fn on_devices(listeners: Vec<(Device, Listener)>, budget: Budget) -> Server {
        Server {
            listeners,
            budget,
            used: 0,
            sessions: Vec::new(),
            finished: VecDeque::new(),
            admissions: 0,
            rejections: 0,
            last_rejections: VecDeque::new(),
        }
    }

    /// Sessions now (starting or running).
    pub fn active(&self) -> usize {
        self.sessions.len()
    }

    /// Sessions past their startup.
    pub fn running(&self) -> usize {
        self.sessions
            .iter()
            .filter(|s| !matches!(s.phase, Phase::Accepting(_)))
            .count()
    }

    fn pending_from(&self, addr: smoltcp::wire::Ipv4Address) -> usize {
        self.sessions
            .iter()
            .filter(|s| matches!(s.phase, Phase::Accepting(_)) && *s.peer.ip() == addr)
            .count()
    }

    /// Octets registered by the running sessions.
    pub fn memory_in_use(&self) -> u64 {
        self.used
    }

    /// Requests accepted and rejected so far.
    pub fn admissions(&self) -> (u64, u64) {
        (self.admissions, self.rejections)
    }

    /// The next finished session, if one finished.
    pub fn take_finished(&mut self) -> Option<SessionOutcome> {
        self.finished.pop_front()
    }

    /// One turn: takes waiting connection requests (accepting or rejecting each), then
    /// steps every session once. Never blocks. Returns a measure of the work done.
    pub fn step(&mut self) -> usize {
        let mut work = 0;
        for li in 0..self.listeners.len() {
            while let Some(req) = self.listeners[li].1.try_next() {
                work += 1;
                self.admit(li, req);
            }
        }
        let mut i = 0;
        while i < self.sessions.len() {
            let s = &mut self.sessions[i];
            // The device by reference: a clone of its Arc per session and step was a
            // locked add and subtract each time.
            let dev = &self.listeners[s.listener].0;
            match s.step(dev) {
                Ok(Turn::Busy) => {
                    work += 1;
                    i += 1;
                }
                Ok(Turn::Idle) => i += 1,
                Ok(Turn::Done) | Err(_) => {
                    let s = self.sessions.swap_remove(i);
                    work += 1;
                    self.used = self.used.saturating_sub(s.memory);
                    let result = match s.failed {
                        Some(e) => Err(e),
                        None => Ok(s.result),
                    };
                    self.finished.push_back(SessionOutcome {
                        peer: s.peer,
                        hello: s.hello,
                        result,
                    });
                }
            }
        }
        work
    }

    fn reject(&mut self, li: usize, req: &ConnRequest, why: String) {
        self.rejections += 1;
        let peer = SocketAddrV4::new(req.tuple.remote_addr, req.tuple.remote_port);
        if self.last_rejections.len() >= 16 {
            self.last_rejections.pop_front();
        }
        self.last_rejections.push_back((peer, why.clone()));
        let mut pd = why.into_bytes();
        pd.truncate(session::MAX_REJECT_REASON);
        self.listeners[li].1.reject(req, pd);
    }

    fn admit(&mut self, li: usize, req: ConnRequest) -> Admission {
        let hello = match Hello::decode(&req.request.request.private_data) {
            Ok(h) => h,
            Err(e) => {
                let why = e.to_string();
                self.reject(li, &req, why.clone());
                return Admission::Rejected(why);
            }
        };
        let need = session_memory(&hello);
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let why = if need > self.budget.session {
            Some(format!(
                "{} needs {:.1} MiB on the server; a session may have {:.1} MiB (lower -s or -t)",
                hello.test.name(),
                mib(need),
                mib(self.budget.session)
            ))
        } else if self.used + need > self.budget.total {
            Some(format!(
                "server memory busy: {} needs {:.1} MiB and {:.1} of {:.1} MiB are free; try later",
                hello.test.name(),
                mib(need),
                mib(self.budget.total - self.used),
                mib(self.budget.total)
            ))
        } else if self.running() >= self.budget.sessions {
            Some(format!(
                "server busy: {} sessions running; try later",
                self.running()
            ))
        } else if self.pending_from(req.tuple.remote_addr) >= self.budget.pending_per_peer {
            Some(format!(
                "too many sessions starting from {}: {} (finish their MPA startup first)",
                req.tuple.remote_addr, self.budget.pending_per_peer
            ))
        } else {
            None
        };
        if let Some(why) = why {
            self.reject(li, &req, why.clone());
            return Admission::Rejected(why);
        }
        let (dev, listener) = &self.listeners[li];
        match Session::start(li, dev, listener, req, hello, need) {
            Ok(s) => {
                self.admissions += 1;
                self.used += need;
                self.sessions.push(s);
                Admission::Accepted
            }
            Err((req, e)) => {
                let why = format!("server cannot start the session: {e}");
                self.reject(li, &req, why.clone());
                Admission::Rejected(why)
            }
        }
    }

    /// Runs `core` and this server until `count` sessions have finished (then returns
    /// their outcomes) or, with `idle`, until that long passes with no session and no
    /// request.
    pub fn run_until(
        &mut self,
        core: &mut Core,
        count: u64,
        idle: Option<Duration>,
    ) -> Result<Vec<SessionOutcome>, BenchError> {
        self.run_sessions(Some(core), count, idle)
    }

    /// [`Server::run_until`] for a device whose cores run on other threads: this thread
    /// only steps the sessions (yielding when none had work).
    pub fn run_until_elsewhere(
        &mut self,
        count: u64,
        idle: Option<Duration>,
    ) -> Result<Vec<SessionOutcome>, BenchError> {
        self.run_sessions(None, count, idle)
    }

    fn run_sessions(
        &mut self,
        mut core: Option<&mut Core>,
        count: u64,
        idle: Option<Duration>,
    ) -> Result<Vec<SessionOutcome>, BenchError> {
        let mut out = Vec::new();
        let mut last = Instant::now();
        let mut turns = 0u64;
        let mut idle_polls = 0u32;
        while (out.len() as u64) < count {
            match core.as_deref_mut() {
                Some(c) => {
                    c.poll();
                    self.step();
                }
                // Alone on its thread: back off when no session had work, leaving the
                // CPUs to the cores (as a client endpoint does, driver::IDLE_*).
                None => {
                    if self.step() > 0 {
                        idle_polls = 0;
                    } else {
                        idle_polls = idle_polls.saturating_add(1);
                        if idle_polls > crate::driver::IDLE_SLEEPS_AFTER {
                            std::thread::sleep(crate::driver::IDLE_SLEEP);
                        } else if idle_polls > crate::driver::IDLE_SPINS {
                            std::thread::yield_now();
                        }
                    }
                }
            }
            while let Some(s) = self.take_finished() {
                out.push(s);
            }
            // Sessions watch their own stalls; without any, look at the clock now and
            // then.
            turns += 1;
            if turns.is_multiple_of(1024) {
                if !self.sessions.is_empty() {
                    last = Instant::now();
                } else if idle.is_some_and(|d| last.elapsed() > d) {
                    return Err(BenchError::Stalled("waiting for the client"));
                }
            }
        }
        Ok(out)
    }
}

/// What a session's turn did.
enum Turn {
    Busy,
    Idle,
    Done,
}

enum Phase {
    /// The Reply went out; waiting for Full Operation.
    Accepting(Pending<ConnInfo>),
    /// Running the sizes.
    Running,
    /// The result Send is out; waiting for its completion, then for the client to close.
    Result { sent: bool, since: Instant },
    /// Closing; waiting until the connection is gone.
    Closing(Pending<()>, Instant),
}

/// One client's session (see the module docs).
struct Session {
    /// The index of its listener in [`Server::listeners`], whose device its connection
    /// is on.
    listener: usize,
    ep: Endpoint,
    peer: SocketAddrV4,
    hello: Hello,
    memory: u64,
    conn: Option<ConnId>,
    phase: Phase,
    /// The data buffer: Writes land here, Reads come from here, Sends are received here.
    data: Mr,
    /// Source of the server's own Writes and Sends (pongs, the result).
    src: Mr,
    ctl: Mr,
    grants: Mr,
    /// The client-server model's first message is still to come.
    first_pending: bool,
    /// Receives of a send-bw run given back while taking one pump's completions, posted
    /// together after them (one doorbell, not one per message).
    reposts: Vec<RecvWr>,
    size_idx: usize,
    /// The ready of the current size went out.
    ready_sent: bool,
    /// The client's done for this size, with its count (tests where it sends one).
    done: Option<u64>,
    /// Messages of this size received (Send tests) or checked (write-bw) or answered.
    received: u64,
    ungranted: u64,
    grants_sent: u64,
    write_lat_expect: u8,
    result: ServerResult,
    failed: Option<BenchError>,
    last_progress: Instant,
    /// Idle steps since the last work.
    idle_steps: u64,
    /// A piece of a message while `--verify` checks or builds it, kept from one message
    /// to the next: at most [`VERIFY_CHUNK`] octets, whatever the message size.
    scratch: Vec<u8>,
}

impl Session {
    fn start(
        li: usize,
        dev: &Device,
        listener: &Listener,
        req: ConnRequest,
        hello: Hello,
        memory: u64,
    ) -> Result<Session, (ConnRequest, String)> {
        let depth = hello.tx_depth;
        let mut ep = Endpoint::new(dev, depth.max(64) + 16, session_rq(&hello));
        ep.stall = STALL;
        let data_len = data_len(&hello);
        let reg = |len: usize, a: Access| {
            ep.pd
                .reg_mr(len.max(1), a)
                .map_err(|e| format!("registering {len} octets: {e}"))
        };
        // Least privilege: the client may write where its Writes go, read where its Reads
        // come from, and touch nothing else.
        let remote = match hello.test {
            Test::WriteBw | Test::WriteLat => Access::REMOTE_WRITE,
            Test::ReadBw | Test::ReadLat => Access::REMOTE_READ,
            Test::SendBw | Test::SendLat => Access::empty(),
        };
        let r = (|| {
            let data = reg(data_len, Access::LOCAL_WRITE | remote)?;
            let src = reg(source_len(&hello), Access::LOCAL_WRITE)?;
            let ctl = reg((CTL_RECVS * CTL_SLOT) as usize, Access::LOCAL_WRITE)?;
            let grants = reg((GRANT_SLOTS * 8) as usize, Access::LOCAL_WRITE)?;
            Ok::<_, String>((data, src, ctl, grants))
        })();
        let (data, src, ctl, grants) = match r {
            Ok(x) => x,
            Err(e) => return Err((req, e)),
        };
        if hello.test.is_read() && hello.verify {
            // Contents that depend on the offset, for Reads from moving offsets.
            let mut v = vec![0u8; data_len];
            verify::fill_region(&mut v, 0);
            if let Err(e) = data.write(0, &v) {
                return Err((req, format!("filling the read region: {e}")));
            }
        }
        let peer = SocketAddrV4::new(req.tuple.remote_addr, req.tuple.remote_port);
        let mut s = Session {
            listener: li,
            ep,
            peer,
            memory,
            conn: None,
            phase: Phase::Running,
            data,
            src,
            ctl,
            grants,
            first_pending: false,
            reposts: Vec::new(),
            size_idx: 0,
            ready_sent: false,
            done: None,
            received: 0,
            ungranted: 0,
            grants_sent: 0,
            write_lat_expect: 1,
            result: ServerResult::default(),
            failed: None,
            last_progress: Instant::now(),
            idle_steps: 0,
            scratch: Vec::new(),
            hello,
        };
        // Receives before the accept: the client's first message may follow the Reply.
        if let Err(e) = s.post_initial_receives() {
            return Err((req, e.to_string()));
        }
        let params = AcceptParams {
            private_data: session::encode_buffer(RemoteBuffer {
                stag: s.data.key(),
                to: s.data.base_to(),
            }),
            ..AcceptParams::default()
        };
        s.phase = Phase::Accepting(listener.accept(&req, &s.ep.qp, params));
        s.conn = Some(req.conn);
        Ok(s)
    }

    /// Octets of the data region's `len` octets from `off` that are not message `i`,
    /// read [`VERIFY_CHUNK`] octets at a time through the scratch buffer.
    fn data_mismatches(&mut self, off: usize, len: usize, i: u64) -> Result<u64, BenchError> {
        let mut v = std::mem::take(&mut self.scratch);
        let mut wrong = 0;
        let mut at = 0;
        let r = loop {
            if at >= len {
                break Ok(wrong);
            }
            v.resize((len - at).min(VERIFY_CHUNK), 0);
            if let Err(e) = self.data.read(off + at, &mut v) {
                break Err(BenchError::Thread(e.to_string()));
            }
            wrong += verify::mismatches_at(&v, i, at);
            at += v.len();
        };
        self.scratch = v;
        r
    }

    /// Writes message `i`'s first `len` octets to the source region from its start,
    /// [`VERIFY_CHUNK`] octets at a time through the scratch buffer.
    fn fill_source(&mut self, len: usize, i: u64) -> Result<(), BenchError> {
        let mut v = std::mem::take(&mut self.scratch);
        let mut at = 0;
        let r = loop {
            if at >= len {
                break Ok(());
            }
            v.resize((len - at).min(VERIFY_CHUNK), 0);
            verify::fill_at(&mut v, i, at);
            if let Err(e) = self.src.write(at, &v) {
                break Err(BenchError::Thread(e.to_string()));
            }
            at += v.len();
        };
        self.scratch = v;
        r
    }

    /// The receive buffer of slot `s` (send tests): one slot per message in flight for
    /// send-bw `--verify` (each is checked before its receive goes back), else one shared
    /// slot (as perftest).
    fn slot_sge(&self, s: u64, size: usize) -> Sge {
        let slots = if self.hello.verify && self.hello.test == Test::SendBw {
            send_recvs(&self.hello) as u64
        } else {
            1
        };
        self.data.sge((s % slots) * size as u64, size as u32)
    }

    fn size(&self) -> usize {
        self.hello
            .sizes
            .get(self.size_idx)
            .copied()
            .unwrap_or(1)
            .max(1)
    }

    fn post_initial_receives(&mut self) -> Result<(), BenchError> {
        if self.hello.test.is_send() {
            let max = self.hello.sizes.iter().copied().max().unwrap_or(1).max(1);
            for s in 0..send_recvs(&self.hello) as u64 {
                let local = self.slot_sge(s, max);
                self.ep.post_recv(RecvWr { wr_id: s, local })?;
            }
        } else {
            for k in 0..CTL_RECVS {
                self.ep.post_recv(RecvWr {
                    wr_id: WR_CTL | k,
                    local: self.ctl.sge(k * CTL_SLOT, CTL_SLOT as u32),
                })?;
            }
        }
        Ok(())
    }

    fn send(&mut self, wr_id: u64, local: Sge, op: SendOp) -> Result<(), BenchError> {
        self.ep.post_send(SendWr {
            wr_id,
            op,
            local,
            signaled: false,
        })?;
        Ok(())
    }

    /// Posts the receives given back and not posted yet ([`Session::reposts`]), in one
    /// list.
    fn post_reposts(&mut self) -> Result<(), BenchError> {
        if !self.reposts.is_empty() {
            self.ep.post_recv_list(&self.reposts)?;
            self.reposts.clear();
        }
        Ok(())
    }

    /// Grants the client the slots checked (or receives posted again) since the last
    /// grant, once there are a quarter of its credits of them: the client, which started
    /// with all of them, is then never short of one for long.
    fn grant(&mut self, force: bool) -> Result<(), BenchError> {
        let credits = match self.hello.test {
            Test::SendBw => send_credits(&self.hello),
            _ => self.hello.tx_depth,
        };
        let batch = (credits as u64 / 4).max(1);
        if self.ungranted == 0 || (!force && self.ungranted < batch) {
            return Ok(());
        }
        // The slots granted are posted first: the client may send into them at once.
        self.post_reposts()?;
        let off = (self.grants_sent % GRANT_SLOTS) * 8;
        self.grants_sent += 1;
        self.grants
            .write(off as usize, &session::encode_count(self.ungranted))
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        self.ungranted = 0;
        let local = self.grants.sge(off, 8);
        self.send(0, local, SendOp::Send)
    }

    /// Starts the current size: clears what tells a message is whole, sends *ready*.
    fn start_size(&mut self) -> Result<(), BenchError> {
        let size = self.size();
        self.done = None;
        self.received = 0;
        self.write_lat_expect = 1;
        match self.hello.test {
            Test::WriteBw if self.hello.verify => {
                // Lap bytes are never 0: no stale last octet passes for a message.
                for s in 0..self.hello.tx_depth {
                    let _ = self.data.write(s * size + size - 1, &[0]);
                }
            }
            Test::WriteLat => {
                let _ = self.data.write(size - 1, &[0]);
            }
            // send-bw: the credits beyond the tx depth the client starts with, before the
            // first *ready*.
            Test::SendBw if self.size_idx == 0 => {
                self.ungranted += (send_credits(&self.hello) - self.hello.tx_depth) as u64;
                self.grant(true)?;
            }
            _ => {}
        }
        self.ready_sent = true;
        self.send(0, empty(), SendOp::Send)
    }

    fn step(&mut self, dev: &Device) -> Result<Turn, BenchError> {
        let r = self.step_inner(dev);
        if let Err(e) = r {
            // A failed session ends at once: its QP goes, and the connection with it.
            if let Some(c) = self.conn.take() {
                let _ = dev.disconnect(c);
            }
            self.failed = Some(e);
            return Ok(Turn::Done);
        }
        r
    }

    fn step_inner(&mut self, dev: &Device) -> Result<Turn, BenchError> {
        match &mut self.phase {
            Phase::Accepting(p) => match p.try_get() {
                None => {
                    if self.last_progress.elapsed() > STALL {
                        return Err(BenchError::Stalled("accepting"));
                    }
                    return Ok(Turn::Idle);
                }
                Some(Err(e)) => return Err(BenchError::Connect(e)),
                Some(Ok(info)) => {
                    self.conn = Some(info.conn);
                    self.first_pending = !info.established.peer_to_peer;
                    self.phase = Phase::Running;
                    self.last_progress = Instant::now();
                    self.start_size()?;
                    return Ok(Turn::Busy);
                }
            },
            Phase::Result { sent, since } => {
                let sent = *sent;
                let since = *since;
                // The client closes once it has the result: the receives still posted
                // complete flushed then, as they should.
                self.ep.pump_any();
                if let Some(c) = self.ep.done.iter().find(|c| c.wr_id == WR_RESULT) {
                    if c.status != control::verbs::WcStatus::Success {
                        return Err(BenchError::Completion(*c));
                    }
                }
                let done_now = self.ep.done.iter().any(|c| c.wr_id == WR_RESULT);
                if !sent && done_now {
                    self.phase = Phase::Result {
                        sent: true,
                        since: Instant::now(),
                    };
                    return Ok(Turn::Busy);
                }
                // Let the client close first (it reads the result, then closes): our
                // FIN then answers its FIN and no TIME-WAIT stays here.
                let peer_closed = self.ep.qp.state() == QpRingState::Error;
                if sent && (peer_closed || since.elapsed() > STALL) {
                    let conn = self.conn.take();
                    let p = match conn {
                        Some(c) => dev.disconnect(c),
                        None => return Ok(Turn::Done),
                    };
                    self.phase = Phase::Closing(p, Instant::now());
                    return Ok(Turn::Busy);
                }
                if !sent && since.elapsed() > STALL {
                    return Err(BenchError::Stalled("sending the result"));
                }
                return Ok(Turn::Idle);
            }
            Phase::Closing(p, since) => {
                if p.try_get().is_some()
                    || since.elapsed() > dev.limits().linger + Duration::from_secs(1)
                {
                    return Ok(Turn::Done);
                }
                return Ok(Turn::Idle);
            }
            Phase::Running => {}
        }
        let n = self.ep.pump()?;
        let mut work = n;
        let done = std::mem::take(&mut self.ep.done);
        for c in &done {
            if c.opcode != WcOpcode::Recv {
                continue;
            }
            if self.hello.test.is_send() {
                self.on_send_recv(c.wr_id, c.byte_len as usize)?;
            } else {
                self.on_ctl_recv(c.wr_id, c.byte_len as usize)?;
            }
        }
        self.ep.done = done;
        self.post_reposts()?;
        match self.hello.test {
            Test::WriteBw if self.hello.verify => work += self.check_write_slots()?,
            Test::WriteLat => work += self.answer_write_ping()?,
            _ => {}
        }
        if self.size_finished() {
            self.size_idx += 1;
            work += 1;
            if self.size_idx < self.hello.sizes.len() {
                self.start_size()?;
            } else {
                self.send_result()?;
            }
        }
        if work > 0 {
            self.idle_steps = 0;
            Ok(Turn::Busy)
        } else {
            // The clock is read only now and then while idle (it costs as much as an
            // idle step).
            self.idle_steps += 1;
            if self.idle_steps % 4096 == 1 {
                if self.idle_steps == 1 {
                    self.last_progress = Instant::now();
                } else if self.last_progress.elapsed() > STALL * 3 {
                    return Err(BenchError::Stalled("serving"));
                }
            }
            Ok(Turn::Idle)
        }
    }

    fn size_finished(&self) -> bool {
        let Some(n) = self.done else {
            return false;
        };
        match self.hello.test {
            // Every message checked before the size ends.
            Test::WriteBw if self.hello.verify => self.received >= n,
            _ => true,
        }
    }

    fn send_result(&mut self) -> Result<(), BenchError> {
        self.src
            .write(0, &self.result.encode())
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        self.ep.post_send(SendWr {
            wr_id: WR_RESULT,
            op: SendOp::Send,
            local: self.src.sge(0, RESULT_LEN as u32),
            signaled: true,
        })?;
        self.phase = Phase::Result {
            sent: false,
            since: Instant::now(),
        };
        Ok(())
    }

    /// A control receive (tests without data Sends): the first message or *done*.
    fn on_ctl_recv(&mut self, wr_id: u64, len: usize) -> Result<(), BenchError> {
        let k = wr_id & !WR_CTL;
        let off = k * CTL_SLOT;
        let mut b = [0u8; CTL_SLOT as usize];
        let b = &mut b[..len.min(CTL_SLOT as usize)];
        self.ctl
            .read(off as usize, b)
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        self.ep.post_recv(RecvWr {
            wr_id,
            local: self.ctl.sge(off, CTL_SLOT as u32),
        })?;
        match len {
            0 if self.first_pending => self.first_pending = false,
            session::DONE_LEN if self.done.is_none() => {
                let n = session::decode_count(b).unwrap_or(0);
                if let (Length::Iterations(want), false) =
                    (self.hello.length, self.hello.test.is_latency())
                {
                    if n != want {
                        return Err(BenchError::Protocol(format!(
                            "the client says it sent {n} messages of the {want} it announced"
                        )));
                    }
                }
                self.done = Some(n);
            }
            _ => {
                return Err(BenchError::Protocol(format!(
                    "an unexpected control Send of {len} octets from the client"
                )))
            }
        }
        Ok(())
    }

    /// A receive of a Send test: data, or zero-length control.
    fn on_send_recv(&mut self, s: u64, len: usize) -> Result<(), BenchError> {
        let size = self.size();
        let max = self.hello.sizes.iter().copied().max().unwrap_or(1).max(1);
        let local = self.slot_sge(s, max);
        if len == 0 {
            // The client-server model's first message, then each size's done.
            self.ep.post_recv(RecvWr { wr_id: s, local })?;
            if self.first_pending {
                self.first_pending = false;
            } else if self.done.is_none() {
                self.done = Some(self.received);
            }
            return Ok(());
        }
        // Sends arrive in order (RFC 5040 5.5): this is the size's message `seq`.
        let seq = self.received;
        self.received += 1;
        if self.hello.verify {
            let off = (local.to - self.data.base_to()) as usize;
            if len != size {
                self.result.errors += size as u64;
            } else {
                self.result.errors += self.data_mismatches(off, size, seq)?;
            }
            self.result.verified += size as u64;
        }
        // The slot goes back only now, checked. A send-bw run posts the pump's slots
        // together, after its completions; a pong waits for its receive to be posted (the
        // next ping may follow it at once).
        if self.hello.test == Test::SendLat {
            self.ep.post_recv(RecvWr { wr_id: s, local })?;
            if self.hello.verify {
                self.fill_source(size, verify::pong(seq))?;
            }
            let local = self.src.sge(0, size as u32);
            self.send(seq, local, SendOp::Send)?;
        } else {
            self.reposts.push(RecvWr { wr_id: s, local });
            self.ungranted += 1;
            self.grant(false)?;
        }
        Ok(())
    }

    /// write-bw --verify: checks each message whose last octet has landed, in order, and
    /// hands its slot back.
    fn check_write_slots(&mut self) -> Result<usize, BenchError> {
        let size = self.size();
        let slots = self.hello.tx_depth;
        let mut n = 0;
        loop {
            if self.done.is_some_and(|d| self.received >= d) {
                break;
            }
            let i = self.received;
            let off = (i % slots as u64) as usize * size;
            if self.data.load_u8_acquire(off + size - 1) != Some(verify::lap_byte(i, slots)) {
                break;
            }
            // Its last octet is the lap octet (just seen); the rest is the pattern.
            self.result.errors += self.data_mismatches(off, size - 1, i)?;
            self.result.verified += size as u64;
            self.received += 1;
            self.ungranted += 1;
            n += 1;
            self.grant(false)?;
        }
        Ok(n)
    }

    /// write-lat: answers a ping whose counter octet has landed with a pong.
    fn answer_write_ping(&mut self) -> Result<usize, BenchError> {
        let size = self.size();
        let k = self.write_lat_expect;
        if self.data.load_u8_acquire(size - 1) != Some(k) {
            return Ok(0);
        }
        let Some(r) = self.hello.client_sink else {
            return Err(BenchError::Protocol(
                "write-lat without the client's buffer".into(),
            ));
        };
        let i = self.received;
        if self.hello.verify {
            // The ping's last octet is its counter (just seen); the rest is the pattern.
            self.result.errors += self.data_mismatches(0, size - 1, i)?;
            self.result.verified += size as u64;
            self.fill_source(size - 1, verify::pong(i))?;
        }
        self.src
            .write(size - 1, &[k])
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        let local = self.src.sge(0, size as u32);
        self.send(
            i,
            local,
            SendOp::Write {
                remote_stag: r.stag,
                remote_to: r.to,
            },
        )?;
        self.received += 1;
        self.write_lat_expect = (self.received % 255 + 1) as u8;
        Ok(1)
    }
}

fn empty() -> Sge {
    Sge {
        stag: 0,
        to: 0,
        len: 0,
    }
}
