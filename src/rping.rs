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
use std::time::Duration;

use control::cm::CmError;
use control::verbs::{AcceptParams, Completion, Device, InitiatorConfig, ResponderConfig};
use dataplane::lcore::Core;

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
            RpingError::Completion(c) => write!(
                f,
                "work request {} ({:?}) completed with {:?}{}",
                c.wr_id,
                c.opcode,
                c.status,
                c.term
                    .map(|t| format!(" (Terminate {:?})", t.triple()))
                    .unwrap_or_default()
            ),
            RpingError::Protocol(s) => write!(f, "protocol error: {s}"),
            RpingError::Mismatch { ping, offset } => {
                write!(f, "data mismatch! (ping {ping}, first difference at octet {offset})")
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
    let _ = (dev, core, server, out);
    Err(RpingError::Options("not implemented yet".into()))
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
    validate_options(o)?;
    let _ = (dev, core, port, out);
    Err(RpingError::Options("not implemented yet".into()))
}

/// Both ends in this process over the in-memory wire ([`control::embedded::pair`]):
/// the server (node B, 10.77.0.2) on its own thread writing to `server_out`, the client
/// (node A) on this thread writing to `client_out`. Returns (client, server) statistics.
pub fn run_embedded(
    o: &RpingOptions,
    port: u16,
    client_out: &mut dyn Write,
    server_out: Box<dyn Write + Send>,
) -> Result<(RpingStats, RpingStats), RpingError> {
    validate_options(o)?;
    let _ = (port, client_out, server_out);
    Err(RpingError::Options("not implemented yet".into()))
}
