//! The reference our iWARP figures are reported against: smoltcp's own `tcp::Socket`
//! moving the same bytes over the same in-memory link (`dataplane::port::mem::link`).
//!
//! [`PortDevice`] adapts any [`Port`] to smoltcp's [`Device`]. A [`Side`] is one smoltcp
//! [`Interface`] (Ethernet medium, the port's MAC) with one TCP socket of
//! [`SOCKET_BUFFER`] octets each way (window scaling follows from the buffer size), Nagle
//! off and delayed ACKs off. smoltcp is built without congestion control, so the sender
//! is limited by the receive window alone. Checksums are computed and checked in software,
//! as our own TCP does.
//! Node A is 10.77.0.1/24, node B 10.77.0.2/24.
//!
//! Each side runs the classic poll-mode event loop: take every arrived frame (ingress), run
//! the application step, then let smoltcp emit segments until it has nothing more to send
//! (egress), then flush the port. The two sides are driven either from one thread
//! (A then B, alternating) or from one thread each ([`Drive`]); [`bandwidth`] and
//! [`latency`] use [`Drive::DEFAULT`], the faster one on the development machine (figures
//! there).
//!
//! Ingress is zero-copy: each frame is handed to smoltcp while the port's receive callback
//! holds it. Connection set-up goes through the generic [`PortDevice`].
//!
//! Every received octet is checked against what was sent, so the reference cannot be fast
//! by losing data.
//!
//! This file is a module of the `rdma_vs_smoltcp` bench and of the `smoltcp_ref`
//! integration test (included with `#[path]`).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dataplane::port::mem::{link, WireConfig, ETHERNET_HEADER_LEN};
use dataplane::port::Port;
use hdrhistogram::Histogram;
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address};

/// Octets of each TCP socket buffer (receive and transmit), hence the largest window
/// (smoltcp picks the window scale from it).
///
/// 1 MiB measured fastest on the development machine (best of 5, one thread: 2.42 GiB/s
/// at MTU 1500 and 3.57 at 9000, against 2.33 and 3.34 with 4 MiB and 2.40 and 3.43 with
/// 256 KiB): a window of a few hundred segments keeps the pipeline full while the data
/// still fits the caches.
pub const SOCKET_BUFFER: usize = 1 << 20;
/// Address of node A.
pub const ADDR_A: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
/// Address of node B.
pub const ADDR_B: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// TCP port B listens on.
pub const PORT_B: u16 = 5001;
/// TCP port A connects from.
pub const PORT_A: u16 = 49152;
/// Longest any phase may go without progress before the reference gives up (panics).
pub const STALL: Duration = Duration::from_secs(10);
/// Frames taken from the port per receive burst.
const RX_BURST: usize = 32;

// ------------------------------------------------------------------------------------------
// Device adapter
// ------------------------------------------------------------------------------------------

/// A smoltcp [`Device`] over a [`Port`].
///
/// Frames are taken from the port in bursts and copied into recycled buffers (smoltcp's
/// receive token hands out a borrowed slice after `receive` returns, which the port's
/// callback interface cannot lend). Transmitted frames are written straight into the
/// port's buffer; [`PortDevice::flush`] pushes them to the wire.
pub struct PortDevice<P: Port> {
    port: P,
    ready: VecDeque<Vec<u8>>,
    free: Vec<Vec<u8>>,
    /// Frames smoltcp produced that the port refused (no room or too long).
    pub tx_refused: u64,
}

impl<P: Port> PortDevice<P> {
    /// Wraps `port`.
    pub fn new(port: P) -> Self {
        PortDevice {
            port,
            ready: VecDeque::with_capacity(RX_BURST),
            free: Vec::with_capacity(RX_BURST),
            tx_refused: 0,
        }
    }

    /// The wrapped port.
    pub fn port(&self) -> &P {
        &self.port
    }

    /// Pushes queued frames to the wire.
    pub fn flush(&mut self) {
        self.port.flush();
    }

