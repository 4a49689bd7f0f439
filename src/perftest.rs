//! perftest's `-R` (rdma_cm) protocol: `iwarp bench TEST --perftest` against
//! `ib_write_bw -R`, `ib_read_bw -R`, `ib_send_bw -R`, `ib_write_lat -R`, `ib_read_lat -R`
//! and `ib_send_lat -R` (perftest 4.5) in either role.
//!
//! What perftest 4.5 does with `-R`, as observed on the wire (siw ↔ siw captures decoded
//! with `iwarp decode --pcap`) and read in its source:
//!
//! * **Two connections to the same TCP port** (18515). The first carries perftest's
//!   control exchange ("Data ex. method: rdma_cm"); the second is the test QP. Neither
//!   carries MPA private data beyond the enhanced IRD/ORD word. The control connection asks
//!   IRD = ORD = 0; the test connection asks IRD = ORD = 0 for write and send, and
//!   `out_reads` for both (the device's `max_qp_rd_atom`, 128 on siw; `-o N`) for read.
//! * **Every control message is a Send on the control QP**, and every exchange is
//!   symmetric: the client Sends its value and then waits for the server's; the server
//!   waits for the client's, reposts its single receive (56 octets) and Sends its own. So
//!   on the wire the client's message always comes first. The sequence ([`control_script`]):
//!   1. version: 16 octets, a NUL-padded string (`"6.06"` for perftest 4.5);
//!   2. cycle buffer (page size) and cache line size: two 4-octet big-endian integers
//!      (only with a peer version ≥ 5.32);
//!   3. MTU: 2 octets, the `ibv_mtu` enum as a decimal string (`"3\0"`: 1024);
//!   4. a 56-octet [`Dest`] of zeros; then the client connects the test QP (retrying up
//!      to 10 times, 100 ms apart, while the server is not listening yet);
//!   5. a zero [`Dest`] again, then 3 (write, read) or 4 (send) exchanges of the real
//!      [`Dest`]: QPN, PSN, the buffer's rkey and address (for send on iWARP: the credit
//!      buffer's), GID, all big-endian. The server posts its receives before the last one;
//!   6. the traffic;
//!   7. a [`Dest`] exchange ("the client is done");
//!   8. write and read only: the client's results, five 8-octet big-endian values (size,
//!      iterations, peak, average and message rate as IEEE doubles; iterations are 4
//!      octets with a peer version below 5.33), the server's garbage in return, then a
//!      last [`Dest`] exchange. The server prints the client's figures.
//! * **send_bw on iWARP uses credits**, since iWARP has no RNR retry: each side's
//!   [`Dest`] names a 4-octet credit word (rkey, address). The server RDMA-Writes its
//!   running receive count there (host order, little-endian on x86) every
//!   `rx_depth / 3` receives; the client posts a Send only while
//!   `sent + 1 - credit < rx_depth`. `rx_depth` is 512, or the iteration count when smaller;
//!   both sides must be run with the same `-n` and `-s`, as with perftest itself: the
//!   server counts `-n` receives and then prints its own measurement (peak 0).
//!
//! * **The latency tests** (captured siw ↔ siw, perftest 4.5): the same preamble, zero
//!   [`Dest`]s and test connection (IRD = ORD = 0, read_lat `out_reads` = 128), then **4**
//!   [`Dest`] exchanges naming each side's buffer; no results are exchanged, each side
//!   prints its own figures.
//!   - write_lat: a ping-pong of `size`-octet RDMA Writes to the peer's buffer whose last
//!     octet counts the messages (1, 2, ... modulo 256); each side spins on the last octet
//!     of its own buffer. **The server writes first**; then the control connection closes.
//!     RFC 5044 7.1.2 rule 4 forbids a Responder to send before it has received the
//!     Initiator's first FPDU (siw does it anyway), so our server needs a client that
//!     offers peer-to-peer (RFC 6581: its RTR comes first) and refuses one that does not.
//!   - send_lat: a ping-pong of Sends, **the client first**; both sides post their
//!     receives before the exchange; a final [`Dest`] exchange.
//!   - read_lat: the client Reads `size` octets from the server's buffer, one at a time;
//!     the server serves them and waits in a final [`Dest`] exchange; it prints nothing.
//!
//!   perftest's latency is the time between one side's successive posts: half of it for
//!   the ping-pongs (one way), all of it for read_lat.
//!
//! Both roles drive their [`Core`] themselves, like [`crate::rping`].

use std::fmt;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use control::verbs::{
    AcceptParams, Access, CmError, Completion, ConnInfo, ConnRequest, Core, Cq, Device,
    InitiatorConfig, Listener, Mr, Pd, PostError, QpInit, QpRingState, QueuePair, RecvWr,
    ResponderConfig, SendOp, SendWr, WcStatus,
};

use crate::bench::Test;
use crate::driver::{DriverError, Endpoint};
use crate::report::{BwMeter, BwSample, LatMeter, LatSample, Report, ReportParams, Sample};

/// perftest's TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// The version string we announce: perftest 4.5's internal version, whose exchange we
/// speak.
pub const VERSION: &str = "6.06";
/// Octets of the version message.
pub const VERSION_LEN: usize = 16;
/// Octets of an encoded [`Dest`] (`struct pingpong_dest`).
pub const DEST_LEN: usize = 56;
/// perftest's default receive depth of send_bw (`DEF_RX_SEND`).
pub const DEF_RX_SEND: u64 = 512;
/// perftest's default send depth of the bandwidth tests.
pub const DEF_TX_BW: usize = 128;
/// The cycle buffer (page size) we announce.
pub const CYCLE_BUFFER: u32 = 4096;
/// The cache line size we announce.
pub const CACHE_LINE: u32 = 64;
/// The MTU message we announce: `IBV_MTU_1024` as perftest writes it.
pub const MTU_MSG: [u8; 2] = *b"3\0";
/// Times the client tries to connect the test QP (perftest's `retry_rdma_connect`).
pub const CONNECT_RETRIES: u32 = 10;

/// `struct pingpong_dest`: one side's QP and buffer, big-endian on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// LID (0 on iWARP).
    pub lid: u32,
    /// Outstanding RDMA Reads this side allows.
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// Packet sequence number (meaningless on iWARP).
    pub psn: u32,
    /// STag of the buffer (send on iWARP: of the credit word).
    pub rkey: u32,
    /// Address (Tagged Offset) of the buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: [u8; 16],
    /// SRQ number.
    pub srqn: u32,
    /// GID index.
    pub gid_index: i32,
}

