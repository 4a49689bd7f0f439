//! The poll-mode core: one thread's run-to-completion loop over one [`Port`].
//!
//! Each [`Core::poll`] does, in order:
//!
//! 1. commands from the control thread ([`CoreCmd`]): listen, connect, streaming-mode
//!    octets of the MPA startup, publication of established QPs, close;
//! 2. a receive burst: Ethernet/ARP/IPv4 ([`Net`]) → TCP ([`tcp::Connection`]) → in
//!    streaming mode the octets go to the control thread ([`CoreEvent::Data`]), in FPDU mode
//!    to the MPA [`Deframer`] and each ULPDU to the QP's DDP/RDMAP engine ([`Qp`]), which
//!    places data and makes completions;
//! 3. per QP: work requests from the consumer's rings → DDP segments of at most MULPDU
//!    octets → MPA [`Framer`] → TCP records; completions → the consumer's CQ rings;
//! 4. TCP timers and transmission of every ready segment into the port.
//!
//! Streaming mode keeps a copy of every octet received until the QP is published: the
//! control thread says at which receive stream offset FPDU mode begins
//! ([`QpPublish::rx_stream_pos`]) and the core deframes from there, so no octet that
//! arrived while the control thread was deciding is lost.

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender};
use smoltcp::time::Instant;
use smoltcp::wire::Ipv4Address;

use crate::mpa::deframe::Deframer;
use crate::mpa::fpdu::{mulpdu, Framer};
use crate::mpa::MpaErrorCode;
use crate::net::{Net, NetConfig, Rx};
use crate::port::{Port, PortStats, RxChecksum};
use crate::rdma::{
    Completion, MrTable, PostError, Qp, QpState, RecvWr, SendOp, SendWr, WcOpcode, WcStatus,
};
use crate::rdmap::TermError;
use crate::rings::{CloseReason, ConnId, CoreCmd, CoreEvent, QpPublish, QpRingState, QpRings};
use crate::tcp::{self, Accepted, Connection, FourTuple, IsnGenerator, Listener};

/// Frames taken per receive burst.
pub const RX_BURST: usize = 64;

/// First ephemeral port (RFC 6335 dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

/// Configuration of one core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Addresses of the port.
    pub net: NetConfig,
    /// TCP tunables of every connection.
    pub tcp: tcp::Config,
    /// Key of the RFC 6528 ISN generator (`None`: random).
    pub isn_key: Option<[u8; 16]>,
}

/// Counters of one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Calls of [`Core::poll`].
    pub polls: u64,
    /// TCP segments that matched no connection or listener.
    pub unmatched_segments: u64,
    /// TCP segments that failed to parse (checksum, options).
    pub bad_segments: u64,
    /// FPDUs delivered to QPs.
    pub fpdus_received: u64,
    /// FPDUs queued to TCP.
    pub fpdus_sent: u64,
    /// Segments TCP emitted that the port or ARP could not take.
    pub tx_failures: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections opened.
    pub connected: u64,
}

/// Segment-alignment counters of all connections ever run by a core (RFC 5044 5.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlignmentStats {
    /// New-data segments that started with an FPDU and held whole FPDUs.
    pub new_whole: u64,
    /// New-data segments that split an FPDU.
    pub new_split: u64,
    /// Retransmitted segments holding whole FPDUs.
    pub rtx_whole: u64,
    /// Retransmitted segments that split an FPDU.
    pub rtx_split: u64,
    /// Payload octets retransmitted.
    pub retransmitted_octets: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast retransmits.
    pub fast_retransmits: u64,
}

impl AlignmentStats {
    fn add(&mut self, s: &tcp::Stats) {
        self.new_whole += s.new_segments_whole;
        self.new_split += s.new_segments_split;
        self.rtx_whole += s.rtx_segments_whole;
        self.rtx_split += s.rtx_segments_split;
        self.retransmitted_octets += s.retransmitted_octets;
        self.timeouts += s.timeouts;
        self.fast_retransmits += s.fast_retransmits;
    }

    /// Share of new-data segments that held whole FPDUs (1.0 when there were none).
    pub fn new_whole_ratio(&self) -> f64 {
        ratio(self.new_whole, self.new_split)
    }