    /// Whether frames taken from the port wait to be received by smoltcp.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    fn fill(&mut self) {
        let ready = &mut self.ready;
        let free = &mut self.free;
        self.port.rx_burst(RX_BURST, &mut |frame| {
            let mut buf = free.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(frame);
            ready.push_back(buf);
        });
    }
}

/// Receive token of a [`PortDevice`]: one frame, its buffer recycled after use.
pub struct PortRxToken<'a> {
    buf: Vec<u8>,
    free: &'a mut Vec<Vec<u8>>,
}

impl phy::RxToken for PortRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let r = f(&self.buf);
        self.free.push(self.buf);
        r
    }
}

/// Transmit token of a [`PortDevice`].
pub struct PortTxToken<'a, P: Port> {
    port: &'a mut P,
    refused: &'a mut u64,
}

impl<P: Port> phy::TxToken for PortTxToken<'_, P> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut f = Some(f);
        let mut r = None;
        self.port.tx(len, &mut |buf| {
            if let Some(f) = f.take() {
                r = Some(f(buf));
            }
        });
        match (r, f) {
            (Some(r), _) => r,
            (None, Some(f)) => {
                // The port refused the frame: smoltcp still needs its result, so build the
                // frame into a scratch buffer and drop it (TCP retransmits).
                *self.refused += 1;
                f(&mut vec![0; len])
            }
            (None, None) => unreachable!("tx fill ran without a result"),
        }
    }
}

impl<P: Port> Device for PortDevice<P> {
    type RxToken<'a>
        = PortRxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = PortTxToken<'a, P>
    where
        Self: 'a;

    fn receive(&mut self, _: SmolInstant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.ready.is_empty() {
            self.fill();
        }
        let buf = self.ready.pop_front()?;
        Some((
            PortRxToken {
                buf,
                free: &mut self.free,
            },
            PortTxToken {
                port: &mut self.port,
                refused: &mut self.tx_refused,
            },
        ))
    }

    fn transmit(&mut self, _: SmolInstant) -> Option<Self::TxToken<'_>> {
        if self.port.tx_room() == 0 {
            return None;
        }
        Some(PortTxToken {
            port: &mut self.port,
            refused: &mut self.tx_refused,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // smoltcp's Ethernet MTU counts the Ethernet header.
        caps.max_transmission_unit = self.port.mtu() + ETHERNET_HEADER_LEN;
        caps
    }
}

/// A one-frame smoltcp [`Device`] for zero-copy ingress: it lends smoltcp the frame the
/// port's receive callback is holding, and collects anything smoltcp answers at once
/// (ARP replies, immediate ACKs, RSTs) for sending after the burst.
struct FrameDevice<'f> {
    frame: Option<&'f [u8]>,
    replies: &'f mut Vec<Vec<u8>>,
    mtu: usize,
}

/// Receive token of a [`FrameDevice`].
struct FrameRxToken<'a>(&'a [u8]);

impl phy::RxToken for FrameRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// Transmit token of a [`FrameDevice`]: the frame is kept for later.
struct ReplyTxToken<'a>(&'a mut Vec<Vec<u8>>);

impl phy::TxToken for ReplyTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buf = vec![0; len];
        let r = f(&mut buf);
        self.0.push(buf);
        r
    }
}

impl Device for FrameDevice<'_> {
    type RxToken<'a>
        = FrameRxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = ReplyTxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, _: SmolInstant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let frame = self.frame.take()?;
        Some((FrameRxToken(frame), ReplyTxToken(self.replies)))
    }

    fn transmit(&mut self, _: SmolInstant) -> Option<Self::TxToken<'_>> {
        Some(ReplyTxToken(self.replies))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + ETHERNET_HEADER_LEN;
        caps
    }
}

// ------------------------------------------------------------------------------------------
// One side: interface, socket, event loop
// ------------------------------------------------------------------------------------------