impl Dest {
    /// The 56 octets on the wire (the C struct's layout: 4 octets of padding before
    /// `vaddr`).
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// Parses a received message of exactly [`DEST_LEN`] octets.
    pub fn decode(b: &[u8]) -> Result<Dest, PerftestError> {
        if b.len() != DEST_LEN {
            return Err(PerftestError::Protocol(format!(
                "expected a {DEST_LEN}-octet address message, got {} octets",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        Ok(Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: u32_at(48),
            gid_index: u32_at(52) as i32,
        })
    }
}

/// The client's results as perftest sends them after a write or read test.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth (perftest's MB/sec, 2^20 octets).
    pub peak: f64,
    /// Average bandwidth.
    pub avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five messages, in order; `iters_len` is 8, or 4 for a peer older than 5.33.
    pub fn encode(&self, iters_len: usize) -> [Vec<u8>; 5] {
        let iters = if iters_len == 4 {
            (self.iters as u32).to_be_bytes().to_vec()
        } else {
            self.iters.to_be_bytes().to_vec()
        };
        [
            self.size.to_be_bytes().to_vec(),
            iters,
            self.peak.to_bits().to_be_bytes().to_vec(),
            self.avg.to_bits().to_be_bytes().to_vec(),
            self.msg_rate.to_bits().to_be_bytes().to_vec(),
        ]
    }

    /// Parses the five messages.
    pub fn decode(m: &[Vec<u8>]) -> Result<BwReport, PerftestError> {
        let bad = || PerftestError::Protocol("malformed result messages".into());
        if m.len() != 5 {
            return Err(bad());
        }
        let u64_of = |v: &[u8]| -> Result<u64, PerftestError> {
            match v.len() {
                8 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(v);
                    Ok(u64::from_be_bytes(a))
                }
                4 => Ok(u64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))),
                _ => Err(bad()),
            }
        };
        Ok(BwReport {
            size: u64_of(&m[0])?,
            iters: u64_of(&m[1])?,
            peak: f64::from_bits(u64_of(&m[2])?),
            avg: f64::from_bits(u64_of(&m[3])?),
            msg_rate: f64::from_bits(u64_of(&m[4])?),
        })
    }

    /// As a report line.
    pub fn sample(&self) -> BwSample {
        BwSample {
            bytes: self.size,
            iterations: self.iters,
            peak_mib_s: self.peak,
            avg_mib_s: self.avg,
            msg_rate_mpps: self.msg_rate,
            min_interval_mib_s: None,
            completions: None,
        }
    }
}

/// The numeric value of a version string such as `"6.06"` (perftest compares them with
/// `atof`); 0.0 when it does not parse.
pub fn version_number(v: &str) -> f64 {
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    v[..end].parse().unwrap_or(0.0)
}

/// One step of the control exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The version strings.
    Version,
    /// Cycle buffer and cache line size (two exchanges).
    SysData,
    /// The MTU.
    Mtu,
    /// A zero [`Dest`] (before the test QP has one).
    ZeroDest,
    /// The client connects the test QP here.
    ConnectTest,
    /// The real [`Dest`].
    Dest,
    /// The traffic runs here.
    Traffic,
    /// The client's results (five exchanges).
    Results,
}

/// The [`Dest`] exchanges between the test connection and the traffic: 4 for send_bw
/// and the latency tests, 3 for write_bw and read_bw.
pub fn dest_exchanges(test: Test) -> usize {
    if test == Test::SendBw || test.is_latency() {
        4
    } else {
        3
    }
}

/// The control exchange of `test`, in order.
pub fn control_script(test: Test) -> Vec<Step> {
    use Step::*;
    let mut s = vec![Version, SysData, Mtu, ZeroDest, ConnectTest, ZeroDest];
    s.extend(std::iter::repeat_n(Dest, dest_exchanges(test)));
    s.push(Traffic);
    if test != Test::WriteLat {
        s.push(Dest);
    }
    if matches!(test, Test::WriteBw | Test::ReadBw) {
        s.push(Results);
        s.push(Dest);
    }
    s
}

/// Options of either role.
#[derive(Debug, Clone)]
pub struct PerftestOptions {
    /// Any of the six tests.
    pub test: Test,
    /// Message size (`-s`), 1..=8 MiB.
    pub size: usize,
    /// Messages (`-n`); the send_bw server counts this many receives. Latency tests: the
    /// round trips (reads).
    pub iters: u64,
    /// Work requests in flight (`-t`); latency tests have one.
    pub tx_depth: usize,
    /// send_bw receive depth (`-r`); default [`DEF_RX_SEND`] or `iters` when smaller, as
    /// perftest (both sides must agree).
    pub rx_depth: Option<u64>,
    /// MPA Initiator settings (client). IRD/ORD of the test connection come from here for
    /// read; write and send ask what perftest asks unless `ird_ord` is set.
    pub initiator: InitiatorConfig,
    /// IRD/ORD the client asks for on the test connection (default: perftest's, 0 for
    /// write and send, `initiator.ird/ord` for read_bw and read_lat).
    pub ird_ord: Option<(u16, u16)>,
    /// MPA Responder settings (server).
    pub responder: ResponderConfig,
    /// How the server accepts the test connection.
    pub accept: AcceptParams,
    /// How long one step may take.
    pub step_timeout: Duration,
    /// Server: how long to wait for a client; `None`: forever.
    pub accept_timeout: Option<Duration>,
    /// The MPA mode and link, for the report banner.
    pub mpa_label: String,
    /// The link, for the report banner.
    pub link_label: String,
}

impl Default for PerftestOptions {
    fn default() -> Self {
        PerftestOptions {
            test: Test::WriteBw,
            size: 65536,
            iters: 1000,
            tx_depth: DEF_TX_BW,
            rx_depth: None,
            initiator: InitiatorConfig::default(),
            ird_ord: None,
            responder: ResponderConfig::default(),
            accept: AcceptParams::default(),
            step_timeout: Duration::from_secs(30),
            accept_timeout: None,
            mpa_label: String::new(),
            link_label: String::new(),
        }
    }
}

impl PerftestOptions {
    /// send_bw's receive depth: [`PerftestOptions::rx_depth`] or perftest's default.
    pub fn effective_rx_depth(&self) -> u64 {
        self.rx_depth.unwrap_or(DEF_RX_SEND.min(self.iters)).max(1)
    }
}

/// What a run did and what it printed.
#[derive(Debug, Clone)]
pub struct PerftestOutcome {
    /// The line this side prints (client: its measurement; server: the client's for
    /// write_bw and read_bw, its own for the others; none for the read_lat server, which
    /// prints nothing, as perftest's).
    pub sample: Option<Sample>,
    /// Messages this side moved or counted (client: completed; send server: received;
    /// latency: round trips or reads; the read_lat server: 0, it does not count them).
    pub messages: u64,
    /// The latencies, in nanoseconds, of a latency test (for `--hgrm` and `--plot`).
    pub histogram: Option<hdrhistogram::Histogram<u64>>,
    /// The peer's version string.
    pub peer_version: String,
    /// The peer's test QP [`Dest`].
    pub peer_dest: Dest,
    /// The test connection as established (IRD/ORD negotiated).
    pub test_conn: Option<ConnInfo>,
    /// The IRD/ORD the peer asked for on the test connection (server) or answered
    /// (client).
    pub peer_ird_ord: (u16, u16),
    /// The whole report, for [`crate::report::to_text`].
    pub report: Report,
}

/// Why a run failed.
#[derive(Debug)]
pub enum PerftestError {
    /// Bad options.
    Options(String),
    /// A connection could not be set up.
    Connect(CmError),
    /// A work request completed in error.
    Completion(Completion),
    /// The peer broke the protocol.
    Protocol(String),
    /// A step took longer than [`PerftestOptions::step_timeout`].
    Stalled(String),
}

impl fmt::Display for PerftestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerftestError::Options(s) => write!(f, "invalid options: {s}"),
            PerftestError::Connect(e) => write!(f, "connection failed: {e}"),
            PerftestError::Completion(c) => f.write_str(&crate::bench::describe_completion(c)),
            PerftestError::Protocol(s) => write!(f, "protocol error: {s}"),
            PerftestError::Stalled(what) => write!(f, "timed out while {what}"),
        }
    }
}

impl std::error::Error for PerftestError {}

