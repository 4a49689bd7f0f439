//! The connection manager: the control thread that takes connections from TCP to Full
//! Operation.
//!
//! It serves consumers' [`CmRequest`]s (connect, listen, accept, reject, disconnect) and
//! the core's [`CoreEvent`]s. For each connection it runs the MPA startup machine of its
//! role ([`Initiator`] or [`Responder`]) over the streaming-mode octets the core forwards,
//! writes the machine's output back through the core ([`CoreCmd::Send`]), and, once the
//! machine reports [`Event::Established`], publishes the QP to the core
//! ([`CoreCmd::Publish`]) with the negotiated modes, IRD/ORD, MSNs and the stream position
//! where FPDU mode begins.
//!
//! [`ConnectionManager`] is sans-IO like the machines it drives: [`ConnectionManager::on_request`],
//! [`ConnectionManager::on_core_event`] and [`ConnectionManager::on_timeout`] take input,
//! commands for the core go to a channel. [`spawn`] runs it on a thread.
//!
//! # Bounds
//!
//! The startup octets come from the core one chunk at a time: after feeding a chunk to
//! the machine the manager answers [`CoreCmd::Read`] (more), [`CoreCmd::Publish`] (FPDU
//! mode, with the octets the machine did not consume) or [`CoreCmd::Close`]. Every channel
//! is bounded ([`Limits`]): commands the core's channel has no room for wait in order in
//! an outbox (a few per connection at most), and while it is not empty consumer requests
//! that would add connections are answered [`CmError::Busy`]; connection requests a
//! listener's consumer has not taken beyond [`Limits::listener_queue`] are rejected with
//! the reason in the Reply's private data. A failed startup always ends its connection.
//! Machine deadlines are kept in a heap, so a loop iteration costs O(log n), not O(n).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use dataplane::limits::Limits;
use dataplane::rings::{
    conn_core, conn_id, CloseReason, ConnId, CoreCmd, CoreEvent, QpPublish, QpRingState, QpRings,
    MAX_CORES,
};
use proto::qp::QpConfig;
use proto::tcp::FourTuple;

use proto::ird_ord;
use proto::startup::{
    AcceptParams, ApiError, CloseKind, Established, Event, Failure, Initiator, InitiatorConfig,
    Output, Rejected, RequestReceived, Responder, ResponderConfig,
};

/// The QP a connection will run, as the consumer created it.
#[derive(Debug, Clone)]
pub struct QpSpec {
    /// The consumer's rings (its QP number is `rings.qpn`).
    pub rings: Arc<QpRings>,
    /// Protection domain.
    pub pd: u32,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
    /// IRD and ORD to use when MPA did not negotiate them (Rev 1, or 0x3FFF).
    pub default_ird_ord: (u16, u16),
}

/// What the consumer learns when a connection reaches Full Operation.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The connection.
    pub conn: ConnId,
    /// Its 4-tuple.
    pub tuple: FourTuple,
    /// The startup's outcome: frames, modes, IRD/ORD, RTR.
    pub established: Box<Established>,
    /// IRD the QP runs with.
    pub ird: u16,
    /// ORD the QP runs with.
    pub ord: u16,
}

impl ConnInfo {
    /// Private data the peer sent (in its Request or Reply).
    pub fn peer_private_data(&self) -> &[u8] {
        let e = &self.established;
        match e.role {
            proto::startup::Role::Initiator => &e.reply.private_data,
            proto::startup::Role::Responder => &e.request.private_data,
        }
    }
}