    /// Share of retransmitted segments that held whole FPDUs (1.0 when there were none).
    pub fn rtx_whole_ratio(&self) -> f64 {
        ratio(self.rtx_whole, self.rtx_split)
    }
}

fn ratio(whole: u64, split: u64) -> f64 {
    if whole + split == 0 {
        1.0
    } else {
        whole as f64 / (whole + split) as f64
    }
}

/// An established QP run by the core.
struct FpduConn {
    framer: Framer,
    deframer: Deframer,
    qp: Qp,
    rings: Arc<QpRings>,
    /// Reported [`CoreEvent::QpError`] already.
    error_reported: bool,
    /// Asked TCP to close after the QP failed.
    close_requested: bool,
    /// MULPDU: fixed for the connection, since data segments never carry SACK blocks
    /// and so EMSS never changes (see the tcp module docs).
    mulpdu: usize,
    /// A send work request the QP had no room for yet.
    held_send: Option<SendWr>,
    /// A receive work request the QP had no room for yet.
    held_recv: Option<RecvWr>,
    /// Completions of work requests refused at posting.
    failed: Vec<Completion>,
}

enum Phase {
    /// MPA startup: octets go to the control thread; all received octets are kept.
    Streaming { retained: Vec<u8> },
    /// Full operation.
    Fpdu(Box<FpduConn>),
}

struct Conn {
    id: ConnId,
    tcp: Connection,
    phase: Phase,
    passive: bool,
    /// Reported `Closed` (the slot is freed).
    gone: bool,
    close_reason: Option<CloseReason>,
}

/// Transmit frames queued while the port is busy receiving (ARP and ICMP replies made
/// inside the receive burst); flushed into the port right after it.
#[derive(Default)]
struct DeferredTx {
    mac: smoltcp::wire::EthernetAddress,
    mtu: usize,
    frames: Vec<Vec<u8>>,
}

impl Port for DeferredTx {
    fn mac(&self) -> smoltcp::wire::EthernetAddress {
        self.mac
    }
    fn mtu(&self) -> usize {
        self.mtu
    }
    fn rx_burst(&mut self, _max: usize, _f: &mut dyn FnMut(&[u8])) -> usize {
        0
    }
    fn tx_room(&self) -> usize {
        64usize.saturating_sub(self.frames.len())
    }
    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if self.frames.len() >= 64 || len > self.mtu + 14 {
            return false;
        }
        let mut f = vec![0; len];
        fill(&mut f);
        self.frames.push(f);
        true
    }
    fn flush(&mut self) {}
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