/// Checks the options of either role.
pub fn validate_options(o: &PerftestOptions) -> Result<(), PerftestError> {
    if o.size == 0 || o.size > 8 << 20 {
        return Err(PerftestError::Options(format!(
            "size {} is outside 1..=8388608",
            o.size
        )));
    }
    if o.iters == 0 {
        return Err(PerftestError::Options(
            "iterations must be at least 1".into(),
        ));
    }
    if o.tx_depth == 0 || o.tx_depth > 8192 {
        return Err(PerftestError::Options(format!(
            "tx depth {} is outside 1..=8192",
            o.tx_depth
        )));
    }
    if o.test == Test::SendBw && !(2..=8192).contains(&o.effective_rx_depth()) {
        return Err(PerftestError::Options(
            "send-bw needs a receive depth of 2..=8192 (perftest's credits stall at 1)".into(),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The engine: one core, the control QP and the test QP.
// ---------------------------------------------------------------------------------------

const WR_CTL_RECV: u64 = 0x1_0000;
const WR_CTL_SEND: u64 = 0x2_0000;
const WR_CREDIT: u64 = 0x3_0000;
const WR_LAT_SEND: u64 = 0x4_0000;
const WR_LAT_RECV: u64 = 0x5_0000;
const WR_KIND: u64 = 0xf_0000;
/// Receives each side of send_lat keeps posted.
const LAT_RECVS: u64 = 16;
/// Receives kept posted on the control QP.
const CTL_RECVS: u64 = 4;
/// Receive slot size on the control QP (perftest posts 56 octets).
const CTL_SLOT: usize = 64;
/// Credit words the send_bw server cycles through.
const CREDIT_SLOTS: u64 = 64;
/// Receive buffers the send_bw server cycles through (the data is not checked).
const DATA_SLOTS: u64 = 16;

fn reg(pd: &Pd, len: usize, access: Access) -> Result<Mr, PerftestError> {
    pd.reg_mr(len, access)
        .map_err(|e| PerftestError::Protocol(format!("registering {len} octets: {e}")))
}

fn stalled(what: impl Into<String>) -> PerftestError {
    PerftestError::Stalled(what.into())
}

/// The control connection on the shared driver ([`Endpoint`], which drives the caller's
/// core), its message buffers, and which side of the exchange this is.
struct Ctl<'a> {
    ep: Endpoint<&'a mut Core>,
    recv: Mr,
    send: Mr,
    client: bool,
}

impl<'a> Ctl<'a> {
    fn new(
        dev: &Device,
        core: &'a mut Core,
        o: &PerftestOptions,
        client: bool,
    ) -> Result<Ctl<'a>, PerftestError> {
        let mut ep = Endpoint::with_core(dev, core, 16, CTL_RECVS as usize + 4);
        ep.stall = o.step_timeout;
        let recv = reg(&ep.pd, CTL_SLOT * CTL_RECVS as usize, Access::LOCAL_WRITE)?;
        let send = reg(&ep.pd, CTL_SLOT, Access::LOCAL_WRITE)?;
        let ctl = Ctl {
            ep,
            recv,
            send,
            client,
        };
        for s in 0..CTL_RECVS {
            ctl.post_recv(s)?;
        }
        Ok(ctl)
    }

    /// The core, to drive it meanwhile.
    fn core(&mut self) -> &mut Core {
        self.ep
            .core_mut()
            .unwrap_or_else(|| unreachable!("a Ctl drives its core"))
    }

    /// One round of the core; control completions wait in the driver's backlog.
    fn pump(&mut self) {
        self.ep.pump_backlog();
    }

    /// The first failed control completion, if any.
    fn failure(&self) -> Option<Completion> {
        self.ep.backlog_failure()
    }

    /// Waits for a connection answer.
    fn connected(
        &mut self,
        p: &control::verbs::Pending<ConnInfo>,
        what: &str,
    ) -> Result<ConnInfo, PerftestError> {
        self.ep.wait(p, "connecting").map_err(|e| match e {
            DriverError::Connect(e) => PerftestError::Connect(e),
            _ => stalled(what.to_string()),
        })
    }

    fn post_recv(&self, slot: u64) -> Result<(), PerftestError> {
        self.ep
            .qp
            .post_recv(RecvWr {
                wr_id: WR_CTL_RECV | slot,
                local: self.recv.sge(slot * CTL_SLOT as u64, CTL_SLOT as u32),
            })
            .map_err(|e| PerftestError::Protocol(format!("posting a control receive: {e}")))
    }

    /// Waits for a control completion of `kind` ([`Endpoint::wait_wr`]).
    fn wait(&mut self, kind: u64, what: &str) -> Result<Completion, PerftestError> {
        self.ep
            .wait_wr(WR_KIND, kind, "a control message")
            .map_err(|e| match e {
                DriverError::Closed => PerftestError::Protocol(format!(
                    "the peer closed the control connection while {what}"
                )),
                DriverError::Completion(c) => PerftestError::Completion(c),
                _ => stalled(what.to_string()),
            })
    }

    fn send(&mut self, msg: &[u8], what: &str) -> Result<(), PerftestError> {
        self.send
            .write(0, msg)
            .map_err(|e| PerftestError::Protocol(format!("writing a control message: {e}")))?;
        let wr = SendWr {
            wr_id: WR_CTL_SEND,
            op: SendOp::Send,
            local: self.send.sge(0, msg.len() as u32),
            signaled: true,
        };
        self.ep.post_send(wr).map_err(|e| match e {
            DriverError::Stalled(..) => stalled(what.to_string()),
            e => PerftestError::Protocol(format!("posting a control Send while {what}: {e}")),
        })?;
        self.wait(WR_CTL_SEND, what).map(|_| ())
    }

    fn recv(&mut self, what: &str) -> Result<Vec<u8>, PerftestError> {
        let c = self.wait(WR_CTL_RECV, what)?;
        let slot = c.wr_id & 0xffff;
        let len = (c.byte_len as usize).min(CTL_SLOT);
        let mut b = vec![0u8; len];
        self.recv
            .read(slot as usize * CTL_SLOT, &mut b)
            .map_err(|e| PerftestError::Protocol(format!("reading a control message: {e}")))?;
        // After the last exchange the peer may already have closed: a receive that cannot
        // be reposted then is not an error (a later wait reports the closed connection).
        let _ = self.post_recv(slot);
        Ok(b)
    }

    /// One symmetric exchange: the client Sends first, the server answers.
    fn exchange(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, PerftestError> {
        if self.client {
            self.send(mine, what)?;
            self.recv(what)
        } else {
            let theirs = self.recv(what)?;
            self.send(mine, what)?;
            Ok(theirs)
        }
    }

    /// Steps 1-3: version, system data, MTU. Returns the peer's version string.
    fn preamble(&mut self) -> Result<String, PerftestError> {
        let mut v = [0u8; VERSION_LEN];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.exchange(&v, "exchanging versions")?;
        let end = theirs.iter().position(|&b| b == 0).unwrap_or(theirs.len());
        let peer = String::from_utf8_lossy(&theirs[..end]).into_owned();
        if version_number(&peer) >= 5.32 {
            self.exchange(&CYCLE_BUFFER.to_be_bytes(), "exchanging the page size")?;
            self.exchange(&CACHE_LINE.to_be_bytes(), "exchanging the cache line size")?;
        }
        self.exchange(&MTU_MSG, "exchanging the MTU")?;
        Ok(peer)
    }

    fn dest(&mut self, mine: &Dest, what: &str) -> Result<Dest, PerftestError> {
        let b = self.exchange(&mine.encode(), what)?;
        Dest::decode(&b)
    }
}

fn gid_of(mac: [u8; 6]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..6].copy_from_slice(&mac);
    g
}

/// The test QP: its CQ, buffers and completions.
struct TestQp {
    qp: QueuePair,
    cq: Cq,
    /// The data buffer (write/read: the target or source; send: the receive slots or
    /// the message).
    data: Mr,
    /// Credit words (send_bw): client: one word the server writes; server: the words it
    /// writes from.
    credit: Mr,
    /// Latency tests: where in `data` what this side sends starts (the first part,
    /// `[0, size)`, is what the peer writes, reads or what receives land in).
    send_at: u64,
}

fn test_qp(
    dev: &Device,
    pd: &Pd,
    o: &PerftestOptions,
    server: bool,
) -> Result<TestQp, PerftestError> {
    let rx = match o.test {
        Test::SendBw if server => o.effective_rx_depth(),
        Test::SendLat => LAT_RECVS,
        _ => 0,
    };
    let cq = dev.create_cq((o.tx_depth + rx as usize) * 2 + 64);
    let mut init = QpInit::new(&cq, &cq);
    init.max_send_wr = o.tx_depth.max(CREDIT_SLOTS as usize) + 16;
    init.max_recv_wr = rx as usize + 16;
    let qp = pd.create_qp(&init);
    let remote = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    // Latency tests: what the peer writes (its last octet counted from 0) and, a page
    // further, what this side sends.
    let page = CYCLE_BUFFER as usize;
    let send_at = if o.test.is_latency() {
        o.size.div_ceil(page) * page
    } else {
        0
    };
    let data_len = if o.test == Test::SendBw && server {
        o.size * DATA_SLOTS as usize
    } else if o.test.is_latency() {
        send_at * 2
    } else {
        o.size.max(page)
    };
    let data = reg(pd, data_len, remote)?;
    // perftest's buffers hold arbitrary data; ours a simple pattern (the latency tests'
    // targets start at zero: their last octet counts).
    let pattern: Vec<u8> = (0..data_len - send_at).map(|i| (i % 251) as u8).collect();
    data.write(send_at, &pattern)
        .map_err(|e| PerftestError::Protocol(format!("filling the buffer: {e}")))?;
    let credit = reg(
        pd,
        4 * CREDIT_SLOTS as usize,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )?;
    let t = TestQp {
        qp,
        cq,
        data,
        credit,
        send_at: send_at as u64,
    };
    if o.test == Test::SendLat {
        for i in 0..LAT_RECVS {
            post_lat_recv(&t, o, i)?;
        }
    }
    Ok(t)
}

/// A send_lat receive: into the first `size` octets (the data is not checked).
fn post_lat_recv(t: &TestQp, o: &PerftestOptions, i: u64) -> Result<(), PerftestError> {
    t.qp.post_recv(RecvWr {
        wr_id: WR_LAT_RECV | (i & 0xffff),
        local: t.data.sge(0, o.size as u32),
    })
    .map_err(|e| PerftestError::Protocol(format!("posting a receive: {e}")))
}

fn my_dest(t: &TestQp, o: &PerftestOptions, out_reads: u16, mac: [u8; 6]) -> Dest {
    let (rkey, vaddr) = if o.test == Test::SendBw {
        (t.credit.key(), t.credit.base_to())
    } else {
        (t.data.key(), t.data.base_to())
    };
    Dest {
        lid: 0,
        out_reads: u32::from(out_reads),
        qpn: t.qp.qpn(),
        psn: t.qp.qpn().wrapping_mul(0x9e37_79b9) & 0x00ff_ffff,
        rkey,
        vaddr,
        gid: gid_of(mac),
        srqn: 0,
        gid_index: 0,
    }
}

fn report_of(o: &PerftestOptions, sample: Option<Sample>) -> Report {
    Report {
        test: o.test.verb().to_string(),
        params: ReportParams {
            size: o.size as u64,
            iterations: o.iters,
            duration_s: None,
            mpa: o.mpa_label.clone(),
            faults: "none".into(),
            link: o.link_label.clone(),
            report_gbits: false,
            tx_depth: if o.test.is_latency() {
                1
            } else {
                o.tx_depth as u64
            },
            post_list: 1,
            cq_mod: 1,
            qps: 1,
            cores: 1,
            bidirectional: false,
        },
        samples: sample.into_iter().collect(),
        verify: None,
        alignment: None,
        thresholds: None,
        intervals: Vec::new(),
        per_qp: Vec::new(),
        schema: crate::report::REPORT_SCHEMA,
    }
}

/// Runs perftest's client against the `ib_*_bw -R` server at `server`. `mac` is our
/// port's address (it goes into the GID perftest prints).
pub fn run_client(
    dev: &Device,
    core: &mut Core,
    server: SocketAddrV4,
    o: &PerftestOptions,
    mac: [u8; 6],
) -> Result<PerftestOutcome, PerftestError> {
    validate_options(o)?;
    let mut ctl = Ctl::new(dev, core, o, true)?;
    // The control connection asks what perftest asks: IRD = ORD = 0.
    let mut ctl_cfg = o.initiator.clone();
    ctl_cfg.ird = 0;
    ctl_cfg.ord = 0;
    let p = dev.connect(
        &ctl.ep.qp,
        server,
        crate::rping::with_first_fpdu_delay(&ctl_cfg),
    );
    let ctl_info = ctl.connected(&p, "connecting the control QP")?;
    let result = client_session(dev, &mut ctl, server, o, mac);
    if let Ok((_, Some(info))) = &result {
        crate::driver::close(dev, ctl.core(), info.conn);
    }
    ctl.ep.disconnect(dev, ctl_info.conn);
    result.map(|(out, _)| out)
}

type Session = (PerftestOutcome, Option<ConnInfo>);

fn client_session(
    dev: &Device,
    ctl: &mut Ctl<'_>,
    server: SocketAddrV4,
    o: &PerftestOptions,
    mac: [u8; 6],
) -> Result<Session, PerftestError> {
    let peer_version = ctl.preamble()?;
    ctl.dest(&Dest::default(), "exchanging the first empty address")?;
    // Connect the test QP, retrying while the server is not listening yet.
    let (ird, ord) = o
        .ird_ord
        .unwrap_or(if matches!(o.test, Test::ReadBw | Test::ReadLat) {
            (o.initiator.ird, o.initiator.ord)
        } else {
            (0, 0)
        });
    let mut cfg = crate::rping::with_first_fpdu_delay(&o.initiator);
    cfg.ird = ird;
    cfg.ord = ord;
    let mut attempt = 0;
    let (t, info) = loop {
        let t = test_qp(dev, &ctl.ep.pd, o, false)?;
        let p = dev.connect(&t.qp, server, cfg.clone());
        match ctl.connected(&p, "connecting the test QP") {
            Ok(info) => break (t, info),
            // A rejection is an answer: only a server not listening yet is retried.
            Err(PerftestError::Connect(err))
                if attempt + 1 < CONNECT_RETRIES && !matches!(err, CmError::Rejected(_)) =>
            {
                attempt += 1;
                let _ = err;
                let until = Instant::now() + Duration::from_millis(100);
                while Instant::now() < until {
                    ctl.pump();
                }
            }
            Err(err) => return Err(err),
        }
    };
    let peer_ird_ord = info
        .established
        .ird_ord
        .map_or((0, 0), |x| (x.peer_ird, x.peer_ord));
    ctl.dest(&Dest::default(), "exchanging the second empty address")?;
    let mine = my_dest(&t, o, info.ird, mac);
    let n_dest = dest_exchanges(o.test);
    let mut peer = Dest::default();
    for i in 0..n_dest {
        peer = ctl.dest(&mine, &format!("exchanging addresses ({}/{n_dest})", i + 1))?;
    }
    let measured = if o.test.is_latency() {
        let meter = match o.test {
            Test::ReadLat => read_lat(ctl, &t, &peer, o, info.ord)?,
            // send_lat's client sends first, write_lat's server writes first.
            _ => ping_pong(ctl, &t, &peer, o, o.test == Test::SendLat)?,
        };
        if o.test != Test::WriteLat {
            ctl.dest(&mine, "telling the server the test is done")?;
        }
        Measured::lat(o, &meter)
    } else {
        let sample = client_traffic(ctl, &t, &peer, o, info.ord)?;
        ctl.dest(&mine, "telling the server the test is done")?;
        if o.test != Test::SendBw {
            client_results(ctl, &mine, o, &sample, &peer_version)?;
        }
        Measured::bw(sample, sample.iterations)
    };
    let out = measured.outcome(o, peer_version, peer, Some(info.clone()), peer_ird_ord);
    Ok((out, Some(info)))
}

/// write_bw and read_bw: the client's results to the server, which prints them.
fn client_results(
    ctl: &mut Ctl<'_>,
    mine: &Dest,
    o: &PerftestOptions,
    sample: &BwSample,
    peer_version: &str,
) -> Result<(), PerftestError> {
    let version = version_number(peer_version);
    let mine_r = BwReport {
        size: o.size as u64,
        iters: sample.iterations,
        peak: sample.peak_mib_s,
        avg: sample.avg_mib_s,
        msg_rate: sample.msg_rate_mpps,
    };
    for m in mine_r.encode(if version >= 5.33 { 8 } else { 4 }) {
        ctl.exchange(&m, "exchanging results")?;
    }
    ctl.dest(mine, "closing the exchange")?;
    Ok(())
}

/// What one side measured (or, for write_bw and read_bw servers, was told).
struct Measured {
    sample: Option<Sample>,
    messages: u64,
    histogram: Option<hdrhistogram::Histogram<u64>>,
}

impl Measured {
    fn bw(sample: BwSample, messages: u64) -> Measured {
        Measured {
            sample: Some(Sample::Bw(sample)),
            messages,
            histogram: None,
        }
    }

    /// A latency test's figures (perftest's `#iterations` column is the number of round
    /// trips, `-n`, though the ping-pongs time one fewer).
    fn lat(o: &PerftestOptions, meter: &LatMeter) -> Measured {
        let sample = LatSample {
            iterations: o.iters,
            ..meter.sample()
        };
        Measured {
            sample: Some(Sample::Lat(sample)),
            messages: o.iters,
            histogram: Some(meter.histogram().clone()),
        }
    }

    /// The read_lat server: it measures nothing.
    fn nothing() -> Measured {
        Measured {
            sample: None,
            messages: 0,
            histogram: None,
        }
    }

    fn outcome(
        self,
        o: &PerftestOptions,
        peer_version: String,
        peer_dest: Dest,
        test_conn: Option<ConnInfo>,
        peer_ird_ord: (u16, u16),
    ) -> PerftestOutcome {
        PerftestOutcome {
            report: report_of(o, self.sample),
            sample: self.sample,
            messages: self.messages,
            histogram: self.histogram,
            peer_version,
            peer_dest,
            test_conn,
            peer_ird_ord,
        }
    }
}

/// What a latency test's wait saw: send completions and receives (send_lat).
#[derive(Default)]
struct LatCounts {
    sends: u64,
    recvs: u64,
}

/// Pumps the core until `done` holds, counting the test QP's completions; fails on an
/// error completion, on the control connection's, or after [`PerftestOptions::step_timeout`].
fn lat_wait(
    ctl: &mut Ctl<'_>,
    t: &TestQp,
    o: &PerftestOptions,
    n: &mut LatCounts,
    what: &dyn Fn() -> String,
    done: &mut dyn FnMut(&LatCounts) -> Result<bool, PerftestError>,
) -> Result<(), PerftestError> {
    let since = Instant::now();
    loop {
        while let Some(c) = t.cq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(PerftestError::Completion(c));
            }
            match c.wr_id & WR_KIND {
                WR_LAT_RECV => {
                    n.recvs += 1;
                    post_lat_recv(t, o, c.wr_id & 0xffff)?;
                }
                _ => n.sends += 1,
            }
        }
        if done(n)? {
            return Ok(());
        }
        if let Some(c) = ctl.failure() {
            return Err(PerftestError::Completion(c));
        }
        if since.elapsed() > o.step_timeout {
            return Err(stalled(what()));
        }
        ctl.pump();
    }
}

