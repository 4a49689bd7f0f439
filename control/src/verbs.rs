//! The consumer's verbs-style API: device, protection domain, memory region, completion
//! queue, queue pair, connect/listen/accept.
//!
//! Data-path calls ([`QueuePair::post_send`], [`QueuePair::post_recv`], [`Cq::poll`]) are
//! pushes and pops on lock-free rings shared with the poll-mode core: no locks, no system
//! calls. Connection management goes to the control thread ([`crate::cm`]) and answers
//! through [`Pending`] handles, which never block the caller unless asked to
//! ([`Pending::wait`]), so a consumer that drives its core itself ([`Core::poll`]) in the
//! same thread can set up connections too.
//!
//! ```no_run
//! # use control::verbs::*;
//! # use proto::qp::Access;
//! # fn demo(dev: &Device) -> Result<(), Box<dyn std::error::Error>> {
//! let pd = dev.alloc_pd();
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let cq = dev.create_cq(256);
//! let qp = pd.create_qp(&QpInit::new(&cq, &cq));
//! let info = dev
//!     .connect(&qp, "10.0.0.2:4791".parse()?, Default::default())
//!     .wait()?;
//! # let _ = (mr, info); Ok(()) }
//! ```

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, RecvTimeoutError, TryRecvError, TrySendError};
pub use dataplane::lcore::steer::Steering;
pub use dataplane::lcore::{AlignmentStats, Core, CoreConfig, CoreGauges, CoreStats};
pub use dataplane::limits::Limits;
use dataplane::port::Port;
pub use dataplane::port::PortStats;
pub use dataplane::rings::{conn_core, ConnId, QpRingState, Terminates};
use dataplane::rings::{CqRing, QpRings};
pub use proto::qp::{
    Access, Completion, MemoryRegion, MrError, MrTable, RecvWr, RegionMemory, SendOp, SendWr, Sge,
    WcOpcode, WcStatus,
};

use crate::cm::{self, CmHandle, CmRequest, QpSpec};
pub use crate::cm::{CmError, ConnInfo, ConnRequest};
pub use proto::rtr::{RtrType, RtrTypes};
pub use proto::startup::{AcceptParams, InitiatorConfig, ResponderConfig};

struct DeviceInner {
    mrs: Arc<MrTable>,
    /// Where [`Pd::reg_mr`] takes region memory from, when not from the process heap.
    regions: std::sync::OnceLock<RegionAllocator>,
    cm: Mutex<CmHandle>,
    requests: channel::Sender<CmRequest>,
    next_pd: AtomicU32,
    limits: Limits,
}

/// Allocates the memory of a region of `len` octets for [`Pd::reg_mr`] (zeroed); the
/// error says why it could not (the registration then fails with
/// [`MrError::AllocFailed`]).
pub type RegionAllocator = Arc<dyn Fn(usize) -> Result<RegionMemory, String> + Send + Sync>;

/// How long a request that must not be lost (reject, disconnect, unlisten) waits for room
/// in the control thread's queue.
const MUST_DELIVER: Duration = Duration::from_secs(5);

/// An iWARP device: its cores (each with its queue pair of the port and its TCP, MPA,
/// DDP and RDMAP engines) and its control thread. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").finish_non_exhaustive()
    }
}

/// Opens a device on `port`: starts its control thread and returns the device with its
/// [`Core`]. The caller runs the core: on a thread of its own (`loop { core.poll(); }`,
/// see [`spawn_core`]) or interleaved with its own work in the same thread.
///
/// Every channel between the consumer, the control thread and the core holds at most
/// [`Limits::control_queue`] messages (`cfg.limits`).
pub fn open(cfg: CoreConfig, port: Box<dyn Port>) -> (Device, Core) {
    let (dev, mut cores) = open_group(vec![(cfg, port)], None);
    let core = cores.pop().expect("one core for one port");
    (dev, core)
}