/// One node: a smoltcp interface over a port, with one TCP socket.
pub struct Side<P: Port> {
    dev: PortDevice<P>,
    iface: Interface,
    sockets: SocketSet<'static>,
    tcp: SocketHandle,
    epoch: Instant,
    replies: Vec<Vec<u8>>,
}

impl<P: Port> Side<P> {
    /// A node with address `addr`/24 over `port`, one TCP socket not yet opened.
    pub fn new(port: P, addr: Ipv4Address, seed: u64) -> Self {
        let epoch = Instant::now();
        let mut dev = PortDevice::new(port);
        let mut config = Config::new(HardwareAddress::Ethernet(dev.port().mac()));
        config.random_seed = seed;
        let mut iface = Interface::new(config, &mut dev, SmolInstant::from_micros(0));
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv4(addr), 24))
                .expect("one address fits");
        });
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        let mut sockets = SocketSet::new(Vec::with_capacity(1));
        let tcp = sockets.add(socket);
        Side {
            dev,
            iface,
            sockets,
            tcp,
            epoch,
            replies: Vec::new(),
        }
    }

    /// smoltcp's clock: time since this side was made (one clock read; the event loop
    /// reads it once per turn).
    pub fn now(&self) -> SmolInstant {
        SmolInstant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// The TCP socket.
    pub fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.tcp)
    }

    /// Takes and processes every frame that has arrived, smoltcp's clock at `now`.
    ///
    /// Zero-copy: each frame is processed inside the port's receive callback (through a
    /// one-frame device); what smoltcp answers at once is sent after the burst.
    pub fn ingress(&mut self, now: SmolInstant) {
        let Side {
            dev,
            iface,
            sockets,
            replies,
            ..
        } = self;
        let mtu = dev.port.mtu();
        loop {
            let n = dev.port.rx_burst(RX_BURST, &mut |frame| {
                let mut one = FrameDevice {
                    frame: Some(frame),
                    replies,
                    mtu,
                };
                iface.poll_ingress_single(now, &mut one, sockets);
            });
            for r in replies.drain(..) {
                let mut r = Some(r);
                if !dev.port.tx(r.as_ref().map_or(0, Vec::len), &mut |buf| {
                    if let Some(r) = r.take() {
                        buf.copy_from_slice(&r);
                    }
                }) {
                    dev.tx_refused += 1;
                }
            }
            // Frames the generic device took before (during set-up) come first.
            while dev.has_ready() {
                iface.poll_ingress_single(now, dev, sockets);
            }
            if n < RX_BURST {
                break;
            }
        }
    }

    /// Lets smoltcp emit segments until it has nothing more to send (or the wire is full),
    /// then flushes the port; smoltcp's clock at `now`.
    pub fn egress(&mut self, now: SmolInstant) {
        // smoltcp emits at most one segment per socket per call.
        while self
            .iface
            .poll_egress(now, &mut self.dev, &mut self.sockets)
            != PollResult::None
        {}
        self.dev.flush();
    }

    /// One whole event-loop turn without an application step.
    ///
    /// Uses smoltcp's own `Interface::poll` over the generic [`PortDevice`] (connection
    /// set-up runs through it).
    pub fn poll(&mut self) {
        let now = self.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
        while self
            .iface
            .poll_egress(now, &mut self.dev, &mut self.sockets)
            != PollResult::None
        {}
        self.dev.flush();
    }

    /// Frames smoltcp produced that the port refused.
    pub fn tx_refused(&self) -> u64 {
        self.dev.tx_refused
    }
}