/// write_lat and send_lat: `iters` messages each way, one at a time; `first`: this side
/// sends first. Records half of each interval between this side's posts.
fn ping_pong(
    ctl: &mut Ctl<'_>,
    t: &TestQp,
    peer: &Dest,
    o: &PerftestOptions,
    first: bool,
) -> Result<LatMeter, PerftestError> {
    let size = o.size as u32;
    let last = o.size - 1;
    let write = o.test == Test::WriteLat;
    let op = if write {
        SendOp::Write {
            remote_stag: peer.rkey,
            remote_to: peer.vaddr,
        }
    } else {
        SendOp::Send
    };
    let mut meter = LatMeter::new(o.size as u64);
    let mut n = LatCounts::default();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut last_post: Option<Instant> = None;
    let mut octet = [0u8; 1];
    while sent < o.iters || received < o.iters {
        if received < o.iters && !(sent == 0 && first) {
            received += 1;
            let want = received;
            lat_wait(
                ctl,
                t,
                o,
                &mut n,
                &|| format!("waiting for message {want} of {} from the peer", o.iters),
                &mut |n| {
                    if write {
                        t.data.read(last, &mut octet).map_err(|e| {
                            PerftestError::Protocol(format!("reading the buffer: {e}"))
                        })?;
                        Ok(octet[0] == want as u8)
                    } else {
                        Ok(n.recvs >= want)
                    }
                },
            )?;
        }
        if sent < o.iters {
            sent += 1;
            let now = Instant::now();
            if let Some(p) = last_post.replace(now) {
                meter.record(now.duration_since(p) / 2);
            }
            if write {
                t.data
                    .write(t.send_at as usize + last, &[sent as u8])
                    .map_err(|e| PerftestError::Protocol(format!("writing the buffer: {e}")))?;
            }
            let wr = SendWr {
                wr_id: WR_LAT_SEND | (sent & 0xffff),
                op,
                local: t.data.sge(t.send_at, size),
                signaled: true,
            };
            t.qp.post_send(wr)
                .map_err(|e| PerftestError::Protocol(format!("posting message {sent}: {e}")))?;
        }
    }
    let total = o.iters;
    lat_wait(
        ctl,
        t,
        o,
        &mut n,
        &|| format!("waiting for the last of {total} messages to complete"),
        &mut |n| Ok(n.sends >= total),
    )?;
    Ok(meter)
}