/// Opens a device of several share-nothing cores, one per element of `cores` (its
/// configuration and its queue pair of the device), joined in one group by `steering`
/// (one [`Steering`] per core, in the same order: see
/// [`dataplane::lcore::steer`]), with one control thread. Core `i` gets
/// `steering[i]`; `None` (one core) needs none. Every core runs on a thread of its own
/// ([`spawn_core`]); the [`Limits`] are those of the first core's configuration.
///
/// # Panics
/// If `cores` is empty, or `steering` does not give one entry per core.
pub fn open_group(
    cores: Vec<(CoreConfig, Box<dyn Port>)>,
    steering: Option<Vec<Steering>>,
) -> (Device, Vec<Core>) {
    open_group_on(cores, steering, None).expect("an unpinned control thread always starts")
}

/// [`open_group`] with the control thread pinned to Linux CPU `control_cpu` when given
/// (a deployment's `[control] cpu`); an error when it cannot be.
pub fn open_group_on(
    cores: Vec<(CoreConfig, Box<dyn Port>)>,
    steering: Option<Vec<Steering>>,
    control_cpu: Option<usize>,
) -> Result<(Device, Vec<Core>), String> {
    assert!(!cores.is_empty(), "a device needs a core");
    if let Some(s) = &steering {
        assert_eq!(s.len(), cores.len(), "one Steering per core");
    }
    let limits = cores[0].0.limits;
    let mrs = Arc::new(MrTable::new());
    let (ev_tx, ev_rx) = channel::bounded(limits.control_queue);
    let mut senders = Vec::with_capacity(cores.len());
    let mut steering = steering.map(Vec::into_iter);
    let cores: Vec<Core> = cores
        .into_iter()
        .map(|(cfg, port)| {
            let (cmd_tx, cmd_rx) = channel::bounded(limits.control_queue);
            senders.push(cmd_tx);
            let mut core = Core::new(cfg, port, mrs.clone(), cmd_rx, ev_tx.clone());
            if let Some(s) = steering.as_mut().and_then(Iterator::next) {
                core.set_steering(s);
            }
            core
        })
        .collect();
    let handle = cm::spawn_on("iwarp-control", senders, ev_rx, limits, control_cpu)?;
    let requests = handle.requests.clone();
    let dev = Device {
        inner: Arc::new(DeviceInner {
            mrs,
            regions: std::sync::OnceLock::new(),
            cm: Mutex::new(handle),
            requests,
            next_pd: AtomicU32::new(1),
            limits,
        }),
    };
    Ok((dev, cores))
}

/// A core running on its own thread; [`CoreThread::stop`] (or drop) ends it and gives
/// the core back.
#[derive(Debug)]
pub struct CoreThread {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Core>>,
}

/// Runs `core` on a new thread, polling until [`CoreThread::stop`].
pub fn spawn_core(mut core: Core) -> CoreThread {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("iwarp-core".into())
        .spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if core.poll() == 0 {
                    std::hint::spin_loop();
                }
            }
            core
        })
        .expect("spawning the core thread");
    CoreThread {
        stop,
        thread: Some(thread),
    }
}