/// The two nodes of a fresh in-memory link of IP MTU `mtu`, their TCP connection
/// established (A connected to B), ARP resolved.
pub fn connected_pair(
    mtu: usize,
) -> (
    Side<dataplane::port::mem::MemPort>,
    Side<dataplane::port::mem::MemPort>,
) {
    let (pa, pb) = link(
        WireConfig::default().with_mtu(mtu),
        WireConfig::default().with_mtu(mtu),
    );
    let mut a = Side::new(pa, ADDR_A, 0x5eed_0001);
    let mut b = Side::new(pb, ADDR_B, 0x5eed_0002);
    b.socket().listen(PORT_B).expect("listen");
    let cx = a.iface.context();
    a.sockets
        .get_mut::<tcp::Socket>(a.tcp)
        .connect(cx, (IpAddress::Ipv4(ADDR_B), PORT_B), PORT_A)
        .expect("connect");
    let deadline = Instant::now() + STALL;
    loop {
        a.poll();
        b.poll();
        if a.socket().state() == tcp::State::Established
            && b.socket().state() == tcp::State::Established
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "smoltcp reference: connection not established within {STALL:?} (A {}, B {})",
            a.socket().state(),
            b.socket().state()
        );
    }
    (a, b)
}

// ------------------------------------------------------------------------------------------
// Drivers and applications
// ------------------------------------------------------------------------------------------

/// How the two sides are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drive {
    /// Both sides from the calling thread: A's turn, then B's, alternating.
    OneThread,
    /// One thread per side, each busy-polling its own side.
    TwoThreads,
}

impl Drive {
    /// What [`bandwidth`] and [`latency`] use: one thread, the faster on the 2-core
    /// development machine. Measured there (release, 1 GiB per run, best of 3, 100 000
    /// round trips of 8 octets): one thread 2.47 GiB/s at MTU 1500, 3.28 GiB/s at 9000,
    /// latency p50 0.41 us; two threads 2.43 GiB/s, 2.01 GiB/s and p50 0.70 us, and far
    /// less steady (the other core is shared with the rest of the machine). The
    /// `rdma_vs_smoltcp` bench measures both drives in every run and takes the faster.
    pub const DEFAULT: Drive = Drive::OneThread;

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Drive::OneThread => "1 thread",
            Drive::TwoThreads => "2 threads",
        }
    }
}

/// The application half of one side, run between ingress and egress.
trait App {
    /// One application step; returns true when this side's work is done.
    fn step(&mut self, sock: &mut tcp::Socket<'static>) -> bool;
}

/// One event-loop turn of a side: ingress, application, egress.
fn turn<P: Port, A: App>(side: &mut Side<P>, app: &mut A) -> bool {
    let now = side.now();
    side.ingress(now);
    let done = app.step(side.socket());
    side.egress(now);
    done
}

/// Panics when `deadline` has passed, reading the clock only every 4096th call.
struct Watchdog {
    deadline: Instant,
    calls: u32,
}

impl Watchdog {
    fn new(limit: Duration) -> Self {
        Watchdog {
            deadline: Instant::now() + limit,
            calls: 0,
        }
    }

    fn check(&mut self, what: &str) {
        self.calls = self.calls.wrapping_add(1);
        if self.calls.is_multiple_of(4096) {
            assert!(
                Instant::now() < self.deadline,
                "smoltcp reference: {what} did not finish in time"
            );
        }
    }
}

/// Runs `app_a` on A and `app_b` on B until both are done (A keeps polling until B is done,
/// so that it answers B's ACKs and retransmission needs).
fn run<P: Port, X: App + Send, Y: App + Send>(
    drive: Drive,
    a: &mut Side<P>,
    b: &mut Side<P>,
    app_a: &mut X,
    app_b: &mut Y,
    what: &str,
) {
    const LIMIT: Duration = Duration::from_secs(600);
    match drive {
        Drive::OneThread => {
            let mut dog = Watchdog::new(LIMIT);
            let (mut da, mut db) = (false, false);
            while !(da && db) {
                da |= turn(a, app_a);
                db |= turn(b, app_b);
                dog.check(what);
            }
        }
        Drive::TwoThreads => {
            let a_done = AtomicBool::new(false);
            let b_done = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut dog = Watchdog::new(LIMIT);
                    while !(turn(b, app_b) && a_done.load(Ordering::Acquire)) {
                        dog.check(what);
                    }
                    b_done.store(true, Ordering::Release);
                });
                let mut dog = Watchdog::new(LIMIT);
                let mut da = false;
                loop {
                    if !da {
                        da = turn(a, app_a);
                        if da {
                            a_done.store(true, Ordering::Release);
                        }
                    } else {
                        a.poll();
                    }
                    if da && b_done.load(Ordering::Acquire) {
                        break;
                    }
                    dog.check(what);
                }
            });
        }
    }
}

