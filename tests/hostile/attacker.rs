//! A hostile host on the in-memory wire: its own address and MAC on node A's port, its own
//! TCP (the dataplane's sans-IO engine, which it drives as it pleases: never reading,
//! never acknowledging), raw SYNs from any port or address, and an MPA Initiator
//! (control's sans-IO machine) for attacks that need Full Operation.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant as StdInstant;

use dataplane::net::{Net, NetConfig, Rx};
use dataplane::port::{Port, PortStats};
use proto::startup::{Established, Event, Initiator, InitiatorConfig, Output};
use proto::tcp::{self, Connection, FourTuple, IsnGenerator, State};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, EthernetFrame, Ipv4Address, TcpControl, TcpSeqNumber};
use wire::mpa::deframe::Deframer;
use wire::mpa::fpdu::Framer;
use wire::rdmap::{self, Terminate};

/// The attacker's address on node A's link.
pub const ATTACKER: Ipv4Address = Ipv4Address::new(10, 77, 0, 3);
/// Its MAC.
pub const ATTACKER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x66, 0x03]);

/// Frames between node A's port and the attacker.
#[derive(Default)]
pub struct Tap {
    to_attacker: Mutex<VecDeque<Vec<u8>>>,
    from_attacker: Mutex<VecDeque<Vec<u8>>>,
    /// The attacker's frames the wire had no room for (dropped, as a full link would).
    pub dropped: std::sync::atomic::AtomicU64,
}

/// Node A's port with the attacker spliced in: frames for the attacker's MAC go to it,
/// broadcasts to both, the attacker's frames onto the wire.
pub struct TapPort {
    pub inner: Box<dyn Port>,
    pub tap: Arc<Tap>,
}