impl CoreThread {
    /// Stops the thread and returns the core (for its statistics).
    pub fn stop(mut self) -> Option<Core> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for CoreThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The answer to a connection request, when it comes. Every request is answered within
/// a bound the device's [`Limits`] set (a connection is up or reset within
/// [`Limits::startup_timeout`], closed or reset within [`Limits::linger`]), while its core
/// runs: [`Pending::wait`] gives up a little after that bound.
#[derive(Debug)]
pub struct Pending<T> {
    rx: Receiver<Result<T, CmError>>,
    /// How long [`Pending::wait`] waits at most.
    bound: Duration,
}

impl<T> Pending<T> {
    /// The answer if it has come.
    pub fn try_get(&self) -> Option<Result<T, CmError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(CmError::Shutdown)),
        }
    }

    /// Waits for the answer, at most the request's bound (then [`CmError::TimedOut`]: the
    /// core is not running, or the control thread is stuck).
    pub fn wait(self) -> Result<T, CmError> {
        match self.rx.recv_timeout(self.bound) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(CmError::TimedOut(self.bound)),
            Err(RecvTimeoutError::Disconnected) => Err(CmError::Shutdown),
        }
    }

    /// Waits at most `timeout`; `None` if the answer has not come.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<T, CmError>> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(CmError::Shutdown)),
        }
    }

    /// Runs `core` until the answer comes (or `timeout` passes): for consumers that drive
    /// their core in their own thread.
    pub fn poll_with(&self, core: &mut Core, timeout: Duration) -> Option<Result<T, CmError>> {
        let end = Instant::now() + timeout;
        loop {
            core.poll();
            if let Some(r) = self.try_get() {
                return Some(r);
            }
            if Instant::now() >= end {
                return None;
            }
        }
    }
}

impl Device {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Pd {
        Pd {
            id: self.inner.next_pd.fetch_add(1, Ordering::Relaxed),
            dev: self.clone(),
        }
    }

    /// Creates a completion queue with room for `depth` completions.
    pub fn create_cq(&self, depth: usize) -> Cq {
        Cq {
            ring: Arc::new(CqRing::new(depth)),
        }
    }

    /// The device's memory-region table.
    pub fn mr_table(&self) -> &Arc<MrTable> {
        &self.inner.mrs
    }

    /// Makes [`Pd::reg_mr`] take region memory from `alloc` (a deployment on DPDK gives
    /// DPDK's heap: hugepages when EAL has them) instead of page-aligned memory of the
    /// process heap. Set once; false (and `alloc` unused) if one was set already.
    pub fn set_region_allocator(&self, alloc: RegionAllocator) -> bool {
        self.inner.regions.set(alloc).is_ok()
    }