/// read_lat's client: `iters` RDMA Reads of `size` octets, one at a time, each timed
/// from its post to its completion.
fn read_lat(
    ctl: &mut Ctl<'_>,
    t: &TestQp,
    peer: &Dest,
    o: &PerftestOptions,
    ord: u16,
) -> Result<LatMeter, PerftestError> {
    if ord == 0 {
        return Err(PerftestError::Protocol(
            "the test connection was established with ORD 0: RDMA Read is impossible".into(),
        ));
    }
    let mut meter = LatMeter::new(o.size as u64);
    let mut n = LatCounts::default();
    for i in 1..=o.iters {
        let wr = SendWr {
            wr_id: WR_LAT_SEND | (i & 0xffff),
            op: SendOp::Read {
                remote_stag: peer.rkey,
                remote_to: peer.vaddr,
            },
            local: t.data.sge(0, o.size as u32),
            signaled: true,
        };
        let at = Instant::now();
        t.qp.post_send(wr)
            .map_err(|e| PerftestError::Protocol(format!("posting read {i}: {e}")))?;
        lat_wait(
            ctl,
            t,
            o,
            &mut n,
            &|| format!("waiting for read {i} of {}", o.iters),
            &mut |n| Ok(n.sends >= i),
        )?;
        meter.record(at.elapsed());
    }
    Ok(meter)
}