/// Why a connection did not reach Full Operation.
#[derive(Debug, Clone)]
pub enum CmError {
    /// The peer rejected it (MPA Reply with R = 1).
    Rejected(Box<Rejected>),
    /// The MPA startup failed.
    Startup(Box<Failure>),
    /// TCP failed or closed before the startup completed.
    Closed(CloseReason),
    /// A machine refused the parameters.
    Api(ApiError),
    /// No such connection or request.
    UnknownConnection,
    /// The port is already listened on.
    AddressInUse,
    /// The control thread is gone.
    Shutdown,
    /// A bounded queue on the way is full (control channel, or no room for another
    /// connection): try again later.
    Busy(&'static str),
    /// No answer within this bound (the core is not running, or the control thread is
    /// stuck).
    TimedOut(Duration),
    /// A connect asked for core `.0` of a device with `.1` cores.
    NoSuchCore(usize, usize),
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmError::Rejected(r) => {
                let pd = &r.reply.private_data;
                match std::str::from_utf8(pd) {
                    Ok(t) if !t.is_empty() && t.chars().all(|c| !c.is_control() || c == '\n') => {
                        write!(f, "rejected by the peer: {t}")
                    }
                    _ => write!(
                        f,
                        "rejected by the peer ({} octets of private data)",
                        pd.len()
                    ),
                }
            }
            CmError::Startup(fail) => {
                write!(
                    f,
                    "MPA startup failed: {} (MPA error {:?})",
                    fail.error,
                    fail.code()
                )
            }
            CmError::Closed(r) => write!(f, "connection closed during startup: {r}"),
            CmError::Api(e) => write!(f, "invalid connection parameters: {e}"),
            CmError::UnknownConnection => f.write_str("no such connection"),
            CmError::AddressInUse => f.write_str("port already listened on"),
            CmError::Shutdown => f.write_str("connection manager shut down"),
            CmError::Busy(what) => write!(f, "busy: {what}"),
            CmError::TimedOut(d) => write!(f, "no answer within {d:?}"),
            CmError::NoSuchCore(c, n) => {
                write!(
                    f,
                    "no core {c}: the device has {n} (0..={})",
                    n.saturating_sub(1)
                )
            }
        }
    }
}

impl std::error::Error for CmError {}

/// A connection request that arrived on a listener, for the consumer to accept or reject.
#[derive(Debug, Clone)]
pub struct ConnRequest {
    /// The connection (pass it to accept/reject).
    pub conn: ConnId,
    /// Its 4-tuple.
    pub tuple: FourTuple,
    /// The MPA Request and what it asks for.
    pub request: Box<RequestReceived>,
}

/// Why a connect or accept was refused at the QP limit.
const QP_LIMIT: &str = "the device holds its most QPs (Limits::max_qps, [qp] max_qps)";

/// The reply channel of a request that ends in an established connection.
pub type ConnReply = Sender<Result<ConnInfo, CmError>>;

/// A consumer's request to the connection manager.
#[derive(Debug)]
pub enum CmRequest {
    /// Connect `qp` to `remote`, as MPA Initiator with `config`.
    Connect {
        /// Where to.
        remote: SocketAddrV4,
        /// The core to open it from (`None`: the cores in turn).
        core: Option<usize>,
        /// The QP.
        qp: QpSpec,
        /// MPA parameters.
        config: Box<InitiatorConfig>,
        /// Gets the result.
        reply: ConnReply,
    },
    /// Listen on a TCP port as MPA Responder with `config`; requests go to `requests`.
    Listen {
        /// TCP port.
        port: u16,
        /// MPA parameters.
        config: Box<ResponderConfig>,
        /// Where arriving requests go.
        requests: Sender<ConnRequest>,
        /// Gets the result.
        reply: Sender<Result<(), CmError>>,
    },
    /// Stop listening.
    Unlisten {
        /// TCP port.
        port: u16,
    },
    /// Accept a request with `qp`.
    Accept {
        /// From [`ConnRequest::conn`].
        conn: ConnId,
        /// The QP.
        qp: QpSpec,
        /// Reply parameters.
        params: AcceptParams,
        /// Gets the result (when the connection is in Full Operation).
        reply: ConnReply,
    },
    /// Reject a request, with private data.
    Reject {
        /// From [`ConnRequest::conn`].
        conn: ConnId,
        /// Private data for the Reply.
        private_data: Vec<u8>,
    },
    /// Close an established connection (its QP flushes), gracefully: queued work and a
    /// FIN go out, and the core resets it if the close takes longer than
    /// [`Limits::linger`].
    Disconnect {
        /// The connection.
        conn: ConnId,
        /// Gets `Ok` once the connection is gone from the core (both FINs acknowledged,
        /// or reset at the linger time).
        reply: Option<Sender<Result<(), CmError>>>,
    },
    /// Stop the control thread.
    Shutdown,
}