    /// The caps and timeouts of the device.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Queues a request for the control thread; refused with [`CmError::Busy`] when its
    /// queue is full.
    fn try_request(&self, r: CmRequest) -> Result<(), CmError> {
        match self.inner.requests.try_send(r) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(CmError::Busy("the control thread's queue is full")),
            Err(TrySendError::Disconnected(_)) => Err(CmError::Shutdown),
        }
    }

    /// Queues a request that must not be lost, waiting a bounded time for room.
    fn request(&self, r: CmRequest) {
        let _ = self.inner.requests.send_timeout(r, MUST_DELIVER);
    }

    /// Connects `qp` to `remote` as MPA Initiator (RFC 5044 7.1, RFC 6581). The answer
    /// comes when the connection is in Full Operation (or failed); within
    /// [`Limits::startup_timeout`] of the connect while the core runs. [`CmError::Busy`]
    /// when the control plane has no room for another connection now.
    pub fn connect(
        &self,
        qp: &QueuePair,
        remote: SocketAddrV4,
        cfg: InitiatorConfig,
    ) -> Pending<ConnInfo> {
        self.connect_from(None, qp, remote, cfg)
    }

    /// [`Device::connect`] from core `core` of the device (its index; `None`: the control
    /// thread spreads connections over the cores in turn). The connection, and so the
    /// QP's work, lives on that core from SYN to close. A core the device does not have
    /// fails with [`CmError::NoSuchCore`].
    pub fn connect_from(
        &self,
        core: Option<usize>,
        qp: &QueuePair,
        remote: SocketAddrV4,
        cfg: InitiatorConfig,
    ) -> Pending<ConnInfo> {
        let (tx, rx) = channel::bounded(1);
        if let Err(e) = self.try_request(CmRequest::Connect {
            remote,
            core,
            qp: qp.spec(),
            config: Box::new(cfg),
            reply: tx.clone(),
        }) {
            let _ = tx.send(Err(e));
        }
        Pending {
            rx,
            bound: self.startup_bound(),
        }
    }

    /// How long a startup may take, with a margin for the control thread.
    fn startup_bound(&self) -> Duration {
        self.inner.limits.startup_timeout + Duration::from_secs(1)
    }

    /// Listens on TCP port `port` as MPA Responder. At most [`Limits::listener_queue`]
    /// connection requests wait for [`Listener::accept`] or [`Listener::reject`]; more
    /// are rejected by the control thread ("listener queue full").
    pub fn listen(&self, port: u16, cfg: ResponderConfig) -> Result<Listener, CmError> {
        let (tx, rx) = channel::bounded(1);
        let (req_tx, req_rx) = channel::bounded(self.inner.limits.listener_queue);
        self.try_request(CmRequest::Listen {
            port,
            config: Box::new(cfg),
            requests: req_tx,
            reply: tx,
        })?;
        rx.recv_timeout(MUST_DELIVER)
            .unwrap_or(Err(CmError::Shutdown))?;
        Ok(Listener {
            port,
            requests: req_rx,
            dev: self.clone(),
        })
    }

    /// Closes the connection `conn` gracefully: queued work goes out first, then a FIN;
    /// the QP flushes. The answer comes when the connection is gone from its core (both
    /// FINs acknowledged, or reset at [`Limits::linger`]); a process should wait for it
    /// before it exits, so that the peer's FIN is acknowledged.
    pub fn disconnect(&self, conn: ConnId) -> Pending<()> {
        let (tx, rx) = channel::bounded(1);
        self.request(CmRequest::Disconnect {
            conn,
            reply: Some(tx),
        });
        Pending {
            rx,
            bound: self.inner.limits.linger + Duration::from_secs(1),
        }
    }

    /// Stops the control thread. Called when the last handle is dropped.
    pub fn shutdown(&self) {
        if let Ok(mut h) = self.inner.cm.lock() {
            h.shutdown();
        }
    }
}

/// A listening TCP port.
#[derive(Debug)]
pub struct Listener {
    port: u16,
    requests: Receiver<ConnRequest>,
    dev: Device,
}

impl Listener {
    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection request, if one is waiting.
    pub fn try_next(&self) -> Option<ConnRequest> {
        if self.requests.is_empty() {
            return None;
        }
        self.requests.try_recv().ok()
    }

    /// Waits at most `timeout` for the next connection request.
    pub fn next_timeout(&self, timeout: Duration) -> Option<ConnRequest> {
        self.requests.recv_timeout(timeout).ok()
    }

    /// Accepts a request with `qp`; the answer comes when the connection is in Full
    /// Operation (for a client-server Responder: when the Initiator's first FPDU arrived,
    /// RFC 5044 7.1.2 rule 4; so post receives first).
    pub fn accept(
        &self,
        req: &ConnRequest,
        qp: &QueuePair,
        params: AcceptParams,
    ) -> Pending<ConnInfo> {
        let (tx, rx) = channel::bounded(1);
        if let Err(e) = self.dev.try_request(CmRequest::Accept {
            conn: req.conn,
            qp: qp.spec(),
            params,
            reply: tx.clone(),
        }) {
            let _ = tx.send(Err(e));
        }
        Pending {
            rx,
            bound: self.dev.startup_bound(),
        }
    }

    /// Rejects a request with private data (MPA Reply with R = 1).
    pub fn reject(&self, req: &ConnRequest, private_data: Vec<u8>) {
        self.dev.request(CmRequest::Reject {
            conn: req.conn,
            private_data,
        });
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.dev.request(CmRequest::Unlisten { port: self.port });
    }
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct Pd {
    id: u32,
    dev: Device,
}

/// A registered memory region; deregistered when dropped.
#[derive(Debug)]
pub struct Mr {
    region: Arc<MemoryRegion>,
    table: Arc<MrTable>,
}

impl std::ops::Deref for Mr {
    type Target = MemoryRegion;
    fn deref(&self) -> &MemoryRegion {
        &self.region
    }
}

impl Mr {
    /// The STag (local and remote key).
    pub fn key(&self) -> u32 {
        self.region.stag()
    }

