//! `iwarp rping`: rdma-core's `rping` (librdmacm/examples/rping.c) over our verbs, both
//! roles, wire-compatible with the real tool.
//!
//! rping's protocol, per ping (the client starts; every control message is a Send of one
//! 16-octet [`RdmaInfo`], `{buf: u64, rkey: u32, size: u32}` in network byte order):
//!
//! 1. client → server: Send of the info of its *start* buffer (the ping data, see
//!    [`fill_ping`]), which the peer may read (remote read access);
//! 2. server: RDMA Read of `size` octets from that buffer into its own buffer;
//! 3. server → client: Send "go ahead" (16 octets; rping sends its zeroed send buffer);
//! 4. client → server: Send of the info of its *rdma* buffer (remote write access);
//! 5. server: RDMA Write of the data it read (up to and including its first NUL octet,
//!    rping's `strlen + 1`) into that buffer;
//! 6. server → client: Send "go ahead"; the client compares the two buffers (`-V`) and
//!    prints `ping data: ...` (`-v`).
//!
//! After `-C count` pings the client disconnects; the server ends when the connection
//! closes (or serves the next client with `-P`).
//!
//! Connection setup as rping through rdma_cm: the client asks for IRD = ORD = 1
//! (`responder_resources = initiator_depth = 1`), and the server accepts inheriting them
//! (`rdma_accept(id, NULL)`). In client-server mode the Initiator's first FPDU is the
//! first info Send, as RFC 5044 7.1.2 rule 4 asks; in peer-to-peer mode the RTR precedes
//! it. See [`RpingOptions`] for the defaults and why they suit siw.
//!
//! Both roles drive their [`Core`] themselves (run to completion, like a DPDK lcore running
//! its application), in the style of [`crate::bench`].

use std::fmt;
use std::io::Write;
use std::net::SocketAddrV4;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use control::embedded::{self, WireConfig};
use control::verbs::{
    AcceptParams, Access, CmError, Completion, Core, Device, InitiatorConfig, Mr, Pd, PostError,
    RecvWr, ResponderConfig, SendOp, SendWr,
};

use crate::driver::{DriverError, Endpoint};

/// rping's TCP port.
pub const DEFAULT_PORT: u16 = 7174;
/// rping's default ping size (`-S`).
pub const DEFAULT_SIZE: usize = 64;
/// rping's smallest ping size: room for `rdma-ping-2147483647: ` and the NUL
/// (`sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`).
pub const MIN_SIZE: usize = 26;
/// rping's largest ping size (`RPING_BUFSIZE - 1`).
pub const MAX_SIZE: usize = 65535;
/// Octets of an encoded [`RdmaInfo`].
pub const INFO_LEN: usize = 16;

/// `struct rping_rdma_info`: a buffer advertisement, in network byte order on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdmaInfo {
    /// The buffer's address: the Tagged Offset of its first octet.
    pub buf: u64,
    /// The buffer's STag (rping's rkey).
    pub rkey: u32,
    /// The buffer's length in octets.
    pub size: u32,
}

impl RdmaInfo {
    /// The 16 octets on the wire.
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// Parses a received message, which must be exactly [`INFO_LEN`] octets (rping's
    /// "Received bogus data, size N" otherwise).
    pub fn decode(b: &[u8]) -> Result<RdmaInfo, RpingError> {
        let b: &[u8; INFO_LEN] = b.try_into().map_err(|_| {
            RpingError::Protocol(format!(
                "received bogus data, size {} (a buffer advertisement is {INFO_LEN} octets)",
                b.len()
            ))
        })?;
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&b[..8]);
        let mut rkey = [0u8; 4];
        rkey.copy_from_slice(&b[8..12]);
        let mut size = [0u8; 4];
        size.copy_from_slice(&b[12..]);
        Ok(RdmaInfo {
            buf: u64::from_be_bytes(buf),
            rkey: u32::from_be_bytes(rkey),
            size: u32::from_be_bytes(size),
        })
    }
}