enum Machine {
    Initiator(Initiator),
    Responder(Responder),
}

impl Machine {
    fn finished(&self) -> bool {
        match self {
            Machine::Initiator(m) => m.state() == proto::startup::InitiatorState::Finished,
            Machine::Responder(m) => m.state() == proto::startup::ResponderState::Finished,
        }
    }
    fn poll_output(&mut self) -> Option<Output> {
        match self {
            Machine::Initiator(m) => m.poll_output(),
            Machine::Responder(m) => m.poll_output(),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Machine::Initiator(m) => m.poll_timeout(),
            Machine::Responder(m) => m.poll_timeout(),
        }
    }
    fn on_timeout(&mut self, now: Instant) {
        match self {
            Machine::Initiator(m) => m.on_timeout(now),
            Machine::Responder(m) => m.on_timeout(now),
        }
    }
    fn on_data(&mut self, data: &[u8], now: Instant) {
        match self {
            Machine::Initiator(m) => m.on_data(data, now),
            Machine::Responder(m) => m.on_data(data, now),
        }
    }
    fn on_closed(&mut self, kind: CloseKind) {
        match self {
            Machine::Initiator(m) => m.on_closed(kind),
            Machine::Responder(m) => m.on_closed(kind),
        }
    }
}

struct CmConn {
    tuple: Option<FourTuple>,
    machine: Option<Machine>,
    initiator_config: Option<Box<InitiatorConfig>>,
    listen_port: Option<u16>,
    /// Octets fed to the machine so far (the receive stream position after them).
    fed: u64,
    qp: Option<QpSpec>,
    reply: Option<ConnReply>,
    established: bool,
    /// Waiting for the answer to a chunk of startup octets (the core sends no more).
    chunk_pending: bool,
    /// The machine deadline in the heap.
    timer: Option<Instant>,
    /// Told once the connection is gone.
    disconnect_waiters: Vec<Sender<Result<(), CmError>>>,
}

struct ListenerEntry {
    config: ResponderConfig,
    requests: Sender<ConnRequest>,
}

/// The connection manager's state (see the module docs).
pub struct ConnectionManager {
    /// One channel per core, by core index.
    cores: Vec<Sender<CoreCmd>>,
    /// Per core: commands its channel had no room for, in order.
    outboxes: Vec<VecDeque<CoreCmd>>,
    /// The core the next active open goes to (round robin).
    next_core: usize,
    /// Connections holding a QP (connecting, accepted, established), against
    /// [`Limits::max_qps`].
    qps_held: usize,
    conns: HashMap<ConnId, CmConn>,
    listeners: HashMap<u16, ListenerEntry>,
    next_active: u64,
    timers: BinaryHeap<Reverse<(Instant, ConnId)>>,
    limits: Limits,
    stats: CmStats,
}

/// Counters of the connection manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// Connections that reached Full Operation.
    pub established: u64,
    /// Startups that failed (timeouts, protocol errors, closes).
    pub failed: u64,
    /// Requests rejected because the listener's consumer had too many waiting.
    pub listener_overflows: u64,
    /// Consumer requests answered busy.
    pub busy: u64,
    /// Commands that waited for room in the core's channel.
    pub commands_deferred: u64,
}

impl fmt::Debug for ConnectionManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionManager")
            .field("connections", &self.conns.len())
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

fn qp_config(qp: &QpSpec, e: &Established) -> (QpConfig, u16, u16) {
    let (ird, ord) = ird_ord::for_qp(e.ird_ord, qp.default_ird_ord);
    let m = |q: &proto::startup::QueueMsns| [q.send, q.read_request, q.terminate];
    (
        QpConfig {
            qpn: qp.rings.qpn,
            pd: qp.pd,
            ird,
            ord,
            tx_next_msn: m(&e.tx_next_msn),
            rx_next_msn: m(&e.rx_next_msn),
            max_send_wr: qp.max_send_wr,
            max_recv_wr: qp.max_recv_wr,
            read_rtr_sink: e.read_rtr_sink.map(|s| (s.stag, s.to)),
        },
        ird,
        ord,
    )
}