/// One poll-mode core.
pub struct Core {
    port: Box<dyn Port>,
    net: Net,
    cfg: CoreConfig,
    epoch: std::time::Instant,
    cmds: Receiver<CoreCmd>,
    events: Sender<CoreEvent>,
    mrs: Arc<MrTable>,
    isn: IsnGenerator,
    listeners: HashMap<u16, Listener>,
    by_tuple: HashMap<FourTuple, usize>,
    /// The connection the last received segment matched (most bursts are for one
    /// connection: this skips hashing the 4-tuple); cleared whenever a slot changes.
    last_rx: Option<(FourTuple, usize)>,
    by_id: HashMap<ConnId, usize>,
    slots: Vec<Option<Conn>>,
    next_passive: ConnId,
    next_port: u16,
    deferred: DeferredTx,
    ulpdu: Vec<u8>,
    stats: CoreStats,
    /// Yield the CPU after this many consecutive idle polls (0: never).
    idle_yield: u32,
    /// Consecutive polls that found nothing to do.
    idle_polls: u32,
    alignment_closed: AlignmentStats,
    /// `IWARP_DEBUG` set: print each QP that leaves RTS, with its Terminates, to stderr.
    trace_qp_errors: bool,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("addr", &self.cfg.net.addr)
            .field("connections", &self.by_id.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Core {
    /// A core on `port`, taking commands from `cmds` and reporting to `events`. Memory
    /// regions are looked up in `mrs`.
    pub fn new(
        cfg: CoreConfig,
        port: Box<dyn Port>,
        mrs: Arc<MrTable>,
        cmds: Receiver<CoreCmd>,
        events: Sender<CoreEvent>,
    ) -> Self {
        let isn = match cfg.isn_key {
            Some(k) => IsnGenerator::with_key(k),
            None => IsnGenerator::random(),
        };
        let next_port = EPHEMERAL_FIRST + isn.ephemeral_offset(u16::MAX - EPHEMERAL_FIRST);
        let deferred = DeferredTx {
            mac: port.mac(),
            mtu: port.mtu(),
            frames: Vec::new(),
        };
        Core {
            net: Net::new(cfg.net),
            port,
            cfg,
            epoch: std::time::Instant::now(),
            cmds,
            events,
            mrs,
            isn,
            listeners: HashMap::new(),
            by_tuple: HashMap::new(),
            last_rx: None,
            by_id: HashMap::new(),
            slots: Vec::new(),
            next_passive: 1,
            next_port,
            deferred,
            ulpdu: Vec::with_capacity(65536),
            stats: CoreStats::default(),
            idle_yield: 0,
            idle_polls: 0,
            alignment_closed: AlignmentStats::default(),
            trace_qp_errors: std::env::var_os("IWARP_DEBUG").is_some(),
        }
    }

    /// Our IPv4 address.
    pub fn addr(&self) -> Ipv4Address {
        self.cfg.net.addr
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// Port counters.
    pub fn port_stats(&self) -> PortStats {
        self.port.stats()
    }

    /// Whether the port's link is up, if the port knows ([`Port::link_up`]).
    pub fn link_up(&self) -> Option<bool> {
        self.port.link_up()
    }

    /// The port's checksum offloads.
    pub fn checksum_offload(&self) -> crate::port::ChecksumOffload {
        self.port.checksum_offload()
    }

    /// Whether the port transmits payloads without copying them
    /// ([`Port::tx_zero_copy_capable`]).
    pub fn tx_zero_copy(&self) -> bool {
        self.port.tx_zero_copy_capable()
    }

    /// Segment-alignment counters over every connection, open or closed.
    pub fn alignment(&self) -> AlignmentStats {
        let mut a = self.alignment_closed;
        for c in self.slots.iter().flatten() {
            a.add(c.tcp.stats());
        }
        a
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.by_id.len()
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// Runs one iteration of the loop. Returns a measure of the work done (0: idle).
    pub fn poll(&mut self) -> usize {
        self.stats.polls += 1;
        let now = self.now();
        let mut work = 0;
        while let Ok(cmd) = self.cmds.try_recv() {
            self.on_cmd(now, cmd);
            work += 1;
        }
        work += self.receive(now);
        for i in 0..self.slots.len() {
            work += self.service(now, i);
        }
        self.port.flush();
        if work == 0 && self.idle_yield > 0 {
            self.idle_polls += 1;
            if self.idle_polls >= self.idle_yield {
                self.idle_polls = 0;
                std::thread::yield_now();
            }
        } else {
            self.idle_polls = 0;
        }
        work
    }

    /// Makes [`Core::poll`] yield the CPU (`std::thread::yield_now`) after `polls`
    /// consecutive polls that found nothing to do; 0 (the default) never yields. For
    /// cores that share CPUs with other busy threads (the embedded two-node setup, whose
    /// peer core may be waiting for this CPU): a dedicated DPDK lcore keeps 0.
    pub fn set_idle_yield(&mut self, polls: u32) {
        self.idle_yield = polls;
        self.idle_polls = 0;
    }

    fn alloc_slot(&mut self, conn: Conn) -> usize {
        let tuple = *conn.tcp.tuple();
        let id = conn.id;
        let i = match self.slots.iter().position(|s| s.is_none()) {
            Some(i) => {
                self.slots[i] = Some(conn);
                i
            }
            None => {
                self.slots.push(Some(conn));
                self.slots.len() - 1
            }
        };
        self.by_tuple.insert(tuple, i);
        self.by_id.insert(id, i);
        self.last_rx = None;
        i
    }

    fn emit(&self, ev: CoreEvent) {
        // The control thread outlives its cores; a send error means it is shutting down.
        let _ = self.events.send(ev);
    }

    fn on_cmd(&mut self, now: Instant, cmd: CoreCmd) {
        match cmd {
            CoreCmd::Listen { port } => {
                let l = Listener::new(
                    self.cfg.tcp.clone(),
                    self.isn.clone(),
                    self.cfg.net.addr,
                    port,
                );
                self.listeners.insert(port, l);
            }
            CoreCmd::Unlisten { port } => {
                self.listeners.remove(&port);
            }
            CoreCmd::Connect { conn, remote } => self.connect(now, conn, remote),
            CoreCmd::Send { conn, bytes } => {
                if let Some(c) = self.conn_mut(conn) {
                    if c.tcp.send_fpdu(bytes).is_err() {
                        // Startup frames are small: a refusal (full, closing) means the
                        // connection is unusable. Reset it rather than drop octets; the
                        // control thread learns it from the Closed event.
                        c.tcp.abort();
                        c.close_reason = Some(CloseReason::Local);
                    }
                }
            }
            CoreCmd::Publish { conn, qp } => self.publish(conn, *qp),
            CoreCmd::Close { conn, abort } => {
                let Some(&i) = self.by_id.get(&conn) else {
                    return;
                };
                if let Some(c) = self.slots[i].as_mut() {
                    c.close_reason.get_or_insert(CloseReason::Local);
                    if abort {
                        c.tcp.abort();
                    } else {
                        // Graceful: the work the consumer queued before disconnecting goes
                        // out first (as far as the send buffer takes it), then the FIN.
                        if let Phase::Fpdu(f) = &mut c.phase {
                            run_qp(f, &mut c.tcp, &mut self.ulpdu, &mut self.stats);
                        }
                        c.tcp.close();
                    }
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::LocalCatastrophic));
                        f.close_requested = true;
                    }
                }
            }
        }
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        let i = *self.by_id.get(&id)?;
        self.slots[i].as_mut()
    }

    fn connect(&mut self, now: Instant, id: ConnId, remote: SocketAddrV4) {
        let mut tuple = FourTuple {
            local_addr: self.cfg.net.addr,
            local_port: 0,
            remote_addr: *remote.ip(),
            remote_port: remote.port(),
        };
        // An ephemeral port not in use towards this peer.
        for _ in 0..16384 {
            let p = self.next_port;
            self.next_port = if p == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            tuple.local_port = p;
            if !self.by_tuple.contains_key(&tuple) && !self.listeners.contains_key(&p) {
                break;
            }
        }
        let tcp = Connection::connect(self.cfg.tcp.clone(), tuple, &self.isn, now);
        self.stats.connected += 1;
        self.alloc_slot(Conn {
            id,
            tcp,
            phase: Phase::Streaming {
                retained: Vec::new(),
            },
            passive: false,
            gone: false,
            close_reason: None,
        });
    }

    fn publish(&mut self, id: ConnId, p: QpPublish) {
        let mrs = self.mrs.clone();
        let Some(c) = self.conn_mut(id) else {
            p.rings.set_state(QpRingState::Error);
            return;
        };
        let Phase::Streaming { retained } = &mut c.phase else {
            p.rings.set_state(QpRingState::Error);
            return;
        };
        let retained = std::mem::take(retained);
        let max_ulpdu = mulpdu(c.tcp.emss(), p.tx_mode.markers);
        let mut f = Box::new(FpduConn {
            framer: Framer::at_offset(p.tx_mode, p.tx_offset),
            deframer: Deframer::at_offset(p.rx_mode, p.rx_offset),
            qp: Qp::new(p.config, mrs),
            rings: p.rings,
            error_reported: false,
            close_requested: false,
            mulpdu: max_ulpdu,
            held_send: None,
            held_recv: None,
            failed: Vec::new(),
        });
        f.rings.set_state(QpRingState::Rts);
        // Receives posted before the connection completed must be there before the first
        // message is deframed.
        take_work_requests(&mut f);
        let start = (p.rx_stream_pos as usize).min(retained.len());
        deframe_into(&mut f, &retained[start..]);
        c.phase = Phase::Fpdu(f);
    }

    fn receive(&mut self, now: Instant) -> usize {
        let Core {
            port,
            net,
            deferred,
            by_tuple,
            last_rx,
            slots,
            listeners,
            stats,
            ..
        } = self;
        let mut accepted: Vec<Box<Connection>> = Vec::new();
        let mut resets: Vec<(FourTuple, smoltcp::wire::TcpRepr<'static>)> = Vec::new();
        let n = port.rx_burst_checked(RX_BURST, &mut |frame, verdict| {
            let Rx::Tcp { src, dst, segment } = net.on_frame(now, frame, deferred) else {
                return;
            };
            if verdict == RxChecksum::Bad {
                stats.bad_segments += 1;
                return;
            }
            let check = verdict != RxChecksum::Good;
            let Some(repr) = tcp::segment_from_bytes_with(src, dst, segment, check) else {
                stats.bad_segments += 1;
                return;
            };
            let tuple = FourTuple {
                local_addr: dst,
                local_port: repr.dst_port,
                remote_addr: src,
                remote_port: repr.src_port,
            };
            let found = match *last_rx {
                Some((t, i)) if t == tuple => Some(i),
                _ => by_tuple.get(&tuple).copied(),
            };
            if let Some(i) = found {
                *last_rx = Some((tuple, i));
                if let Some(c) = slots[i].as_mut() {
                    c.tcp.on_segment(now, &repr);
                    return;
                }
            }
            match listeners.get(&repr.dst_port) {
                Some(l) => match l.on_segment(now, src, &repr) {
                    Accepted::Connection(c) => accepted.push(c),
                    Accepted::Reset(rst) => resets.push((tuple, rst)),
                    Accepted::Drop => {}
                },
                None => {
                    stats.unmatched_segments += 1;
                    if let Some(rst) = tcp::reset_for(&repr) {
                        resets.push((tuple, rst));
                    }
                }
            }
        });
        for frame in self.deferred.frames.drain(..) {
            let len = frame.len();
            self.port.tx(len, &mut |b| b.copy_from_slice(&frame));
        }
        for (tuple, rst) in resets {
            let _ = self.net.send_tcp(now, &mut *self.port, &tuple, &rst);
        }
        for c in accepted {
            let id = self.next_passive;
            self.next_passive += 1;
            self.stats.accepted += 1;
            let tuple = *c.tuple();
            if self.by_tuple.contains_key(&tuple) {
                continue;
            }
            self.alloc_slot(Conn {
                id,
                tcp: *c,
                phase: Phase::Streaming {
                    retained: Vec::new(),
                },
                passive: true,
                gone: false,
                close_reason: None,
            });
        }
        n
    }

    /// Runs connection `i`: events, received data, QP work, transmission.
    fn service(&mut self, now: Instant, i: usize) -> usize {
        let Some(c) = self.slots[i].as_mut() else {
            return 0;
        };
        let mut work = 0;
        let mut out: Vec<CoreEvent> = Vec::new();
        let mut peer_closed = false;
        while let Some(ev) = c.tcp.poll_event() {
            work += 1;
            match ev {
                tcp::Event::Established => {
                    let tuple = *c.tcp.tuple();
                    out.push(if c.passive {
                        CoreEvent::Accepted { conn: c.id, tuple }
                    } else {
                        CoreEvent::Connected { conn: c.id, tuple }
                    });
                }
                tcp::Event::PeerClosed => match &mut c.phase {
                    Phase::Streaming { .. } => out.push(CoreEvent::PeerFin { conn: c.id }),
                    // Acted on after the octets that precede the FIN are placed (below).
                    Phase::Fpdu(_) => peer_closed = true,
                },
                tcp::Event::Reset => {
                    c.close_reason.get_or_insert(CloseReason::Reset);
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    }
                }
                tcp::Event::TimedOut => {
                    c.close_reason.get_or_insert(CloseReason::TimedOut);
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    }
                }
                tcp::Event::Closed => {
                    c.gone = true;
                }
            }
        }

        // Received octets.
        match &mut c.phase {
            Phase::Streaming { retained } => {
                let id = c.id;
                c.tcp.recv(|_, data| {
                    retained.extend_from_slice(data);
                    out.push(CoreEvent::Data {
                        conn: id,
                        bytes: data.to_vec(),
                    });
                    work += 1;
                });
            }
            Phase::Fpdu(f) => {
                let mut n = 0;
                c.tcp.recv(|_, data| {
                    n += deframe_into(f, data);
                });
                self.stats.fpdus_received += n as u64;
                work += n;
                if peer_closed {
                    c.close_reason.get_or_insert(CloseReason::PeerClosed);
                    // RFC 5044 8: a close in the middle of an FPDU, or any close the ULP
                    // did not ask for, is an LLP error for the QP; the FPDUs before the
                    // FIN have been placed and completed above.
                    f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    c.tcp.close();
                    f.close_requested = true;
                }
            }
        }

        // QP work.
        if let Phase::Fpdu(f) = &mut c.phase {
            work += run_qp(f, &mut c.tcp, &mut self.ulpdu, &mut self.stats);
            if f.qp.state() != QpState::Rts && !f.error_reported {
                f.error_reported = true;
                f.rings.set_state(QpRingState::Error);
                if self.trace_qp_errors {
                    eprintln!(
                        "qp {} (passive {}) error: sent {:?} received {:?} stats {:?}",
                        f.rings.qpn,
                        c.passive,
                        f.qp.terminate_sent(),
                        f.qp.terminate_received(),
                        f.qp.stats()
                    );
                }
                out.push(CoreEvent::QpError {
                    conn: c.id,
                    term_sent: f.qp.terminate_sent().copied(),
                    term_received: f.qp.terminate_received().copied(),
                });
            }
            if f.qp.state() == QpState::Error && !f.close_requested && !f.qp.has_tx() {
                // RFC 5040 5.? / RFC 5044: after a Terminate the stream is closed.
                f.close_requested = true;
                c.close_reason.get_or_insert(CloseReason::Local);
                c.tcp.close();
            }
        }

        // Transmit.
        if c.tcp.poll_at().is_some_and(|t| t <= now) {
            let tuple = *c.tcp.tuple();
            let room = self.port.tx_room();
            let share = self.port.tx_zero_copy_capable();
            let net = &mut self.net;
            let port = &mut *self.port;
            let stats = &mut self.stats;
            work += c
                .tcp
                .poll_transmit_records(now, room, share, |repr, record| {
                    if net
                        .send_tcp_record(now, port, &tuple, repr, record)
                        .is_err()
                    {
                        stats.tx_failures += 1;
                    }
                });
        }

        if c.gone {
            let c = self.slots[i].take().expect("slot checked above");
            self.by_tuple.remove(c.tcp.tuple());
            self.last_rx = None;
            self.by_id.remove(&c.id);
            self.alignment_closed.add(c.tcp.stats());
            if let Phase::Fpdu(f) = &c.phase {
                f.rings.set_state(QpRingState::Error);
            }
            out.push(CoreEvent::Closed {
                conn: c.id,
                reason: c.close_reason.unwrap_or(CloseReason::Local),
            });
        }
        for ev in out {
            self.emit(ev);
        }
        work
    }
}