/// The client's traffic: `iters` Writes, Reads or Sends of `size` octets, at most
/// `tx_depth` in flight (send: within the server's credits).
fn client_traffic(
    ctl: &mut Ctl<'_>,
    t: &TestQp,
    peer: &Dest,
    o: &PerftestOptions,
    ord: u16,
) -> Result<BwSample, PerftestError> {
    if o.test == Test::ReadBw && ord == 0 {
        return Err(PerftestError::Protocol(
            "the test connection was established with ORD 0: RDMA Read is impossible".into(),
        ));
    }
    let depth = (o.tx_depth as u64).min(o.iters);
    let rx_depth = o.effective_rx_depth();
    let size = o.size as u32;
    let op = match o.test {
        Test::WriteBw => SendOp::Write {
            remote_stag: peer.rkey,
            remote_to: peer.vaddr,
        },
        Test::ReadBw => SendOp::Read {
            remote_stag: peer.rkey,
            remote_to: peer.vaddr,
        },
        _ => SendOp::Send,
    };
    let mut meter = BwMeter::with_capacity(u64::from(size), o.iters as usize);
    let (mut posted, mut completed) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_progress = start;
    let mut word = [0u8; 4];
    while completed < o.iters {
        while posted < o.iters && posted - completed < depth {
            if o.test == Test::SendBw {
                t.credit
                    .read(0, &mut word)
                    .map_err(|e| PerftestError::Protocol(format!("reading the credit: {e}")))?;
                let credit = u64::from(u32::from_le_bytes(word));
                if (posted + 1).saturating_sub(credit) >= rx_depth {
                    break;
                }
            }
            let wr = SendWr {
                wr_id: posted,
                op,
                local: t.data.sge(0, size),
                signaled: true,
            };
            match t.qp.post_send(wr) {
                Ok(()) => {
                    meter.post(start.elapsed());
                    posted += 1;
                }
                Err(PostError::QueueFull) => break,
                Err(err) => {
                    return Err(PerftestError::Protocol(format!(
                        "posting message {posted}: {err}"
                    )))
                }
            }
        }
        ctl.pump();
        while let Some(c) = t.cq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(PerftestError::Completion(c));
            }
            meter.complete(start.elapsed());
            completed += 1;
            last_progress = Instant::now();
        }
        if let Some(c) = ctl.failure() {
            return Err(PerftestError::Completion(c));
        }
        if last_progress.elapsed() > o.step_timeout {
            return Err(stalled(format!(
                "running the test ({completed} of {} messages completed, {posted} posted)",
                o.iters
            )));
        }
    }
    Ok(meter.sample())
}

/// Serves one perftest client (`ib_*_bw -R ADDR`) on `listener`.
pub fn run_server(
    dev: &Device,
    core: &mut Core,
    listener: &Listener,
    o: &PerftestOptions,
    mac: [u8; 6],
) -> Result<PerftestOutcome, PerftestError> {
    validate_options(o)?;
    let req = next_request(core, listener, o.accept_timeout, "waiting for a client")?;
    let mut ctl = Ctl::new(dev, core, o, false)?;
    let p = listener.accept(&req, &ctl.ep.qp, AcceptParams::default());
    // Full Operation comes with the client's first FPDU, its version message.
    let ctl_info = ctl.connected(&p, "accepting the control QP")?;
    let result = server_session(dev, &mut ctl, listener, o, mac);
    // perftest's client closes after the last exchange; closing first can flush its last
    // Send before it completes ("Bad wc status"). Give it a moment to go first.
    let until = Instant::now() + Duration::from_secs(2);
    while result.is_ok() && Instant::now() < until && ctl.ep.qp.state() != QpRingState::Error {
        ctl.pump();
    }
    if let Ok((_, Some(conn))) = &result {
        crate::driver::close(dev, ctl.core(), conn.conn);
    }
    ctl.ep.disconnect(dev, ctl_info.conn);
    result.map(|(out, _)| out)
}

fn next_request(
    core: &mut Core,
    listener: &Listener,
    timeout: Option<Duration>,
    what: &str,
) -> Result<ConnRequest, PerftestError> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        core.poll();
        if let Some(r) = listener.try_next() {
            return Ok(r);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(stalled(what.to_string()));
        }
    }
}