impl ConnectionManager {
    /// A manager that commands one core through `core`, with `limits`.
    pub fn new(core: Sender<CoreCmd>, limits: Limits) -> Self {
        Self::with_cores(vec![core], limits)
    }

    /// A manager of several cores: `cores[i]` commands core `i` (at most
    /// [`MAX_CORES`]; the rest are not used). Listens go to every core; active opens are
    /// spread over the cores in turn; commands about a connection go to the core its
    /// [`ConnId`] names ([`conn_core`]).
    pub fn with_cores(mut cores: Vec<Sender<CoreCmd>>, limits: Limits) -> Self {
        cores.truncate(MAX_CORES);
        ConnectionManager {
            outboxes: cores.iter().map(|_| VecDeque::new()).collect(),
            cores,
            next_core: 0,
            qps_held: 0,
            conns: HashMap::new(),
            listeners: HashMap::new(),
            next_active: 1,
            timers: BinaryHeap::new(),
            limits,
            stats: CmStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Connections the manager knows (in startup or established).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Commands waiting for room in the cores' channels.
    pub fn outbox_len(&self) -> usize {
        self.outboxes.iter().map(VecDeque::len).sum()
    }

    /// Cores commanded.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// The core a command goes to.
    fn core_of(cmd: &CoreCmd) -> usize {
        match cmd {
            CoreCmd::Listen { .. } | CoreCmd::Unlisten { .. } => 0,
            CoreCmd::Connect { conn, .. }
            | CoreCmd::Read { conn }
            | CoreCmd::Send { conn, .. }
            | CoreCmd::Publish { conn, .. }
            | CoreCmd::Close { conn, .. } => conn_core(*conn),
        }
    }

    /// Sends a command about a connection to the core that owns it.
    fn send_core(&mut self, cmd: CoreCmd) {
        let i = Self::core_of(&cmd);
        self.send_to(i, cmd);
    }

    /// Sends a command to every core (listen, unlisten).
    fn send_all(&mut self, make: impl Fn() -> CoreCmd) {
        for i in 0..self.cores.len() {
            self.send_to(i, make());
        }
    }

    fn send_to(&mut self, i: usize, cmd: CoreCmd) {
        let (Some(core), Some(outbox)) = (self.cores.get(i), self.outboxes.get_mut(i)) else {
            // No such core: a connection id the cores never made. Nothing to command.
            return;
        };
        if !outbox.is_empty() {
            self.stats.commands_deferred += 1;
            outbox.push_back(cmd);
            return;
        }
        match core.try_send(cmd) {
            Ok(()) => {}
            Err(TrySendError::Full(cmd)) => {
                self.stats.commands_deferred += 1;
                outbox.push_back(cmd);
            }
            // The core is gone (shutting down).
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Sends what waits in the outboxes while the cores' channels have room; true when
    /// they are empty.
    pub fn flush_outbox(&mut self) -> bool {
        let mut empty = true;
        for (core, outbox) in self.cores.iter().zip(self.outboxes.iter_mut()) {
            while let Some(cmd) = outbox.pop_front() {
                match core.try_send(cmd) {
                    Ok(()) => {}
                    Err(TrySendError::Full(cmd)) => {
                        outbox.push_front(cmd);
                        empty = false;
                        break;
                    }
                    Err(TrySendError::Disconnected(_)) => outbox.clear(),
                }
            }
        }
        empty
    }

    /// Whether a new connection may be started on core `i` (its channel is not backed
    /// up).
    fn has_room(&self, i: usize) -> bool {
        self.outboxes
            .get(i)
            .is_some_and(|o| o.len() < self.limits.control_queue)
    }

    /// Schedules the machine deadline of `id` in the heap, if it is earlier than the one
    /// there.
    fn schedule(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let Some(t) = c.machine.as_ref().and_then(|m| m.poll_timeout()) else {
            return;
        };
        if c.timer.is_some_and(|cur| cur <= t) {
            return;
        }
        c.timer = Some(t);
        self.timers.push(Reverse((t, id)));
    }

    fn new_conn(tuple: Option<FourTuple>, machine: Option<Machine>) -> CmConn {
        CmConn {
            tuple,
            machine,
            initiator_config: None,
            listen_port: None,
            fed: 0,
            qp: None,
            reply: None,
            established: false,
            chunk_pending: false,
            timer: None,
            disconnect_waiters: Vec::new(),
        }
    }

    /// Handles a consumer request. Returns false for [`CmRequest::Shutdown`].
    pub fn on_request(&mut self, req: CmRequest, now: Instant) -> bool {
        match req {
            CmRequest::Connect {
                remote,
                core,
                qp,
                config,
                reply,
            } => {
                if let Err(e) = config.request() {
                    let _ = reply.send(Err(CmError::Api(e)));
                    return true;
                }
                // Active opens go where asked, else to the cores in turn, skipping those
                // whose channel is backed up.
                let n = self.cores.len();
                if self.qps_held >= self.limits.max_qps {
                    self.stats.busy += 1;
                    let _ = reply.send(Err(CmError::Busy(QP_LIMIT)));
                    return true;
                }
                if let Some(c) = core.filter(|&c| c >= n) {
                    let _ = reply.send(Err(CmError::NoSuchCore(c, n)));
                    return true;
                }
                let pick = match core {
                    Some(c) => Some(c).filter(|&c| self.has_room(c)),
                    None => (0..n)
                        .map(|k| (self.next_core + k) % n)
                        .find(|&i| self.has_room(i)),
                };
                let Some(core) = pick else {
                    self.stats.busy += 1;
                    let _ = reply.send(Err(CmError::Busy("the core's control channel is full")));
                    return true;
                };
                if let Some(next) = (core + 1).checked_rem(n) {
                    self.next_core = next;
                }
                let id = conn_id(core, self.next_active, true);
                self.next_active += 1;
                let mut c = Self::new_conn(None, None);
                c.initiator_config = Some(config);
                c.qp = Some(qp);
                c.reply = Some(reply);
                self.qps_held += 1;
                self.conns.insert(id, c);
                self.send_core(CoreCmd::Connect { conn: id, remote });
            }
            CmRequest::Listen {
                port,
                config,
                requests,
                reply,
            } => {
                if self.listeners.contains_key(&port) {
                    let _ = reply.send(Err(CmError::AddressInUse));
                    return true;
                }
                if let Err(e) = Responder::new((*config).clone(), now) {
                    let _ = reply.send(Err(CmError::Api(e)));
                    return true;
                }
                self.listeners.insert(
                    port,
                    ListenerEntry {
                        config: *config,
                        requests,
                    },
                );
                self.send_all(|| CoreCmd::Listen { port });
                let _ = reply.send(Ok(()));
            }
            CmRequest::Unlisten { port } => {
                if self.listeners.remove(&port).is_some() {
                    self.send_all(|| CoreCmd::Unlisten { port });
                }
            }
            CmRequest::Accept {
                conn,
                qp,
                params,
                reply,
            } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    let _ = reply.send(Err(CmError::UnknownConnection));
                    return true;
                };
                let Some(Machine::Responder(m)) = c.machine.as_mut() else {
                    let _ = reply.send(Err(CmError::UnknownConnection));
                    return true;
                };
                if self.qps_held >= self.limits.max_qps {
                    // The device's QP limit: this request is rejected with the reason.
                    self.stats.busy += 1;
                    let _ = m.reject(b"QP limit reached (max_qps)".to_vec());
                    let _ = reply.send(Err(CmError::Busy(QP_LIMIT)));
                    self.drain(conn, now);
                    return true;
                }
                if let Err(e) = m.accept(params, now) {
                    let _ = reply.send(Err(CmError::Api(e)));
                    return true;
                }
                c.qp = Some(qp);
                c.reply = Some(reply);
                self.qps_held += 1;
                self.drain(conn, now);
            }
            CmRequest::Reject { conn, private_data } => {
                if let Some(CmConn {
                    machine: Some(Machine::Responder(m)),
                    ..
                }) = self.conns.get_mut(&conn)
                {
                    let _ = m.reject(private_data);
                    self.drain(conn, now);
                }
            }
            CmRequest::Disconnect { conn, reply } => match self.conns.get_mut(&conn) {
                Some(c) => {
                    c.disconnect_waiters.extend(reply);
                    self.send_core(CoreCmd::Close { conn, abort: false });
                }
                None => {
                    // Gone already (or never was): nothing left to wait for.
                    if let Some(r) = reply {
                        let _ = r.send(Ok(()));
                    }
                }
            },
            CmRequest::Shutdown => return false,
        }
        true
    }

    /// Handles an event from the core.
    pub fn on_core_event(&mut self, ev: CoreEvent, now: Instant) {
        match ev {
            CoreEvent::Connected { conn, tuple } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    self.send_core(CoreCmd::Close { conn, abort: true });
                    return;
                };
                c.tuple = Some(tuple);
                let cfg = c.initiator_config.take().map(|b| *b).unwrap_or_default();
                match Initiator::new(cfg, now) {
                    Ok(m) => c.machine = Some(Machine::Initiator(m)),
                    Err(e) => {
                        if let Some(r) = c.reply.take() {
                            let _ = r.send(Err(CmError::Api(e)));
                        }
                        self.send_core(CoreCmd::Close { conn, abort: true });
                        return;
                    }
                }
                self.drain(conn, now);
            }
            CoreEvent::Accepted { conn, tuple } => {
                let Some(l) = self.listeners.get(&tuple.local_port) else {
                    self.send_core(CoreCmd::Close { conn, abort: true });
                    return;
                };
                let m = match Responder::new(l.config.clone(), now) {
                    Ok(m) => m,
                    Err(_) => {
                        self.send_core(CoreCmd::Close { conn, abort: true });
                        return;
                    }
                };
                let mut c = Self::new_conn(Some(tuple), Some(Machine::Responder(m)));
                c.listen_port = Some(tuple.local_port);
                self.conns.insert(conn, c);
                self.drain(conn, now);
            }
            CoreEvent::Data { conn, bytes } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                if c.established {
                    return;
                }
                c.fed += bytes.len() as u64;
                c.chunk_pending = true;
                if let Some(m) = c.machine.as_mut() {
                    m.on_data(&bytes, now);
                }
                self.drain(conn, now);
                // The chunk is consumed: ask for more unless the machine is done (then
                // Publish or Close went out instead).
                if let Some(c) = self.conns.get_mut(&conn) {
                    if c.chunk_pending && c.machine.as_ref().is_some_and(|m| !m.finished()) {
                        c.chunk_pending = false;
                        self.send_core(CoreCmd::Read { conn });
                    }
                }
            }
            CoreEvent::PeerFin { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    if let Some(m) = c.machine.as_mut() {
                        m.on_closed(CloseKind::Fin);
                    }
                    self.drain(conn, now);
                }
            }
            CoreEvent::Closed { conn, reason } => {
                if let Some(mut c) = self.conns.remove(&conn) {
                    if c.qp.is_some() {
                        self.qps_held = self.qps_held.saturating_sub(1);
                    }
                    if let Some(m) = c.machine.as_mut() {
                        if !c.established && !m.finished() {
                            self.stats.failed += 1;
                            m.on_closed(match reason {
                                CloseReason::PeerClosed => CloseKind::Fin,
                                _ => CloseKind::Reset,
                            });
                        }
                    }
                    if let Some(r) = c.reply.take() {
                        let _ = r.send(Err(CmError::Closed(reason)));
                    }
                    if let Some(qp) = &c.qp {
                        qp.rings.set_state(QpRingState::Error);
                    }
                    for w in c.disconnect_waiters {
                        let _ = w.send(Ok(()));
                    }
                }
            }
        }
    }

    /// The earliest startup deadline (maybe one that no longer holds: it is checked when
    /// it comes).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Runs the machines' timers due at `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.timer != Some(t) {
                continue;
            }
            c.timer = None;
            if let Some(m) = c.machine.as_mut() {
                if m.poll_timeout().is_some_and(|d| d <= now) {
                    m.on_timeout(now);
                }
            }
            self.drain(id, now);
        }
    }

    /// Carries out a machine's outputs, then schedules its next deadline, or lets the
    /// machine go once it has finished (its outcome is out).
    fn drain(&mut self, id: ConnId, now: Instant) {
        self.drain_outputs(id, now);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.machine.as_ref().is_some_and(|m| m.finished()) {
            c.machine = None;
            c.timer = None;
        } else {
            self.schedule(id);
        }
    }

    fn drain_outputs(&mut self, id: ConnId, _now: Instant) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let Some(m) = c.machine.as_mut() else {
                return;
            };
            let Some(out) = m.poll_output() else {
                return;
            };
            match out {
                Output::Send(bytes) => self.send_core(CoreCmd::Send { conn: id, bytes }),
                // Graceful: a Terminate the machine just output (RFC 6581 8) must reach
                // the peer before the FIN; a RST would discard it from the send queue.
                Output::Close => self.send_core(CoreCmd::Close {
                    conn: id,
                    abort: false,
                }),
                Output::Event(Event::RequestReceived(r)) => {
                    let port = c.listen_port.unwrap_or(0);
                    let Some(tuple) = c.tuple else {
                        continue;
                    };
                    let too_long = self.listeners.get(&port).and_then(|l| {
                        let n = r.request.private_data.len();
                        (n > l.config.max_private_data).then(|| {
                            format!(
                                "private data of {n} octets is longer than this listener takes ({})",
                                l.config.max_private_data
                            )
                        })
                    });
                    if let Some(why) = too_long {
                        if let Some(Machine::Responder(m)) = c.machine.as_mut() {
                            let _ = m.reject(why.into_bytes());
                        }
                        continue;
                    }
                    let delivered = match self.listeners.get(&port) {
                        Some(l) => match l.requests.try_send(ConnRequest {
                            conn: id,
                            tuple,
                            request: r,
                        }) {
                            Ok(()) => Ok(()),
                            Err(TrySendError::Full(_)) => Err(&b"listener queue full"[..]),
                            Err(TrySendError::Disconnected(_)) => Err(&b"not listening"[..]),
                        },
                        None => Err(&b"not listening"[..]),
                    };
                    if let Err(why) = delivered {
                        if why.starts_with(b"listener queue") {
                            self.stats.listener_overflows += 1;
                        }
                        if let Some(Machine::Responder(m)) = c.machine.as_mut() {
                            let _ = m.reject(why.to_vec());
                        }
                    }
                }
                Output::Event(Event::ReplyReceived(_)) => {
                    // confirm_reply is a consumer option this manager does not expose: go on.
                    if let Some(Machine::Initiator(m)) = c.machine.as_mut() {
                        let _ = m.confirm();
                    }
                }
                Output::Event(Event::Established(mut e)) => {
                    c.established = true;
                    c.chunk_pending = false;
                    self.stats.established += 1;
                    let Some(qp) = c.qp.clone() else {
                        self.send_core(CoreCmd::Close {
                            conn: id,
                            abort: true,
                        });
                        continue;
                    };
                    let (config, ird, ord) = qp_config(&qp, &e);
                    // The octets the machine did not consume go back to the core with
                    // their position: the core checks they end where it stopped.
                    let rx_pending = std::mem::take(&mut e.rx_pending);
                    let rx_stream_pos = c.fed - rx_pending.len() as u64;
                    let publish = QpPublish {
                        tx_mode: e.tx_mode,
                        tx_offset: e.tx_offset,
                        rx_mode: e.rx_mode,
                        rx_offset: e.rx_offset,
                        rx_stream_pos,
                        rx_pending,
                        config,
                        rings: qp.rings.clone(),
                    };
                    let info = ConnInfo {
                        conn: id,
                        tuple: c.tuple.expect("established connections have a tuple"),
                        established: e,
                        ird,
                        ord,
                    };
                    let reply = c.reply.take();
                    self.send_core(CoreCmd::Publish {
                        conn: id,
                        qp: Box::new(publish),
                    });
                    if let Some(r) = reply {
                        let _ = r.send(Ok(info));
                    }
                }
                Output::Event(Event::Rejected(r)) => {
                    c.chunk_pending = false;
                    if let Some(reply) = c.reply.take() {
                        let _ = reply.send(Err(CmError::Rejected(r)));
                    }
                    // MPA has exited; this manager has no further use for the stream.
                    self.send_core(CoreCmd::Close {
                        conn: id,
                        abort: false,
                    });
                }
                Output::Event(Event::Failed(f)) => {
                    c.chunk_pending = false;
                    self.stats.failed += 1;
                    if let Some(reply) = c.reply.take() {
                        let _ = reply.send(Err(CmError::Startup(f)));
                    }
                    // RFC 5044 8: MPA itself does not close after an error; the ULP (this
                    // manager) does, after any Terminate the machine output (graceful, so
                    // it goes out first; the core resets at the linger time).
                    self.send_core(CoreCmd::Close {
                        conn: id,
                        abort: false,
                    });
                }
            }
        }
    }
}