    /// An SGE covering `len` octets at offset `off` of this region.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            stag: self.region.stag(),
            to: self.region.base_to() + off,
            len,
        }
    }

    /// The shared region.
    pub fn region(&self) -> &Arc<MemoryRegion> {
        &self.region
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.table.deregister(self.region.stag());
        // Whatever the table said: once the Mr is gone no copy touches the memory (a
        // consumer's own buffer is its own again).
        self.region.revoke();
    }
}

/// A fresh base TO for a region of `len` octets: distinct, page-aligned base TOs make a
/// wrong STag/TO pair visible.
fn next_base_to(len: usize) -> u64 {
    static NEXT_BASE: std::sync::atomic::AtomicU64 =
        std::sync::atomic::AtomicU64::new(0x1_0000_0000);
    let span = (len as u64).div_ceil(4096).max(1) * 4096 + 4096;
    NEXT_BASE.fetch_add(span, Ordering::Relaxed)
}

/// How to build a QP.
#[derive(Debug, Clone)]
pub struct QpInit {
    /// Where send-side completions go.
    pub send_cq: Arc<CqRing>,
    /// Where receive completions go.
    pub recv_cq: Arc<CqRing>,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
    /// IRD and ORD when MPA does not negotiate them.
    pub default_ird_ord: (u16, u16),
}

impl QpInit {
    /// Depths of 1024 work requests, IRD/ORD 16.
    pub fn new(send_cq: &Cq, recv_cq: &Cq) -> Self {
        QpInit {
            send_cq: send_cq.ring.clone(),
            recv_cq: recv_cq.ring.clone(),
            max_send_wr: 1024,
            max_recv_wr: 1024,
            default_ird_ord: (16, 16),
        }
    }
}

impl Pd {
    /// The PD number.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Registers `len` zeroed octets with `access`: page-aligned memory of the process
    /// heap, or of the device's allocator ([`Device::set_region_allocator`]: DPDK's
    /// heap on a DPDK deployment). The region's TO range starts at a fresh base address.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr, MrError> {
        let table = self.dev.inner.mrs.clone();
        let base = next_base_to(len);
        let region = match self.dev.inner.regions.get() {
            Some(alloc) => {
                // MrError has no room for the allocator's reason; the caller learns that
                // memory could not be had (AllocFailed), as with the process heap.
                let mem = alloc(len).map_err(|_| MrError::AllocFailed)?;
                if mem.len() != len {
                    return Err(MrError::AllocFailed);
                }
                table.register_memory(self.id, base, mem, access)?
            }
            None => table.register(self.id, base, len, access)?,
        };
        Ok(Mr { region, table })
    }

    /// Registers `mem` with `access`, as `ibv_reg_mr` registers a buffer: memory we
    /// allocate ([`RegionMemory::allocate`]), a buffer handed over
    /// ([`RegionMemory::from_boxed`]), or the consumer's own buffer registered in place
    /// ([`RegionMemory::from_raw_parts`], whose contract is the caller's: the buffer stays
    /// alive and unmoved until the [`Mr`] is dropped, which waits for any copy in progress
    /// before it returns). The region's TO range starts at a fresh base address.
    pub fn reg_mr_memory(&self, mem: RegionMemory, access: Access) -> Result<Mr, MrError> {
        let table = self.dev.inner.mrs.clone();
        let base = next_base_to(mem.len());
        let region = table.register_memory(self.id, base, mem, access)?;
        Ok(Mr { region, table })
    }

    /// Creates a QP.
    pub fn create_qp(&self, init: &QpInit) -> QueuePair {
        // QP numbers are unique in the process, so two devices' QPs are told apart.
        static NEXT_QPN: AtomicU32 = AtomicU32::new(1);
        let qpn = NEXT_QPN.fetch_add(1, Ordering::Relaxed);
        QueuePair {
            rings: Arc::new(QpRings::new(
                qpn,
                init.max_send_wr,
                init.max_recv_wr,
                init.send_cq.clone(),
                init.recv_cq.clone(),
            )),
            pd: self.id,
            init: init.clone(),
        }
    }
}

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    ring: Arc<CqRing>,
}