/// Feeds in-order octets to the deframer and each ULPDU to the QP; a framing error (CRC,
/// marker) becomes the LLP error of RFC 5044 section 8. Returns the FPDUs delivered.
fn deframe_into(f: &mut FpduConn, data: &[u8]) -> usize {
    let mut n = 0;
    let FpduConn { deframer, qp, .. } = f;
    if let Err(e) = deframer.push(data, |fpdu| {
        n += 1;
        qp.on_ulpdu(fpdu.ulpdu);
    }) {
        if !matches!(e, crate::mpa::deframe::DeframeError::Stopped(_)) {
            qp.on_llp_error(TermError::Llp(e.code()));
        }
    }
    n
}

/// The completion a work request gets when the QP refuses it at posting time.
fn post_failure(qpn: u32, wr_id: u64, opcode: WcOpcode, e: PostError) -> Completion {
    Completion {
        wr_id,
        status: match e {
            PostError::BadLength => WcStatus::LocalLengthError,
            PostError::LocalProtection(_) | PostError::ReadNotAllowed => {
                WcStatus::LocalProtectionError
            }
            PostError::InvalidState | PostError::QueueFull => WcStatus::Flushed,
        },
        opcode,
        byte_len: 0,
        qpn,
        solicited: false,
        invalidated_stag: None,
        term: None,
    }
}