// ------------------------------------------------------------------------------------------
// The byte stream both tests send
// ------------------------------------------------------------------------------------------

/// Period of the test stream: not a multiple of any chunk size, so a lost, repeated or
/// misplaced chunk shows up as a mismatch.
pub const STREAM_PERIOD: usize = (1 << 20) + 13;

/// Two periods of the test stream: octet `o` of the stream is `stream[o % PERIOD]`, and
/// any run of up to `PERIOD` octets is contiguous here.
pub fn stream() -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let period: Vec<u8> = (0..STREAM_PERIOD)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect();
    let mut s = period.clone();
    s.extend_from_slice(&period);
    s
}

/// The stream octets `[offset, offset + len)`, `len <= STREAM_PERIOD`.
pub fn stream_at(stream: &[u8], offset: u64, len: usize) -> &[u8] {
    let start = (offset % STREAM_PERIOD as u64) as usize;
    &stream[start..start + len]
}

/// Compares `data` with the stream from `offset`; returns the mismatched octets.
pub fn check_stream(stream: &[u8], offset: u64, data: &[u8]) -> u64 {
    let mut bad = 0;
    let mut at = offset;
    for piece in data.chunks(STREAM_PERIOD) {
        let want = stream_at(stream, at, piece.len());
        if piece != want {
            bad += piece.iter().zip(want).filter(|(x, y)| x != y).count() as u64;
        }
        at += piece.len() as u64;
    }
    bad
}

// ------------------------------------------------------------------------------------------
// Bandwidth
// ------------------------------------------------------------------------------------------

/// What [`bandwidth`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwResult {
    /// IP MTU of the link.
    pub mtu: usize,
    /// Octets the application wrote per send call.
    pub chunk: usize,
    /// How the sides were driven.
    pub drive: Drive,
    /// Octets moved from A to B.
    pub bytes: u64,
    /// From the first write to the last octet read (connection setup excluded).
    pub elapsed: Duration,
    /// Octets B read and compared with what A wrote.
    pub verified_octets: u64,
    /// Of those, octets that differed (0 in a correct run).
    pub mismatched_octets: u64,
    /// Frames A sent during the run (data segments, and any retransmissions).
    pub frames_sent: u64,
}

impl BwResult {
    /// Average TCP payload per frame A sent (close to the MSS, `mtu - 40`, when the link
    /// is used well).
    pub fn payload_per_frame(&self) -> f64 {
        self.bytes as f64 / self.frames_sent.max(1) as f64
    }

    /// Octets per second.
    pub fn octets_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64()
    }

    /// GiB (2^30 octets) per second.
    pub fn gib_per_sec(&self) -> f64 {
        self.octets_per_sec() / (1u64 << 30) as f64
    }

    /// Every octet arrived, and intact.
    pub fn intact(&self) -> bool {
        self.verified_octets == self.bytes && self.mismatched_octets == 0
    }
}

struct BwSender<'s> {
    stream: &'s [u8],
    total: u64,
    chunk: usize,
    sent: u64,
}

impl App for BwSender<'_> {
    fn step(&mut self, sock: &mut tcp::Socket<'static>) -> bool {
        // Write chunk by chunk (each call at most the rest of the current chunk) while
        // the socket takes data.
        while self.sent < self.total {
            let in_chunk = (self.sent % self.chunk as u64) as usize;
            let len = ((self.chunk - in_chunk) as u64).min(self.total - self.sent) as usize;
            match sock.send_slice(stream_at(self.stream, self.sent, len)) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.sent += n as u64,
            }
        }
        self.sent == self.total
    }
}