/// Fills `buf` with rping's data for ping number `ping`: the text `rdma-ping-N: `, then
/// ASCII letters from `'A' + N mod 58` counting up through `'z'` and wrapping to `'A'`,
/// and a NUL as the last octet (as `snprintf` truncates when `buf` is short).
pub fn fill_ping(buf: &mut [u8], ping: u64) {
    if buf.is_empty() {
        return;
    }
    let head = format!("rdma-ping-{ping}: ");
    let n = head.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&head.as_bytes()[..n]);
    let mut c = b'A' + (ping % 58) as u8;
    for b in &mut buf[n..] {
        *b = c;
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    let last = buf.len() - 1;
    buf[last] = 0;
}

/// The printable part of a ping buffer: up to its first NUL, lossily as UTF-8 (what
/// rping's `printf("%s")` shows).
pub fn ping_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Options of either role (rping's letters in brackets).
#[derive(Debug, Clone)]
pub struct RpingOptions {
    /// Pings the client makes; 0: until interrupted (`-C`).
    pub count: u64,
    /// Ping size in octets, [`MIN_SIZE`]..=[`MAX_SIZE`] (`-S`). The server reads what the
    /// client advertises, up to [`MAX_SIZE`].
    pub size: usize,
    /// Print each ping's data (`-v`): `ping data: ...` (client), `server ping data: ...`
    /// (server).
    pub verbose: bool,
    /// Client: check that the data written back equals the data sent (`-V`).
    pub validate: bool,
    /// Server: keep serving clients one after the other (`-P`).
    pub persistent: bool,
    /// MPA Initiator settings (client). Default: RFC 6581 enhanced Rev 2, IRD = ORD = 1
    /// as rping asks through rdma_cm, CRC requested, client-server model. siw as
    /// responder echoes whatever of this it supports (CRC, P2P with a Write or Read RTR).
    pub initiator: InitiatorConfig,
    /// MPA Responder settings (server). Default: CRC on (siw's Initiator accepts a Reply
    /// with C unless its `mpa_crc_strict` is set), no markers, every RTR type accepted.
    pub responder: ResponderConfig,
    /// How the server accepts. Default: inherit IRD/ORD from the Request, like
    /// `rdma_accept(id, NULL)`.
    pub accept: AcceptParams,
    /// How long a step (connecting, one message) may take before the run fails. rping
    /// itself waits forever; a guest under software emulation needs seconds.
    pub step_timeout: Duration,
    /// Server: how long to wait for a client; `None`: forever (rping's behaviour).
    pub accept_timeout: Option<Duration>,
}

impl Default for RpingOptions {
    fn default() -> Self {
        RpingOptions {
            count: 0,
            size: DEFAULT_SIZE,
            verbose: false,
            validate: false,
            persistent: false,
            initiator: InitiatorConfig {
                ird: 1,
                ord: 1,
                ..InitiatorConfig::default()
            },
            responder: ResponderConfig::default(),
            accept: AcceptParams::default(),
            step_timeout: Duration::from_secs(30),
            accept_timeout: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpingStats {
    /// Pings completed (client: validated if `-V`; server: write-back done).
    pub pings: u64,
    /// Connections served (server) or made (client).
    pub connections: u64,
    /// Ping data octets moved (read plus written back).
    pub octets: u64,
    /// IRD and ORD the (last) connection runs with, as negotiated (RFC 6581).
    pub ird_ord: (u16, u16),
    /// IRD and ORD in the peer's enhanced MPA frame (its Reply or Request), if any: what
    /// siw runs with as Responder, or asked for as Initiator.
    pub peer_ird_ord: Option<(u16, u16)>,
}

/// Why a run failed.
#[derive(Debug)]
pub enum RpingError {
    /// Bad options.
    Options(String),
    /// The connection could not be set up.
    Connect(CmError),
    /// A work request completed in error.
    Completion(Completion),
    /// The peer broke rping's protocol.
    Protocol(String),
    /// `-V`: the data written back differs from the data sent.
    Mismatch {
        /// The ping number.
        ping: u64,
        /// Offset of the first differing octet.
        offset: usize,
    },
    /// A step took longer than [`RpingOptions::step_timeout`].
    Stalled(&'static str),
    /// Writing the output failed.
    Output(std::io::Error),
}

impl fmt::Display for RpingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpingError::Options(s) => write!(f, "invalid options: {s}"),
            RpingError::Connect(e) => write!(f, "connection failed: {e}"),
            RpingError::Completion(c) => f.write_str(&crate::bench::describe_completion(c)),
            RpingError::Protocol(s) => write!(f, "protocol error: {s}"),
            RpingError::Mismatch { ping, offset } => {
                write!(
                    f,
                    "data mismatch! (ping {ping}, first difference at octet {offset})"
                )
            }
            RpingError::Stalled(what) => write!(f, "timed out while {what}"),
            RpingError::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl std::error::Error for RpingError {}

/// Checks the options shared by both roles.
pub fn validate_options(o: &RpingOptions) -> Result<(), RpingError> {
    if !(MIN_SIZE..=MAX_SIZE).contains(&o.size) {
        return Err(RpingError::Options(format!(
            "invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            o.size
        )));
    }
    Ok(())
}

/// How long an Initiator talking to rping or perftest waits after the MPA Reply before its
/// first FPDU (the RTR when peer-to-peer, else the ULP's first message).
///
/// Linux siw (6.1, `siw_accept`) sends the Reply, then moves the socket's data-ready
/// callback from the connection manager to the QP; the CM callback ignores data in RDMA
/// mode. An FPDU that arrives in that window is acknowledged by TCP but not read until
/// more data arrives, which a request-response protocol never sends: the run stalls. A
/// short pause (nothing may be sent before the Reply anyway, RFC 5044 7.1.2 rule 3) keeps
/// our first FPDU out of that window.
pub const FIRST_FPDU_DELAY: Duration = Duration::from_millis(100);

/// `init` with [`InitiatorConfig::first_fpdu_delay`] at least [`FIRST_FPDU_DELAY`]: the
/// connection is reported established (and a peer-to-peer RTR sent) only that long after
/// the MPA Reply, so nothing reaches siw in the window described there.
pub fn with_first_fpdu_delay(init: &InitiatorConfig) -> InitiatorConfig {
    InitiatorConfig {
        first_fpdu_delay: init.first_fpdu_delay.max(FIRST_FPDU_DELAY),
        ..init.clone()
    }
}

/// Work request identifiers.
const WR_RECV: u64 = 0x100;
const WR_SEND: u64 = 0x200;
const WR_READ: u64 = 0x300;
const WR_WRITE: u64 = 0x400;
/// Receives kept posted (rping posts one; a spare costs nothing and tolerates a peer that
/// sends its next message before we repost).
const RECVS: u64 = 2;

/// How a wait ended without the completion it wanted.
enum Fail {
    /// The connection closed: a receive or send was flushed.
    Closed,
    /// Anything else.
    Err(RpingError),
}

impl From<RpingError> for Fail {
    fn from(e: RpingError) -> Fail {
        Fail::Err(e)
    }
}

impl From<DriverError> for Fail {
    fn from(e: DriverError) -> Fail {
        match e {
            DriverError::Closed | DriverError::Post(PostError::QpError) => Fail::Closed,
            DriverError::Completion(c) => Fail::Err(RpingError::Completion(c)),
            DriverError::Stalled(what, _) => Fail::Err(RpingError::Stalled(what)),
            DriverError::Connect(e) => Fail::Err(RpingError::Connect(e)),
            DriverError::Post(e) => Fail::Err(RpingError::Protocol(format!("posting: {e}"))),
        }
    }
}

/// One connection's verbs objects on the shared driver ([`Endpoint`]), which drives the
/// caller's core; plus rping's message buffers.
struct Ep<'a> {
    ep: Endpoint<&'a mut Core>,
    /// Receive buffers (`RECVS` slots of `INFO_LEN` octets).
    recv: Mr,
    /// Send buffers: slot 0 and 1 for the two advertisements of a ping, slot 2 all zero
    /// (the server's "go ahead").
    send: Mr,
}

impl<'a> Ep<'a> {
    fn new(dev: &Device, core: &'a mut Core, o: &RpingOptions) -> Result<Ep<'a>, RpingError> {
        // rping: RPING_SQ_DEPTH 16, two receives.
        let mut ep = Endpoint::with_core(dev, core, 16, 4);
        ep.stall = o.step_timeout;
        let recv = reg(&ep.pd, INFO_LEN * RECVS as usize, Access::LOCAL_WRITE)?;
        let send = reg(&ep.pd, INFO_LEN * 3, Access::LOCAL_WRITE)?;
        let ep = Ep { ep, recv, send };
        for slot in 0..RECVS {
            ep.post_recv(slot)?;
        }
        Ok(ep)
    }

    /// Waits for a connection answer.
    fn connected<T>(
        &mut self,
        p: &control::verbs::Pending<T>,
        what: &'static str,
    ) -> Result<T, RpingError> {
        self.ep.wait(p, what).map_err(|e| match e {
            DriverError::Connect(e) => RpingError::Connect(e),
            _ => RpingError::Stalled(what),
        })
    }

    fn post_recv(&self, slot: u64) -> Result<(), RpingError> {
        self.ep
            .qp
            .post_recv(RecvWr {
                wr_id: WR_RECV | slot,
                local: self.recv.sge(slot * INFO_LEN as u64, INFO_LEN as u32),
            })
            .map_err(|e| RpingError::Protocol(format!("posting a receive: {e}")))
    }

    fn post(&mut self, wr: SendWr) -> Result<(), Fail> {
        Ok(self.ep.post_send(wr)?)
    }

    /// Sends advertisement slot `slot` (0..3) of the send buffer.
    fn send_slot(&mut self, slot: u64) -> Result<(), Fail> {
        let local = self.send.sge(slot * INFO_LEN as u64, INFO_LEN as u32);
        self.post(SendWr {
            wr_id: WR_SEND | slot,
            op: SendOp::Send,
            local,
            signaled: true,
        })
    }

    /// Waits for a completion with `wr_id & 0xf00 == kind` ([`Endpoint::wait_wr`]).
    fn wait(&mut self, kind: u64, what: &'static str) -> Result<Completion, Fail> {
        Ok(self.ep.wait_wr(0xf00, kind, what)?)
    }

    /// Waits for the next received message, reposts its buffer and returns its octets.
    fn recv(&mut self, what: &'static str) -> Result<Vec<u8>, Fail> {
        let c = self.wait(WR_RECV, what)?;
        let slot = c.wr_id & 0xff;
        let len = (c.byte_len as usize).min(INFO_LEN);
        let mut b = vec![0u8; len];
        self.recv
            .read((slot * INFO_LEN as u64) as usize, &mut b)
            .map_err(|e| RpingError::Protocol(format!("reading a receive buffer: {e}")))?;
        self.post_recv(slot)?;
        if c.byte_len as usize != INFO_LEN {
            return Err(RpingError::Protocol(format!(
                "received bogus data, size {} while {what} (rping's messages are {INFO_LEN} octets)",
                c.byte_len
            ))
            .into());
        }
        Ok(b)
    }
}

fn reg(pd: &Pd, len: usize, access: Access) -> Result<Mr, RpingError> {
    pd.reg_mr(len, access)
        .map_err(|e| RpingError::Protocol(format!("registering {len} octets: {e}")))
}

fn io(e: std::io::Error) -> RpingError {
    RpingError::Output(e)
}

fn info_of(mr: &Mr, size: usize) -> RdmaInfo {
    RdmaInfo {
        buf: mr.base_to(),
        rkey: mr.key(),
        size: size as u32,
    }
}

/// Runs rping's client against `server` on `dev`, driving `core` itself. Writes rping's
/// output lines to `out`.
pub fn run_client(
    dev: &Device,
    core: &mut Core,
    server: SocketAddrV4,
    o: &RpingOptions,
    out: &mut dyn Write,
) -> Result<RpingStats, RpingError> {
    validate_options(o)?;
    let mut ep = Ep::new(dev, core, o)?;
    let remote = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let start = reg(&ep.ep.pd, o.size, remote)?;
    let sink = reg(&ep.ep.pd, o.size, remote)?;
    ep.send
        .write(0, &info_of(&start, o.size).encode())
        .and_then(|()| ep.send.write(INFO_LEN, &info_of(&sink, o.size).encode()))
        .map_err(|e| RpingError::Protocol(format!("writing the send buffer: {e}")))?;
    let p = dev.connect(&ep.ep.qp, server, with_first_fpdu_delay(&o.initiator));
    let info = ep.connected(&p, "connecting")?;
    let mut stats = RpingStats {
        connections: 1,
        ird_ord: (info.ird, info.ord),
        peer_ird_ord: info.established.ird_ord.map(|x| (x.peer_ird, x.peer_ord)),
        ..RpingStats::default()
    };
    let mut data = vec![0u8; o.size];
    let mut back = vec![0u8; o.size];
    let result = (|| -> Result<(), Fail> {
        let mut ping = 0u64;
        while o.count == 0 || ping < o.count {
            fill_ping(&mut data, ping);
            start
                .write(0, &data)
                .and_then(|()| sink.write(0, &vec![0u8; o.size]))
                .map_err(|e| RpingError::Protocol(format!("writing the ping buffers: {e}")))?;
            ep.send_slot(0)?;
            ep.recv("waiting for the server's go-ahead after its RDMA Read")?;
            ep.send_slot(1)?;
            ep.recv("waiting for the server's go-ahead after its RDMA Write")?;
            sink.read(0, &mut back)
                .map_err(|e| RpingError::Protocol(format!("reading the sink: {e}")))?;
            if o.validate {
                if let Some(offset) = data.iter().zip(&back).position(|(a, b)| a != b) {
                    return Err(RpingError::Mismatch { ping, offset }.into());
                }
            }
            if o.verbose {
                writeln!(out, "ping data: {}", ping_text(&back)).map_err(io)?;
            }
            stats.pings += 1;
            stats.octets += 2 * o.size as u64;
            ping += 1;
        }
        Ok(())
    })();
    ep.ep.disconnect(dev, info.conn);
    match result {
        Ok(()) => Ok(stats),
        Err(Fail::Err(e)) => Err(e),
        Err(Fail::Closed) => Err(RpingError::Protocol(format!(
            "the server closed the connection after {} of {} pings",
            stats.pings,
            if o.count == 0 {
                "unlimited".to_string()
            } else {
                o.count.to_string()
            }
        ))),
    }
}

/// Runs rping's server on TCP `port` of `dev`, driving `core` itself. Serves one client
/// (all of them one after the other with [`RpingOptions::persistent`]). Writes rping's
/// output lines to `out`.
pub fn run_server(
    dev: &Device,
    core: &mut Core,
    port: u16,
    o: &RpingOptions,
    out: &mut dyn Write,
) -> Result<RpingStats, RpingError> {
    serve(dev, core, port, o, out, None)
}

fn serve(
    dev: &Device,
    core: &mut Core,
    port: u16,
    o: &RpingOptions,
    out: &mut dyn Write,
    ready: Option<mpsc::Sender<()>>,
) -> Result<RpingStats, RpingError> {
    validate_options(o)?;
    let listener = dev
        .listen(port, o.responder.clone())
        .map_err(RpingError::Connect)?;
    if let Some(r) = ready {
        let _ = r.send(());
    }
    let mut stats = RpingStats::default();
    loop {
        let deadline = o.accept_timeout.map(|t| Instant::now() + t);
        let req = loop {
            core.poll();
            if let Some(r) = listener.try_next() {
                break r;
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(RpingError::Stalled("waiting for a client"));
            }
        };
        let mut ep = Ep::new(dev, core, o)?;
        // The server reads whatever size the client advertises (up to rping's maximum).
        let buf = reg(&ep.ep.pd, MAX_SIZE, Access::LOCAL_WRITE)?;
        let p = listener.accept(&req, &ep.ep.qp, o.accept.clone());
        let info = match ep.connected(&p, "accepting") {
            Ok(i) => i,
            // A persistent server outlives a client whose startup failed (a bad or
            // abandoned MPA exchange, a probe), as rping -P does.
            Err(e) if o.persistent => {
                let _ = writeln!(out, "connection from {:?} failed: {e}", req.tuple);
                continue;
            }
            Err(e) => return Err(e),
        };
        stats.connections += 1;
        stats.ird_ord = (info.ird, info.ord);
        stats.peer_ird_ord = info.established.ird_ord.map(|x| (x.peer_ird, x.peer_ord));
        let result = serve_conn(&mut ep, &buf, o, out, &mut stats);
        ep.ep.disconnect(dev, info.conn);
        match result {
            Ok(()) | Err(Fail::Closed) => {}
            Err(Fail::Err(e)) => return Err(e),
        }
        if !o.persistent {
            return Ok(stats);
        }
    }
}

/// One client's pings, until it disconnects (`Err(Fail::Closed)`).
fn serve_conn(
    ep: &mut Ep<'_>,
    buf: &Mr,
    o: &RpingOptions,
    out: &mut dyn Write,
    stats: &mut RpingStats,
) -> Result<(), Fail> {
    let mut data = vec![0u8; MAX_SIZE];
    loop {
        let src = RdmaInfo::decode(&ep.recv("waiting for the client's source buffer")?)?;
        let len = src.size as usize;
        if len > MAX_SIZE {
            return Err(RpingError::Protocol(format!(
                "the client advertised {len} octets, more than rping's {MAX_SIZE}"
            ))
            .into());
        }
        ep.post(SendWr {
            wr_id: WR_READ,
            op: SendOp::Read {
                remote_stag: src.rkey,
                remote_to: src.buf,
            },
            local: buf.sge(0, len as u32),
            signaled: true,
        })?;
        ep.wait(WR_READ, "waiting for the RDMA Read")?;
        buf.read(0, &mut data[..len])
            .map_err(|e| RpingError::Protocol(format!("reading the buffer: {e}")))?;
        if o.verbose {
            writeln!(out, "server ping data: {}", ping_text(&data[..len])).map_err(io)?;
        }
        ep.send_slot(2)?;
        let sink = RdmaInfo::decode(&ep.recv("waiting for the client's sink buffer")?)?;
        // rping writes back strlen(data) + 1 octets; never more than was read or than the
        // sink holds.
        let n = data[..len]
            .iter()
            .position(|&b| b == 0)
            .map_or(len, |p| p + 1)
            .min(sink.size as usize);
        ep.post(SendWr {
            wr_id: WR_WRITE,
            op: SendOp::Write {
                remote_stag: sink.rkey,
                remote_to: sink.buf,
            },
            local: buf.sge(0, n as u32),
            signaled: true,
        })?;
        ep.wait(WR_WRITE, "waiting for the RDMA Write")?;
        ep.send_slot(2)?;
        stats.pings += 1;
        stats.octets += (len + n) as u64;
    }
}

/// Both ends in this process over the in-memory wire ([`control::embedded::pair`]):
/// the server (node B, 10.77.0.2) on its own thread writing to `server_out`, the client
/// (node A) on this thread writing to `client_out`. Returns (client, server) statistics.
pub fn run_embedded(
    o: &RpingOptions,
    port: u16,
    client_out: &mut dyn Write,
    mut server_out: Box<dyn Write + Send>,
) -> Result<(RpingStats, RpingStats), RpingError> {
    validate_options(o)?;
    let pair = embedded::pair(
        WireConfig::default(),
        WireConfig::default(),
        embedded::tcp_config(1500),
    )
    .map_err(|e| RpingError::Options(e.to_string()))?;
    let embedded::Pair {
        a,
        mut core_a,
        b,
        mut core_b,
    } = pair;
    let server_addr = SocketAddrV4::new(embedded::ADDR_B, port);
    let mut so = o.clone();
    if so.accept_timeout.is_none() {
        so.accept_timeout = Some(o.step_timeout);
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = std::thread::Builder::new()
        .name("rping-server".into())
        .spawn(move || {
            let r = serve(&b, &mut core_b, port, &so, &mut *server_out, Some(ready_tx));
            let _ = server_out.flush();
            b.shutdown();
            r
        })
        .map_err(|e| RpingError::Protocol(format!("starting the server thread: {e}")))?;
    let client = match ready_rx.recv() {
        Ok(()) => run_client(&a, &mut core_a, server_addr, o, client_out),
        // The server failed before listening; its error is reported below.
        Err(_) => Err(RpingError::Stalled("waiting for the server to listen")),
    };
    // Keep the client's core running (FIN, acknowledgements) until the server is done.
    while !server.is_finished() {
        core_a.poll();
    }
    a.shutdown();
    let server = server
        .join()
        .map_err(|_| RpingError::Protocol("the server thread panicked".into()))?;
    match (client, server) {
        (Ok(c), Ok(s)) => Ok((c, s)),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_wire_layout() {
        let i = RdmaInfo {
            buf: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 64,
        };
        let b = i.encode();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(RdmaInfo::decode(&b).unwrap(), i);
        for n in [0, 15, 17, 64] {
            let e = RdmaInfo::decode(&vec![0; n]).unwrap_err().to_string();
            assert!(e.contains(&format!("size {n}")), "{e}");
        }
    }

    #[test]
    fn ping_pattern_matches_rping() {
        let mut b = vec![0xffu8; 64];
        fill_ping(&mut b, 0);
        let expect = "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr";
        assert_eq!(ping_text(&b), expect);
        assert_eq!(b[63], 0);
        assert_eq!(expect.len(), 63);
        fill_ping(&mut b, 1);
        assert!(ping_text(&b).starts_with("rdma-ping-1: BCDEF"));
        // The letters wrap from 'z' to 'A'; the start letter wraps every 58 pings.
        fill_ping(&mut b, 57);
        assert!(ping_text(&b).starts_with("rdma-ping-57: zABC"));
        fill_ping(&mut b, 58);
        assert!(ping_text(&b).starts_with("rdma-ping-58: ABC"));
        let mut small = vec![0u8; MIN_SIZE];
        fill_ping(&mut small, 2_147_483_647);
        assert_eq!(ping_text(&small), "rdma-ping-2147483647: HIJ");
        let mut tiny = vec![0u8; 4];
        fill_ping(&mut tiny, 3);
        assert_eq!(tiny, b"rdm\0");
        fill_ping(&mut [], 0);
    }

    #[test]
    fn sizes_checked() {
        for size in [0, MIN_SIZE - 1, MAX_SIZE + 1] {
            let o = RpingOptions {
                size,
                ..Default::default()
            };
            let e = validate_options(&o).unwrap_err().to_string();
            assert!(e.contains("valid range is 26 to 65535"), "{e}");
        }
    }
}