fn send_opcode(wr: &SendWr) -> WcOpcode {
    match wr.op {
        SendOp::Write { .. } => WcOpcode::Write,
        SendOp::Read { .. } => WcOpcode::Read,
        _ => WcOpcode::Send,
    }
}

/// Moves work requests from the consumer's rings into the QP. A request the QP cannot
/// take yet (its queue is full) waits in `held_*`; one it refuses completes in error.
fn take_work_requests(f: &mut FpduConn) -> usize {
    let mut work = 0;
    let qpn = f.rings.qpn;
    while let Some(wr) = f.held_recv.take().or_else(|| f.rings.rq.pop()) {
        work += 1;
        match f.qp.post_recv(wr) {
            Ok(()) => {}
            Err(PostError::QueueFull) => {
                f.held_recv = Some(wr);
                break;
            }
            Err(e) => f
                .failed
                .push(post_failure(qpn, wr.wr_id, WcOpcode::Recv, e)),
        }
    }
    while let Some(wr) = f.held_send.take().or_else(|| f.rings.sq.pop()) {
        work += 1;
        match f.qp.post_send(wr) {
            Ok(()) => {}
            Err(PostError::QueueFull) => {
                f.held_send = Some(wr);
                break;
            }
            Err(e) => f
                .failed
                .push(post_failure(qpn, wr.wr_id, send_opcode(&wr), e)),
        }
    }
    work
}