struct BwReceiver<'s> {
    stream: &'s [u8],
    total: u64,
    received: u64,
    mismatched: u64,
    end: Option<Instant>,
}

impl App for BwReceiver<'_> {
    fn step(&mut self, sock: &mut tcp::Socket<'static>) -> bool {
        while self.received < self.total {
            let (stream, at) = (self.stream, self.received);
            match sock.recv(|data| (data.len(), (data.len(), check_stream(stream, at, data)))) {
                Ok((0, _)) | Err(_) => break,
                Ok((n, bad)) => {
                    self.received += n as u64;
                    self.mismatched += bad;
                }
            }
        }
        if self.received >= self.total && self.end.is_none() {
            self.end = Some(Instant::now());
        }
        self.received >= self.total
    }
}

/// Moves `total_bytes` from A to B over an established smoltcp TCP connection on a fresh
/// in-memory link of IP MTU `mtu`, the application writing `chunk` octets per call; driven
/// as [`Drive::DEFAULT`].
pub fn bandwidth(mtu: usize, total_bytes: u64, chunk: usize) -> BwResult {
    bandwidth_with(Drive::DEFAULT, mtu, total_bytes, chunk)
}

/// [`bandwidth`] driven as `drive`.
pub fn bandwidth_with(drive: Drive, mtu: usize, total_bytes: u64, chunk: usize) -> BwResult {
    let chunk = chunk.clamp(1, STREAM_PERIOD);
    let stream = stream();
    let (mut a, mut b) = connected_pair(mtu);
    let mut tx = BwSender {
        stream: &stream,
        total: total_bytes,
        chunk,
        sent: 0,
    };
    let mut rx = BwReceiver {
        stream: &stream,
        total: total_bytes,
        received: 0,
        mismatched: 0,
        end: None,
    };
    let frames_before = a.dev.port().stats().tx_frames;
    let start = Instant::now();
    run(drive, &mut a, &mut b, &mut tx, &mut rx, "bandwidth run");
    let end = rx.end.unwrap_or_else(Instant::now);
    let frames_sent = a.dev.port().stats().tx_frames - frames_before;
    BwResult {
        mtu,
        chunk,
        drive,
        bytes: total_bytes,
        elapsed: end - start,
        verified_octets: rx.received,
        mismatched_octets: rx.mismatched,
        frames_sent,
    }
}

// ------------------------------------------------------------------------------------------
// Latency
// ------------------------------------------------------------------------------------------

/// What [`latency_with`] measured.
#[derive(Debug, Clone)]
pub struct LatResult {
    /// One-way latency (half the round trip) of each iteration, nanoseconds.
    pub histogram: Histogram<u64>,
    /// How the sides were driven.
    pub drive: Drive,
    /// Octets received (both directions) and compared with what was sent.
    pub verified_octets: u64,
    /// Of those, octets that differed (0 in a correct run).
    pub mismatched_octets: u64,
}

/// A histogram of nanoseconds from 1 ns to 60 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Reads one whole `msg`-octet message if it has arrived; returns (verified, mismatched).
fn take_message(
    sock: &mut tcp::Socket<'static>,
    stream: &[u8],
    offset: u64,
    buf: &mut [u8],
) -> Option<u64> {
    if sock.recv_queue() < buf.len() {
        return None;
    }
    let mut got = 0;
    while got < buf.len() {
        match sock.recv_slice(&mut buf[got..]) {
            Ok(n) if n > 0 => got += n,
            _ => return None, // cannot happen: recv_queue said it is there
        }
    }
    Some(check_stream(stream, offset, buf))
}

struct Pinger<'s> {
    stream: &'s [u8],
    iters: u64,
    i: u64,
    t0: Option<Instant>,
    buf: Vec<u8>,
    hist: Histogram<u64>,
    verified: u64,
    mismatched: u64,
}