impl TapPort {
    fn inject(&mut self) {
        let frames: Vec<Vec<u8>> = self.tap.from_attacker.lock().unwrap().drain(..).collect();
        for f in frames {
            let len = f.len();
            if !self.inner.tx(len, &mut |b| b.copy_from_slice(&f)) {
                self.tap
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

impl Port for TapPort {
    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        self.inject();
        let tap = self.tap.clone();
        self.inner.rx_burst(max, &mut |frame| {
            let dst = EthernetFrame::new_checked(frame)
                .map(|e| e.dst_addr())
                .unwrap_or(EthernetAddress::BROADCAST);
            if dst == ATTACKER_MAC || dst.is_broadcast() {
                tap.to_attacker.lock().unwrap().push_back(frame.to_vec());
            }
            if dst != ATTACKER_MAC {
                f(frame);
            }
        })
    }
    fn tx_room(&self) -> usize {
        self.inner.tx_room()
    }
    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.inner.tx(len, fill)
    }
    fn flush(&mut self) {
        self.inject();
        self.inner.flush();
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
}

/// Where the attacker's Net writes frames.
struct QueuePort {
    tap: Arc<Tap>,
}

impl Port for QueuePort {
    fn mac(&self) -> EthernetAddress {
        ATTACKER_MAC
    }
    fn mtu(&self) -> usize {
        1500
    }
    fn rx_burst(&mut self, _max: usize, _f: &mut dyn FnMut(&[u8])) -> usize {
        0
    }
    fn tx_room(&self) -> usize {
        usize::MAX
    }
    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut f = vec![0u8; len];
        fill(&mut f);
        self.tap.from_attacker.lock().unwrap().push_back(f);
        true
    }
    fn flush(&mut self) {}
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

/// The MPA layer of an attacker connection.
pub enum Mpa {
    /// No MPA: raw octets.
    None,
    /// Startup in progress.
    Starting(Box<Initiator>),
    /// Full Operation: frame and deframe FPDUs.
    Fpdu {
        framer: Framer,
        deframer: Deframer,
        established: Box<Established>,
    },
    /// The startup ended without Full Operation.
    Failed(String),
}

/// One attacker connection.
pub struct Peer {
    pub tcp: Connection,
    /// Take received octets (else the receive window closes).
    pub reading: bool,
    /// Transmit nothing at all (no data, no ACKs).
    pub muted: bool,
    pub mpa: Mpa,
    /// Received octets (raw, or ULPDUs' octets in FPDU mode are not kept here).
    pub rx: Vec<u8>,
    pub events: Vec<tcp::Event>,
    /// Terminates received in FPDU mode.
    pub terms: Vec<Terminate>,
    /// ULPDUs received in FPDU mode.
    pub ulpdus: usize,
    /// A RST arrived.
    pub reset: bool,
}

/// Counters of what the attacker saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    pub syn_acks: u64,
    pub rsts: u64,
    pub frames: u64,
}

/// The attacker host.
pub struct Attacker {
    tap: Arc<Tap>,
    net: Net,
    port: QueuePort,
    isn: IsnGenerator,
    pub peers: HashMap<FourTuple, Peer>,
    next_port: u16,
    epoch: StdInstant,
    pub seen: Seen,
    /// SYNs [`Attacker::syn`] put on the wire.
    pub syns_sent: u64,
    cfg: tcp::Config,
}

impl Attacker {
    pub fn new(tap: Arc<Tap>) -> Attacker {
        let net = Net::new(NetConfig {
            mac: ATTACKER_MAC,
            addr: ATTACKER,
            prefix_len: 24,
            gateway: None,
            mtu: 1500,
        });
        Attacker {
            port: QueuePort { tap: tap.clone() },
            tap,
            net,
            isn: IsnGenerator::with_key([0x66; 16]),
            peers: HashMap::new(),
            next_port: 20000,
            epoch: StdInstant::now(),
            seen: Seen::default(),
            syns_sent: 0,
            cfg: control::embedded::tcp_config(1500),
        }
    }

    pub fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    fn port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p >= 65000 { 20000 } else { p + 1 };
        p
    }

    /// A raw SYN from `src:port` to `dst` (nothing kept: a flood). `src` may be spoofed.
    pub fn syn(&mut self, src: Ipv4Address, dst: std::net::SocketAddrV4) {
        let now = self.now();
        let port = self.port();
        let tuple = FourTuple {
            local_addr: src,
            local_port: port,
            remote_addr: *dst.ip(),
            remote_port: dst.port(),
        };
        let mut syn = smoltcp::wire::TcpRepr {
            src_port: port,
            dst_port: dst.port(),
            control: TcpControl::Syn,
            seq_number: TcpSeqNumber(port as i32 * 7919),
            ack_number: None,
            window_len: 65535,
            window_scale: Some(7),
            max_seg_size: Some(1460),
            sack_permitted: true,
            sack_ranges: [None; 3],
            timestamp: Some(smoltcp::wire::TcpTimestampRepr::new(1, 0)),
            payload: &[],
        };
        syn.timestamp = Some(smoltcp::wire::TcpTimestampRepr::new(port as u32, 0));
        // Counted only when the attacker's stack takes it (it refuses some during the
        // flood: see the syn-flood test).
        if self.net.send_tcp(now, &mut self.port, &tuple, &syn).is_ok() {
            self.syns_sent += 1;
        }
    }

    /// Opens a TCP connection to `dst` (driven by `poll`).
    pub fn connect(&mut self, dst: std::net::SocketAddrV4) -> FourTuple {
        let now = self.now();
        let port = self.port();
        let tuple = FourTuple {
            local_addr: ATTACKER,
            local_port: port,
            remote_addr: *dst.ip(),
            remote_port: dst.port(),
        };
        let tcp = Connection::connect(self.cfg.clone(), tuple, &self.isn, now);
        self.peers.insert(
            tuple,
            Peer {
                tcp,
                reading: true,
                muted: false,
                mpa: Mpa::None,
                rx: Vec::new(),
                events: Vec::new(),
                terms: Vec::new(),
                ulpdus: 0,
                reset: false,
            },
        );
        tuple
    }

    /// Starts an MPA Initiator on an established connection.
    pub fn start_mpa(&mut self, t: FourTuple, cfg: InitiatorConfig) {
        let now = std::time::Instant::now();
        let m = Initiator::new(cfg, now).expect("valid initiator config");
        if let Some(p) = self.peers.get_mut(&t) {
            p.mpa = Mpa::Starting(Box::new(m));
        }
        self.drive_mpa(t);
    }

    fn drive_mpa(&mut self, t: FourTuple) {
        let Some(p) = self.peers.get_mut(&t) else {
            return;
        };
        let Mpa::Starting(m) = &mut p.mpa else {
            return;
        };
        let mut next = None;
        while let Some(o) = m.poll_output() {
            match o {
                Output::Send(b) => {
                    let _ = p.tcp.send_fpdu(b);
                }
                Output::Close => p.tcp.close(),
                Output::Event(Event::Established(e)) => {
                    next = Some(Mpa::Fpdu {
                        framer: Framer::at_offset(e.tx_mode, e.tx_offset),
                        deframer: Deframer::at_offset(e.rx_mode, e.rx_offset),
                        established: e,
                    });
                }
                Output::Event(Event::ReplyReceived(_)) => {
                    let _ = m.confirm();
                }
                Output::Event(Event::Rejected(r)) => {
                    next = Some(Mpa::Failed(format!(
                        "rejected: {}",
                        String::from_utf8_lossy(&r.reply.private_data)
                    )));
                }
                Output::Event(Event::Failed(f)) => next = Some(Mpa::Failed(f.error.to_string())),
                Output::Event(_) => {}
            }
        }
        if let Some(n) = next {
            let pending = match &n {
                Mpa::Fpdu { established, .. } => established.rx_pending.clone(),
                _ => Vec::new(),
            };
            p.mpa = n;
            if !pending.is_empty() {
                Self::deframe(p, &pending);
            }
        }
    }

    fn deframe(p: &mut Peer, data: &[u8]) {
        if let Mpa::Fpdu { deframer, .. } = &mut p.mpa {
            let mut terms = Vec::new();
            let mut n = 0;
            let _ = deframer.push(data, |f| {
                n += 1;
                if let Ok(rdmap::Segment {
                    body: rdmap::Body::Terminate { terminate, .. },
                    ..
                }) = rdmap::parse_segment(f.ulpdu)
                {
                    terms.push(terminate);
                }
            });
            p.ulpdus += n;
            p.terms.extend(terms);
        }
    }

    /// Frames a ULPDU and queues it on connection `t` (FPDU mode).
    pub fn send_ulpdu(&mut self, t: FourTuple, ulpdu: &[u8]) -> bool {
        let Some(p) = self.peers.get_mut(&t) else {
            return false;
        };
        let Mpa::Fpdu { framer, .. } = &mut p.mpa else {
            return false;
        };
        let mut out = Vec::new();
        if framer.frame(ulpdu, &mut out).is_err() {
            return false;
        }
        p.tcp.send_fpdu(out).is_ok()
    }

    /// Raw octets on connection `t`.
    pub fn send_raw(&mut self, t: FourTuple, bytes: Vec<u8>) -> bool {
        self.peers
            .get_mut(&t)
            .is_some_and(|p| p.tcp.send_fpdu(bytes).is_ok())
    }

    /// One round: frames in, connections run, frames out.
    pub fn poll(&mut self) {
        let now = self.now();
        let frames: Vec<Vec<u8>> = self.tap.to_attacker.lock().unwrap().drain(..).collect();
        for f in frames {
            self.seen.frames += 1;
            let Rx::Tcp { src, dst, segment } = self.net.on_frame(now, &f) else {
                continue;
            };
            let Some(repr) = wire::tcp::segment_from_bytes(src, dst, segment) else {
                continue;
            };
            let tuple = FourTuple {
                local_addr: dst,
                local_port: repr.dst_port,
                remote_addr: src,
                remote_port: repr.src_port,
            };
            match self.peers.get_mut(&tuple) {
                Some(p) => {
                    if repr.control == TcpControl::Rst {
                        p.reset = true;
                    }
                    p.tcp.on_segment(now, &repr);
                }
                None => {
                    // A flood's SYN-ACKs (and the RSTs answering them): never answered.
                    if repr.control == TcpControl::Syn {
                        self.seen.syn_acks += 1;
                    } else if repr.control == TcpControl::Rst {
                        self.seen.rsts += 1;
                    }
                }
            }
        }
        self.net.transmit_replies(&mut self.port);
        let tuples: Vec<FourTuple> = self.peers.keys().copied().collect();
        for t in tuples {
            let mut data = Vec::new();
            {
                let p = self.peers.get_mut(&t).expect("listed");
                while let Some(e) = p.tcp.poll_event() {
                    p.events.push(e);
                }
                if p.reading {
                    p.tcp.recv(|_, d| data.extend_from_slice(d));
                }
            }
            if !data.is_empty() {
                let p = self.peers.get_mut(&t).expect("listed");
                match &mut p.mpa {
                    Mpa::Starting(m) => m.on_data(&data, std::time::Instant::now()),
                    Mpa::Fpdu { .. } => Self::deframe(p, &data),
                    _ => p.rx.extend_from_slice(&data),
                }
            }
            if let Some(p) = self.peers.get_mut(&t) {
                if let Mpa::Starting(m) = &mut p.mpa {
                    m.on_timeout(std::time::Instant::now());
                }
            }
            self.drive_mpa(t);
            let p = self.peers.get_mut(&t).expect("listed");
            if !p.muted && p.tcp.poll_at().is_some_and(|at| at <= now) {
                let tuple = *p.tcp.tuple();
                let net = &mut self.net;
                let port = &mut self.port;
                p.tcp.poll_transmit(now, |repr, _| {
                    let _ = net.send_tcp(now, port, &tuple, repr);
                });
            }
        }
    }

    /// Connections in ESTABLISHED.
    pub fn established(&self) -> usize {
        self.peers
            .values()
            .filter(|p| p.tcp.state() == State::Established)
            .count()
    }

    /// Connections that are closed (reset, or both FINs done).
    pub fn closed(&self) -> usize {
        self.peers
            .values()
            .filter(|p| matches!(p.tcp.state(), State::Closed | State::TimeWait))
            .count()
    }

    /// Forgets every connection.
    pub fn clear(&mut self) {
        self.peers.clear();
    }
}