fn server_session(
    dev: &Device,
    ctl: &mut Ctl<'_>,
    listener: &Listener,
    o: &PerftestOptions,
    mac: [u8; 6],
) -> Result<Session, PerftestError> {
    let peer_version = ctl.preamble()?;
    let t = test_qp(dev, &ctl.ep.pd, o, true)?;
    let rx_depth = o.effective_rx_depth();
    if o.test == Test::SendBw {
        for i in 0..rx_depth {
            post_data_recv(&t, o, i)?;
        }
    }
    ctl.dest(&Dest::default(), "exchanging the first empty address")?;
    // The client connects the test QP now.
    let until = Instant::now() + o.step_timeout;
    let req = loop {
        ctl.pump();
        if let Some(r) = listener.try_next() {
            break r;
        }
        if Instant::now() > until {
            return Err(stalled("waiting for the test QP's connection"));
        }
    };
    let peer_ird_ord = req.request.initiator_ird_ord.unwrap_or((0, 0));
    if o.test == Test::WriteLat && !req.request.peer_to_peer {
        // perftest's write_lat server writes first; we may not before the client's first
        // FPDU, which only a peer-to-peer client sends (its RTR) before waiting.
        let why = "ib_write_lat's server writes first, but RFC 5044 7.1.2 (rule 4) forbids a \
                   Responder to send before it has received the Initiator's first FPDU, and \
                   this client did not ask for peer-to-peer (RFC 6581), so no RTR will come: \
                   run the client with peer-to-peer on (siw: echo Y > \
                   /sys/module/siw/parameters/peer_to_peer; iwarp: --p2p write)";
        // The Reject's private data carries the gist (siw takes at most 256 octets).
        let gist = "ib_write_lat's server writes first, which RFC 5044 7.1.2 rule 4 allows \
                    only after the client's first FPDU: connect peer-to-peer (RFC 6581)";
        listener.reject(&req, gist.as_bytes().to_vec());
        return Err(PerftestError::Protocol(why.to_string()));
    }
    // A client-server accept completes with the client's first FPDU on the test QP, which
    // comes only after the address exchanges below: keep it pending meanwhile.
    let pending = listener.accept(&req, &t.qp, o.accept.clone());
    let mut info: Option<ConnInfo> = None;
    let poll_accept = |info: &mut Option<ConnInfo>| -> Result<(), PerftestError> {
        if info.is_none() {
            if let Some(r) = pending.try_get() {
                *info = Some(r.map_err(PerftestError::Connect)?);
            }
        }
        Ok(())
    };
    ctl.dest(&Dest::default(), "exchanging the second empty address")?;
    poll_accept(&mut info)?;
    let out_reads = if matches!(o.test, Test::ReadBw | Test::ReadLat) {
        peer_ird_ord.1.min(o.responder.max_ird).max(1)
    } else {
        1
    };
    let mine = my_dest(&t, o, out_reads, mac);
    let n_dest = dest_exchanges(o.test);
    let mut peer = Dest::default();
    for i in 0..n_dest {
        peer = ctl.dest(&mine, &format!("exchanging addresses ({}/{n_dest})", i + 1))?;
        poll_accept(&mut info)?;
    }
    let measured = if o.test.is_latency() {
        match o.test {
            Test::WriteLat => {
                // Full Operation comes with the client's RTR, sent with its Reply.
                let until = Instant::now() + o.step_timeout;
                while info.is_none() {
                    if Instant::now() > until {
                        return Err(stalled("waiting for the client's RTR on the test QP"));
                    }
                    ctl.pump();
                    poll_accept(&mut info)?;
                }
                Measured::lat(o, &ping_pong(ctl, &t, &peer, o, true)?)
            }
            Test::SendLat => {
                let m = ping_pong(ctl, &t, &peer, o, false)?;
                ctl.dest(&mine, "hearing that the client is done")?;
                Measured::lat(o, &m)
            }
            // The client reads on its own; we serve its Reads until it says done.
            _ => {
                ctl.dest(&mine, "waiting for the client to finish")?;
                Measured::nothing()
            }
        }
    } else if o.test == Test::SendBw {
        let s = server_receive(ctl, &t, &peer, o, &mut || poll_accept(&mut info))?;
        ctl.dest(&mine, "hearing that the client is done")?;
        Measured::bw(s, s.iterations)
    } else {
        // The client writes or reads on its own; we serve its FPDUs until it says done.
        ctl.dest(&mine, "waiting for the client to finish")?;
        poll_accept(&mut info)?;
        let mut theirs = Vec::with_capacity(5);
        let blank = BwReport::default();
        let iters_len = if version_number(&peer_version) >= 5.33 {
            8
        } else {
            4
        };
        for m in blank.encode(iters_len) {
            theirs.push(ctl.exchange(&m, "exchanging results")?);
        }
        let r = BwReport::decode(&theirs)?;
        ctl.dest(&mine, "closing the exchange")?;
        Measured::bw(r.sample(), r.iters)
    };
    let deadline = Instant::now() + o.step_timeout;
    while info.is_none() && Instant::now() < deadline {
        ctl.pump();
        poll_accept(&mut info)?;
    }
    if let Some(c) = drain_errors(&t) {
        return Err(PerftestError::Completion(c));
    }
    let out = measured.outcome(o, peer_version, peer, info.clone(), peer_ird_ord);
    Ok((out, info))
}

fn drain_errors(t: &TestQp) -> Option<Completion> {
    let mut bad = None;
    while let Some(c) = t.cq.poll_one() {
        if c.status != WcStatus::Success && c.status != WcStatus::Flushed && bad.is_none() {
            bad = Some(c);
        }
    }
    bad
}

fn post_data_recv(t: &TestQp, o: &PerftestOptions, i: u64) -> Result<(), PerftestError> {
    let slot = i % DATA_SLOTS;
    t.qp.post_recv(RecvWr {
        wr_id: i,
        local: t.data.sge(slot * o.size as u64, o.size as u32),
    })
    .map_err(|e| PerftestError::Protocol(format!("posting receive {i}: {e}")))
}