impl App for Pinger<'_> {
    fn step(&mut self, sock: &mut tcp::Socket<'static>) -> bool {
        if self.i == self.iters {
            return true;
        }
        let msg = self.buf.len();
        let offset = self.i * msg as u64;
        match self.t0 {
            None => {
                if sock.send_capacity() - sock.send_queue() >= msg {
                    self.t0 = Some(Instant::now());
                    let n = sock
                        .send_slice(stream_at(self.stream, offset, msg))
                        .unwrap_or(0);
                    debug_assert_eq!(n, msg);
                }
            }
            Some(t0) => {
                if let Some(bad) = take_message(sock, self.stream, offset, &mut self.buf) {
                    let rtt = t0.elapsed();
                    // perftest's convention: one-way latency is half the round trip.
                    let _ = self.hist.record(((rtt.as_nanos() / 2) as u64).max(1));
                    self.verified += msg as u64;
                    self.mismatched += bad;
                    self.t0 = None;
                    self.i += 1;
                    if self.i < self.iters {
                        // Start the next round trip in this same turn.
                        return self.step(sock);
                    }
                }
            }
        }
        self.i == self.iters
    }
}

struct Ponger<'s> {
    stream: &'s [u8],
    iters: u64,
    i: u64,
    buf: Vec<u8>,
    verified: u64,
    mismatched: u64,
}

impl App for Ponger<'_> {
    fn step(&mut self, sock: &mut tcp::Socket<'static>) -> bool {
        while self.i < self.iters {
            let msg = self.buf.len();
            let offset = self.i * msg as u64;
            let Some(bad) = take_message(sock, self.stream, offset, &mut self.buf) else {
                break;
            };
            self.verified += msg as u64;
            self.mismatched += bad;
            // Answer with the same stream octets (B's stream to A mirrors A's to B).
            let n = sock
                .send_slice(stream_at(self.stream, offset, msg))
                .unwrap_or(0);
            debug_assert_eq!(n, msg);
            self.i += 1;
        }
        self.i == self.iters
    }
}

/// Ping-pong of `msg`-octet messages between A and B over an established smoltcp TCP
/// connection, `iters` round trips; records half of each round trip in nanoseconds
/// (perftest's convention). Driven as [`Drive::DEFAULT`]. Panics if any octet arrives
/// damaged.
pub fn latency(msg: usize, iters: u64) -> Histogram<u64> {
    let r = latency_with(Drive::DEFAULT, 1500, msg, iters);
    assert_eq!(
        r.verified_octets,
        2 * msg as u64 * iters,
        "smoltcp reference: latency run lost octets"
    );
    assert_eq!(
        r.mismatched_octets, 0,
        "smoltcp reference: latency run corrupted octets"
    );
    r.histogram
}

/// [`latency`] driven as `drive` over a link of IP MTU `mtu`, with the verification
/// counts.
pub fn latency_with(drive: Drive, mtu: usize, msg: usize, iters: u64) -> LatResult {
    let msg = msg.clamp(1, STREAM_PERIOD.min(SOCKET_BUFFER));
    let stream = stream();
    let (mut a, mut b) = connected_pair(mtu);
    let mut ping = Pinger {
        stream: &stream,
        iters,
        i: 0,
        t0: None,
        buf: vec![0; msg],
        hist: new_histogram(),
        verified: 0,
        mismatched: 0,
    };
    let mut pong = Ponger {
        stream: &stream,
        iters,
        i: 0,
        buf: vec![0; msg],
        verified: 0,
        mismatched: 0,
    };
    run(drive, &mut a, &mut b, &mut ping, &mut pong, "latency run");
    LatResult {
        histogram: ping.hist,
        drive,
        verified_octets: ping.verified + pong.verified,
        mismatched_octets: ping.mismatched + pong.mismatched,
    }
}