/// Moves work requests from the rings into the QP, ULPDUs from the QP into TCP as FPDUs,
/// and completions into the CQ rings.
fn run_qp(
    f: &mut FpduConn,
    tcp: &mut Connection,
    ulpdu: &mut Vec<u8>,
    stats: &mut CoreStats,
) -> usize {
    let mut work = take_work_requests(f);
    let max = f.mulpdu;
    while f.qp.has_tx() && tcp.send_space() >= f.framer.wire_len(max) {
        // The record is built in a recycled buffer. Without markers the QP writes the
        // ULPDU straight into it after room for the ULPDU_Length field and the framer
        // finishes it in place; with markers the ULPDU is framed from a copy.
        let mut rec = tcp.take_buffer();
        let framed = if f.framer.mode().markers {
            ulpdu.clear();
            if !f.qp.poll_ulpdu(max, ulpdu) {
                break;
            }
            rec.reserve(f.framer.wire_len(ulpdu.len()));
            f.framer.frame(ulpdu, &mut rec).map(|()| true)
        } else {
            rec.reserve(f.framer.wire_len(max));
            rec.extend_from_slice(&[0; Framer::IN_PLACE_HEADROOM]);
            if !f.qp.poll_ulpdu(max, &mut rec) {
                break;
            }
            f.framer.frame_in_place(&mut rec, 0)
        };
        if !matches!(framed, Ok(true)) {
            f.qp.on_llp_error(TermError::Llp(MpaErrorCode::LocalCatastrophic));
            break;
        }
        if tcp.send_fpdu(rec).is_err() {
            // Room was checked; a refusal means TCP is closing. The QP learns it from the
            // TCP events.
            break;
        }
        stats.fpdus_sent += 1;
        work += 1;
    }
    loop {
        let cq = |c: &Completion| {
            if c.opcode == WcOpcode::Recv {
                &f.rings.recv_cq
            } else {
                &f.rings.send_cq
            }
        };
        // Both CQs must have room before a completion is taken out of the QP.
        if f.rings.send_cq.is_full() || f.rings.recv_cq.is_full() {
            break;
        }
        let Some(c) = f.failed.pop().or_else(|| f.qp.poll_completion()) else {
            break;
        };
        let _ = cq(&c).push(c);
        work += 1;
    }
    work
}