impl Cq {
    /// Takes up to `max` completions into `out`; returns how many.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        // One burst: one lock and one index update for all of them.
        self.ring.pop_burst(max, |c| {
            out.push(c);
            true
        })
    }

    /// Takes one completion.
    pub fn poll_one(&self) -> Option<Completion> {
        self.ring.pop()
    }

    /// The shared ring.
    pub fn ring(&self) -> &Arc<CqRing> {
        &self.ring
    }
}

/// Why a work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The queue is full.
    QueueFull,
    /// The QP is in error.
    QpError,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PostError::QueueFull => "work queue full",
            PostError::QpError => "QP in error state",
        })
    }
}

impl std::error::Error for PostError {}

/// A queue pair.
#[derive(Debug, Clone)]
pub struct QueuePair {
    rings: Arc<QpRings>,
    pd: u32,
    init: QpInit,
}

impl QueuePair {
    fn spec(&self) -> QpSpec {
        QpSpec {
            rings: self.rings.clone(),
            pd: self.pd,
            max_send_wr: self.init.max_send_wr,
            max_recv_wr: self.init.max_recv_wr,
            default_ird_ord: self.init.default_ird_ord,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.rings.qpn
    }

    /// Where the QP is.
    pub fn state(&self) -> QpRingState {
        self.rings.state()
    }

    /// Once the QP is in error: the Terminate it sent and the one it received (RFC 5040
    /// 6.1), either of which may be absent. `None` while the QP is not in error.
    pub fn terminates(&self) -> Option<Terminates> {
        self.rings.terminates()
    }

    /// Posts a send-queue work request (Send, RDMA Write, RDMA Read) and rings the core.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        if self.rings.state() == QpRingState::Error {
            return Err(PostError::QpError);
        }
        self.rings.post_send(wr).map_err(|_| PostError::QueueFull)
    }

    /// Posts `wrs` in order with one doorbell for all of them (a post list), as far as
    /// the send queue takes them; returns how many were posted ([`PostError::QueueFull`]
    /// when none was).
    pub fn post_send_list(&self, wrs: &[SendWr]) -> Result<usize, PostError> {
        self.post_list(wrs.len(), || self.rings.post_send_list(wrs))
    }

    /// Posts receive buffers `wrs` in order with one doorbell for all of them (a post
    /// list, as `ibv_post_recv` takes a chain), as far as the receive queue takes them;
    /// returns how many were posted ([`PostError::QueueFull`] when none was).
    pub fn post_recv_list(&self, wrs: &[RecvWr]) -> Result<usize, PostError> {
        self.post_list(wrs.len(), || self.rings.post_recv_list(wrs))
    }

    /// A post list of `len` requests that `post` queues: refused on a QP in error,
    /// [`PostError::QueueFull`] when none was taken, else how many were.
    fn post_list(&self, len: usize, post: impl FnOnce() -> usize) -> Result<usize, PostError> {
        if self.rings.state() == QpRingState::Error {
            return Err(PostError::QpError);
        }
        match post() {
            0 if len > 0 => Err(PostError::QueueFull),
            n => Ok(n),
        }
    }

    /// Posts a receive buffer and rings the core.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        if self.rings.state() == QpRingState::Error {
            return Err(PostError::QpError);
        }
        self.rings.post_recv(wr).map_err(|_| PostError::QueueFull)
    }
}