/// A handle to a running control thread.
#[derive(Debug)]
pub struct CmHandle {
    /// Where consumers send requests.
    pub requests: Sender<CmRequest>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CmHandle {
    /// Stops the thread and waits for it.
    pub fn shutdown(&mut self) {
        let _ = self.requests.send(CmRequest::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CmHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Runs a [`ConnectionManager`] on a new thread named `name`, serving consumer requests
/// (a channel of [`Limits::control_queue`] requests) and the events of the cores
/// commanded through `cores` (`cores[i]`: core `i`), which all report to `events`.
pub fn spawn(
    name: &str,
    cores: Vec<Sender<CoreCmd>>,
    events: Receiver<CoreEvent>,
    limits: Limits,
) -> CmHandle {
    spawn_on(name, cores, events, limits, None).expect("an unpinned thread always starts")
}

/// CPUs a Linux `cpu_set_t` holds.
const CPU_SETSIZE: usize = 1024;

/// [`spawn`], with the thread pinned to Linux CPU `cpu` when given; an error when the
/// CPU does not exist or this process may not run on it.
pub fn spawn_on(
    name: &str,
    cores: Vec<Sender<CoreCmd>>,
    events: Receiver<CoreEvent>,
    limits: Limits,
    cpu: Option<usize>,
) -> Result<CmHandle, String> {
    let (tx, rx) = channel::bounded::<CmRequest>(limits.control_queue);
    let (pinned_tx, pinned_rx) = channel::bounded::<bool>(1);
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            // A CPU number beyond a cpu_set_t must not reach CPU_SET; the kernel refuses
            // CPUs that do not exist or that this process may not use.
            let pinned = cpu.is_none_or(|id| {
                id < CPU_SETSIZE && core_affinity::set_for_current(core_affinity::CoreId { id })
            });
            let _ = pinned_tx.send(pinned);
            if pinned {
                run(ConnectionManager::with_cores(cores, limits), rx, events);
            }
        })
        .map_err(|e| format!("spawning the control thread: {e}"))?;
    if !pinned_rx.recv().unwrap_or(false) {
        let _ = thread.join();
        return Err(format!(
            "cannot pin the control thread to CPU {} (no such CPU, or not one this process may run on)",
            cpu.unwrap_or_default()
        ));
    }
    Ok(CmHandle {
        requests: tx,
        thread: Some(thread),
    })
}

fn run(mut cm: ConnectionManager, requests: Receiver<CmRequest>, events: Receiver<CoreEvent>) {
    loop {
        let now = Instant::now();
        cm.on_timeout(now);
        let flushed = cm.flush_outbox();
        let mut timeout = cm
            .poll_timeout()
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or(Duration::from_millis(100))
            .min(Duration::from_millis(100));
        if !flushed {
            // The core's channel is full: look again soon.
            timeout = timeout.min(Duration::from_micros(200));
        }
        channel::select! {
            recv(requests) -> r => match r {
                Ok(req) => {
                    if !cm.on_request(req, Instant::now()) {
                        return;
                    }
                }
                Err(_) => return,
            },
            recv(events) -> e => match e {
                Ok(ev) => cm.on_core_event(ev, Instant::now()),
                Err(_) => return,
            },
            default(timeout) => {}
        }
    }
}