/// The send_bw server: counts `iters` receives, reposting each and granting credits.
fn server_receive(
    ctl: &mut Ctl<'_>,
    t: &TestQp,
    peer: &Dest,
    o: &PerftestOptions,
    poll_accept: &mut dyn FnMut() -> Result<(), PerftestError>,
) -> Result<BwSample, PerftestError> {
    let rx_depth = o.effective_rx_depth();
    let credit_every = (rx_depth / 3).max(1);
    let (mut received, mut credited, mut writes) = (0u64, 0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_progress = Instant::now();
    let mut posted = rx_depth;
    while received < o.iters {
        ctl.pump();
        poll_accept()?;
        let mut got = 0;
        while let Some(c) = t.cq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(PerftestError::Completion(c));
            }
            if c.wr_id & WR_KIND == WR_CREDIT {
                continue;
            }
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            received += 1;
            got += 1;
            if posted < o.iters + rx_depth {
                post_data_recv(t, o, posted)?;
                posted += 1;
            }
        }
        if got > 0 {
            last_progress = Instant::now();
            if received - credited >= credit_every || received == o.iters {
                let slot = writes % CREDIT_SLOTS;
                t.credit
                    .write(slot as usize * 4, &(received as u32).to_le_bytes())
                    .map_err(|e| PerftestError::Protocol(format!("writing a credit: {e}")))?;
                let wr = SendWr {
                    wr_id: WR_CREDIT | slot,
                    op: SendOp::Write {
                        remote_stag: peer.rkey,
                        remote_to: peer.vaddr,
                    },
                    local: t.credit.sge(slot * 4, 4),
                    signaled: true,
                };
                match t.qp.post_send(wr) {
                    Ok(()) => {
                        credited = received;
                        writes += 1;
                    }
                    // The credit goes with the next batch.
                    Err(PostError::QueueFull) => {}
                    Err(err) => {
                        return Err(PerftestError::Protocol(format!(
                            "posting a credit Write: {err}"
                        )))
                    }
                }
            }
        }
        if last_progress.elapsed() > o.step_timeout {
            return Err(stalled(format!(
                "receiving ({received} of {} messages)",
                o.iters
            )));
        }
    }
    let span = first.map_or(Duration::ZERO, |f| last.duration_since(f));
    Ok(BwSample::from_elapsed(o.size as u64, received, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_layout_matches_the_capture() {
        // siw's ib_write_bw client in the guest, perftest 4.5 (tests/data/perftest-*.pcap).
        let hex = "000000000000000100000003008ed7ae93c07c000000000000005624211ba000\
                   5254007700020000000000000000000000000000000000000";
        let mut b: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        b.resize(DEST_LEN, 0);
        let d = Dest::decode(&b).unwrap();
        assert_eq!(d.out_reads, 1);
        assert_eq!(d.qpn, 3);
        assert_eq!(d.psn, 0x8e_d7ae);
        assert_eq!(d.rkey, 0x93c0_7c00);
        assert_eq!(d.vaddr, 0x5624_211b_a000);
        assert_eq!(&d.gid[..6], &[0x52, 0x54, 0, 0x77, 0, 2]);
        assert_eq!(Dest::decode(&d.encode()).unwrap(), d);
        assert!(Dest::decode(&b[..55]).is_err());
    }

    #[test]
    fn report_round_trip_and_capture() {
        let r = BwReport {
            size: 4096,
            iters: 5,
            peak: 22.72,
            avg: 2.97,
            msg_rate: 0.000761,
        };
        let m = r.encode(8);
        assert_eq!(m[0], 4096u64.to_be_bytes());
        assert_eq!(m[1], 5u64.to_be_bytes());
        assert_eq!(BwReport::decode(&m).unwrap(), r);
        let m4 = r.encode(4);
        assert_eq!(m4[1].len(), 4);
        assert_eq!(BwReport::decode(&m4).unwrap().iters, 5);
        // 0x4036b798ef97dc0b from the capture is perftest's 22.72 MB/s peak.
        let peak = f64::from_bits(0x4036_b798_ef97_dc0b);
        assert!((peak - 22.72).abs() < 0.01, "{peak}");
        assert!(BwReport::decode(&m[..4]).is_err());
        assert!(BwReport::decode(&[vec![1, 2, 3], vec![], vec![], vec![], vec![]]).is_err());
    }

    #[test]
    fn versions_and_scripts() {
        assert_eq!(version_number("6.06"), 6.06);
        assert_eq!(version_number("5.33abc"), 5.33);
        assert_eq!(version_number(""), 0.0);
        let count = |t: Test, x: Step| control_script(t).iter().filter(|&&y| y == x).count();
        // The real Dests of the captures (siw ↔ siw, perftest 4.5): write_bw 3 + done +
        // close; send_bw 4 + done; write_lat 4 and nothing after the traffic; send_lat and
        // read_lat 4 + done.
        for (t, dests, results) in [
            (Test::WriteBw, 5, 1),
            (Test::ReadBw, 5, 1),
            (Test::SendBw, 5, 0),
            (Test::WriteLat, 4, 0),
            (Test::SendLat, 5, 0),
            (Test::ReadLat, 5, 0),
        ] {
            assert_eq!(count(t, Step::Dest), dests, "{t:?}");
            assert_eq!(count(t, Step::Results), results, "{t:?}");
            assert_eq!(count(t, Step::ZeroDest), 2, "{t:?}");
        }
        let w = control_script(Test::WriteLat);
        assert_eq!(w.last(), Some(&Step::Traffic));
    }

    /// Both roles of `test` in one process over the in-memory link.
    fn both_roles(
        test: Test,
        p2p: bool,
    ) -> (
        Result<PerftestOutcome, PerftestError>,
        Result<PerftestOutcome, PerftestError>,
    ) {
        use control::embedded::{self, WireConfig};
        let embedded::Pair {
            a,
            mut core_a,
            b,
            mut core_b,
        } = embedded::pair(
            WireConfig::default(),
            WireConfig::default(),
            embedded::tcp_config(1500),
        )
        .unwrap();
        let o = PerftestOptions {
            test,
            size: if test.is_latency() { 100 } else { 4096 },
            iters: if test.is_latency() { 300 } else { 200 },
            tx_depth: 16,
            initiator: InitiatorConfig {
                ird: 8,
                ord: 8,
                peer_to_peer: p2p,
                ..InitiatorConfig::default()
            },
            step_timeout: Duration::from_secs(20),
            accept_timeout: Some(Duration::from_secs(20)),
            ..PerftestOptions::default()
        };
        let listener = b.listen(DEFAULT_PORT, o.responder.clone()).unwrap();
        let so = o.clone();
        let server = std::thread::spawn(move || {
            let r = run_server(&b, &mut core_b, &listener, &so, [2, 0, 0, 0, 0, 2]);
            b.shutdown();
            r
        });
        let c = run_client(
            &a,
            &mut core_a,
            SocketAddrV4::new(embedded::ADDR_B, DEFAULT_PORT),
            &o,
            [2, 0, 0, 0, 0, 1],
        );
        while !server.is_finished() {
            core_a.poll();
        }
        a.shutdown();
        (c, server.join().unwrap())
    }

    /// perftest's latency tests, both roles: 300 round trips (reads) each, every one timed;
    /// write_lat runs peer-to-peer (our server may not write first otherwise).
    #[test]
    fn latency_tests_both_roles() {
        for test in [Test::WriteLat, Test::SendLat, Test::ReadLat] {
            let (c, s) = both_roles(test, test == Test::WriteLat);
            let (c, s) = (c.unwrap(), s.unwrap());
            assert_eq!(c.messages, 300, "{test:?}");
            let Some(Sample::Lat(l)) = c.sample else {
                panic!("{test:?}: {:?}", c.sample)
            };
            assert_eq!((l.bytes, l.iterations), (100, 300), "{test:?}");
            assert!(l.t_min > 0.0 && l.t_min <= l.t_typical && l.t_typical <= l.t_max);
            let h = c.histogram.unwrap();
            // The ping-pongs time the intervals between posts (one fewer); reads each.
            let timed = if test == Test::ReadLat { 300 } else { 299 };
            assert_eq!(h.len(), timed, "{test:?}");
            if test == Test::ReadLat {
                assert!(s.sample.is_none(), "read_lat's server prints nothing");
                let t = c.test_conn.unwrap();
                assert_eq!((t.ird, t.ord), (8, 8));
            } else {
                let Some(Sample::Lat(sl)) = s.sample else {
                    panic!("{test:?}: server {:?}", s.sample)
                };
                assert_eq!(sl.iterations, 300);
                assert_eq!(s.histogram.unwrap().len(), 299);
            }
        }
    }

    /// A write_lat client that does not offer peer-to-peer is refused with the reason,
    /// which the client sees in the Reject's private data.
    #[test]
    fn write_lat_server_needs_an_rtr() {
        let (c, s) = both_roles(Test::WriteLat, false);
        let s = s.unwrap_err().to_string();
        assert!(s.contains("RFC 5044 7.1.2"), "{s}");
        let c = c.unwrap_err().to_string();
        // The whole reason, as the client sees it in the Reject.
        assert!(
            c.contains("ib_write_lat's server writes first")
                && c.ends_with("connect peer-to-peer (RFC 6581)"),
            "{c}"
        );
    }

    /// Both roles in one process over the in-memory link: the exchange is consistent and
    /// both sides count the same messages, for each test.
    #[test]
    fn both_roles_over_the_embedded_link() {
        for test in [Test::WriteBw, Test::ReadBw, Test::SendBw] {
            let (c, s) = both_roles(test, false);
            let (c, s) = (c.unwrap(), s.unwrap());
            assert_eq!(c.messages, 200, "{test:?}");
            assert_eq!(s.messages, 200, "{test:?}");
            let bw = |x: &PerftestOutcome| match x.sample {
                Some(Sample::Bw(b)) => b,
                ref other => panic!("{test:?}: {other:?}"),
            };
            assert_eq!(bw(&c).iterations, bw(&s).iterations);
            assert_eq!(c.peer_version, VERSION);
            if test == Test::ReadBw {
                let t = c.test_conn.unwrap();
                assert_eq!((t.ird, t.ord), (8, 8));
            } else if test == Test::WriteBw {
                // The server prints the client's results: the same line.
                assert_eq!(c.sample, s.sample);
            }
        }
    }

    #[test]
    fn options_checked() {
        let mut o = PerftestOptions {
            test: Test::WriteLat,
            ..Default::default()
        };
        assert!(validate_options(&o).is_ok());
        o.test = Test::SendBw;
        assert!(validate_options(&o).is_ok());
        assert_eq!(o.effective_rx_depth(), 512);
        o.iters = 5;
        assert_eq!(o.effective_rx_depth(), 5);
        o.iters = 1;
        assert!(validate_options(&o).is_err());
        o.iters = 0;
        assert!(validate_options(&o).is_err());
        o.iters = 10;
        o.size = 0;
        assert!(validate_options(&o).is_err());
    }
}
