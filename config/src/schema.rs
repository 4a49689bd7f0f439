//! The typed deployment schema: one struct per TOML table.
//!
//! Every table and field is documented here and in `config/README.md`. Unknown fields are
//! errors everywhere. Fields with a default may be left out; the default is given in each
//! field's doc.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use serde::Deserialize;

use crate::value::{HexBytes, Ipv4Prefix, MacAddr, Millis};

/// A whole deployment file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[eal]`: DPDK Environment Abstraction Layer options. Ignored when every port is a
    /// `mem` port (no EAL is started then).
    #[serde(default)]
    pub eal: Eal,
    /// `[[ports]]`: the network ports, at least one. Their order is the order DPDK vdevs are
    /// numbered in.
    pub ports: Vec<Port>,
    /// `[[lcores]]`: the dataplane lcores (one poll loop each) and the ports each polls.
    /// Every port is polled by exactly one lcore.
    pub lcores: Vec<Lcore>,
    /// `[control]`: the control thread (MPA startup, listeners) and startup timeouts.
    #[serde(default)]
    pub control: Control,
    /// `[mpa]`: MPA policy of new connections (RFC 5044, RFC 6581).
    #[serde(default)]
    pub mpa: Mpa,
    /// `[tcp]`: TCP engine tuning.
    #[serde(default)]
    pub tcp: Tcp,
    /// `[qp]`: queue pair limits.
    #[serde(default)]
    pub qp: Qp,
    /// `[limits]`: caps and timeouts of everything a peer can make the node hold.
    #[serde(default)]
    pub limits: Limits,
    /// `[[listeners]]`: passive endpoints (MPA Responders). May be empty.
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// `[bench]`: defaults for `iwarp bench` as a client. Optional.
    #[serde(default)]
    pub bench: Option<Bench>,
}

/// `[eal]`: DPDK EAL options. See [`Eal::eal_argv`] for the argv built from them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Eal {
    /// Extra EAL arguments appended verbatim after the generated ones. Default: none.
    #[serde(default)]
    pub args: Vec<String>,
    /// The EAL core list (`-l`), e.g. `"0-2"` or `"0,2,4"`. Default: built from the
    /// `[control]` lcore and every `[[lcores]]` id.
    #[serde(default)]
    pub lcores: Option<String>,
    /// Memory to reserve in MiB (`-m`). Default 256; 1..=1048576.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u32,
    /// Use hugepages. `false` (the default) runs with `--no-huge -m <memory_mb>` on
    /// ordinary pages: no root setup needed, slower.
    #[serde(default)]
    pub hugepages: bool,
    /// The EAL `--file-prefix` (runtime directory name). Default: none, and then the
    /// process keeps no shared runtime files (`--no-shconf` without hugepages,
    /// `--in-memory` with them) so that several processes can run side by side.
    #[serde(default)]
    pub file_prefix: Option<String>,
}

impl Default for Eal {
    fn default() -> Self {
        Eal {
            args: Vec::new(),
            lcores: None,
            memory_mb: default_memory_mb(),
            hugepages: false,
            file_prefix: None,
        }
    }
}

fn default_memory_mb() -> u32 {
    256
}

/// The kind of device behind a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// An in-process memory link to another `mem` port (`peer`); no DPDK, no NIC, no root.
    Mem,
    /// DPDK `net_af_packet` on a Linux interface (`iface`); needs root or CAP_NET_RAW.
    AfPacket,
    /// DPDK `net_tap`: creates a Linux tap interface (`iface`); needs root.
    Tap,
    /// DPDK `net_memif`: shared-memory packet interface (`socket`, `role`, `id`).
    Memif,
    /// A PCI NIC bound to a DPDK-capable driver (`pci_addr`).
    Pci,
}

impl Driver {
    /// The name used in the file (`"af_packet"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Mem => "mem",
            Driver::AfPacket => "af_packet",
            Driver::Tap => "tap",
            Driver::Memif => "memif",
            Driver::Pci => "pci",
        }
    }
}

/// The role of a memif port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemifRole {
    /// Creates the socket and the shared memory.
    Server,
    /// Connects to a server's socket.
    Client,
}

impl MemifRole {
    /// The name used in the file and by DPDK (`"server"`, `"client"`).
    pub fn as_str(self) -> &'static str {
        match self {
            MemifRole::Server => "server",
            MemifRole::Client => "client",
        }
    }
}

/// `[[ports]]`: one network port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    /// Name used by `[[lcores]]`, `[[listeners]]` and `[bench]`: 1 to 32 characters of
    /// `A-Z a-z 0-9 _ -`, unique.
    pub name: String,
    /// The device kind.
    pub driver: Driver,
    /// `af_packet`: the Linux interface to bind; `tap`: the name of the tap interface to
    /// create. Required for those drivers, at most 15 characters; not allowed for others.
    #[serde(default)]
    pub iface: Option<String>,
    /// `af_packet` only: frames per ring (`framecnt`). Default: the driver's.
    #[serde(default)]
    pub framecnt: Option<u32>,
    /// `memif` only (required): path of the control socket, absolute.
    #[serde(default)]
    pub socket: Option<String>,
    /// `memif` only (required): `"server"` or `"client"`.
    #[serde(default)]
    pub role: Option<MemifRole>,
    /// `memif` only: interface id on the socket. Default 0.
    #[serde(default)]
    pub id: Option<u32>,
    /// `pci` only (required): the PCI address, `"0000:01:00.0"` or `"01:00.0"`.
    #[serde(default)]
    pub pci_addr: Option<String>,
    /// `mem` only (required): the name of the other `mem` port of the link; the two must
    /// name each other.
    #[serde(default)]
    pub peer: Option<String>,
    /// Ethernet address, `"02:00:00:00:00:01"`. Default: the device's (for `mem`, a locally
    /// administered address derived from the port's position). Must be unicast.
    #[serde(default)]
    pub mac: Option<MacAddr>,
    /// The port's IPv4 address and prefix length, `"10.77.0.3/24"`. The address is a host
    /// of the prefix (neither its network nor, below /31, its broadcast address).
    pub ipv4: Ipv4Prefix,
    /// Next hop for destinations outside the prefix; inside the prefix, not the port's own
    /// address. Default: none (only the prefix is reachable).
    #[serde(default)]
    pub gateway: Option<Ipv4Addr>,
    /// IP MTU in octets, 576..=9000. Default 1500.
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// Receive queues, 1..=64. Default 1.
    #[serde(default = "one")]
    pub rx_queues: u16,
    /// Transmit queues, 1..=64. Default 1.
    #[serde(default = "one")]
    pub tx_queues: u16,
    /// Descriptors per receive ring, a power of two in 64..=16384. Default 1024.
    #[serde(default = "default_ring")]
    pub rx_ring: u16,
    /// Descriptors per transmit ring, a power of two in 64..=16384. Default 1024.
    #[serde(default = "default_ring")]
    pub tx_ring: u16,
    /// Let the device compute and check IPv4 and TCP checksums when it offers to (DPDK's
    /// `IPV4_CKSUM` and `TCP_CKSUM` offloads); otherwise, or with `false`, they are done
    /// in software. Default true.
    #[serde(default = "yes")]
    pub checksum_offload: bool,
    /// Transmit each TCP segment's payload straight from the send queue, as a buffer
    /// chained after the headers' (DPDK `MULTI_SEGS`), instead of copying it into the
    /// frame. Only on devices that take such frames and move them with the CPU
    /// (`af_packet`, `tap`, `memif`): a DMA device would need the send queue in
    /// DMA-mapped memory, which it is not. Default false: on those devices the PMD copies
    /// anyway, and the second buffer per frame costs more than the copy it saves (memif:
    /// 0.70–0.94 of the copying bandwidth, `cargo bench --bench memif_vs_mem`).
    #[serde(default)]
    pub tx_zero_copy: bool,
    /// Transmit segmentation offload: consecutive segments of a connection go to the
    /// device as one frame of up to 64 KiB that it cuts into exactly the segments TCP
    /// planned (each still starting with an FPDU; MULPDU still follows from the MSS).
    /// Needs `checksum_offload` and a device that offers TCP TSO with multi-segment frames
    /// (`tap`, most PCI NICs; not `af_packet`, `memif` or `mem`): refused otherwise, here
    /// for the drivers known not to, when the port opens for the others. Default false.
    #[serde(default)]
    pub tso: bool,
}

fn default_mtu() -> u16 {
    1500
}
fn one() -> u16 {
    1
}
fn default_ring() -> u16 {
    1024
}

/// `[[lcores]]`: one dataplane lcore and the ports its poll loop serves.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lcore {
    /// The lcore id (with `mem`-only deployments, just a thread number), 0..=1023, unique,
    /// not the `[control]` lcore.
    pub id: u32,
    /// Names of the ports this lcore polls, at least one.
    pub ports: Vec<String>,
}

/// `[control]`: where the control thread runs, and startup timeouts.
///
/// Durations, here and in `[mpa]` and `[tcp]`, are either a string with a unit
/// (`"500ms"`, `"10s"`, `"2m"`; also `"us"`) or an integer number of milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// EAL lcore of the control thread (becomes `--main-lcore`). Not also a `[[lcores]]`
    /// id. At most one of `lcore` and `cpu`. Default: none.
    #[serde(default)]
    pub lcore: Option<u32>,
    /// Linux CPU to pin the control thread to when it is not an EAL lcore (for example in
    /// `mem`-only deployments). At most one of `lcore` and `cpu`. Default: not pinned.
    #[serde(default)]
    pub cpu: Option<u32>,
    /// How long to wait for every port's link to come up. Default `"10s"`; 1ms..=10m.
    #[serde(default = "default_link_timeout")]
    pub link_timeout: Millis,
    /// How long to wait for every dataplane lcore to report ready. Default `"5s"`; 1ms..=10m.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout: Millis,
    /// Where `iwarp serve` answers `GET /metrics` (Prometheus text format) with its port,
    /// ARP/IPv4, TCP, MPA and session counters: an `"ADDR:PORT"` on a kernel socket, e.g.
    /// `"127.0.0.1:9464"`. Default: none (no exporter).
    #[serde(default)]
    pub metrics: Option<std::net::SocketAddr>,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            lcore: None,
            cpu: None,
            link_timeout: default_link_timeout(),
            ready_timeout: default_ready_timeout(),
            metrics: None,
        }
    }
}

fn default_link_timeout() -> Millis {
    Millis(Duration::from_secs(10))
}
fn default_ready_timeout() -> Millis {
    Millis(Duration::from_secs(5))
}

pub use proto::rtr::RtrType;
pub use wire::mpa::startup_frame::Dialect as MpaDialect;

/// Largest IRD/ORD that can be configured (0x3FFF on the wire means "no negotiation").
pub use proto::ird_ord::MAX_NEGOTIABLE as MAX_IRD_ORD;
/// Largest MPA private data length (RFC 5044 7.1: Private Data Length at most 512).
pub const MAX_PRIVATE_DATA: u16 = wire::mpa::startup_frame::MAX_PD_LENGTH as u16;
/// Octets of private data the RFC 6581 enhanced word takes when `peer_to_peer` is on.
pub const ENHANCED_DATA_LEN: u16 = wire::mpa::startup_frame::ENHANCED_DATA_LEN as u16;

/// `[mpa]`: MPA policy of connections (RFC 5044, RFC 6581).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mpa {
    /// MPA revision, 1 or 2. Default 2. `peer_to_peer` needs 2.
    #[serde(default = "default_rev")]
    pub rev: u8,
    /// Request markers from the peer (the M bit). Default false.
    #[serde(default)]
    pub markers: bool,
    /// Use CRC32c (the C bit). Default true.
    #[serde(default = "yes")]
    pub crc: bool,
    /// RFC 6581 enhanced startup: IRD/ORD negotiation and a ready-to-receive message.
    /// Default true.
    #[serde(default = "yes")]
    pub peer_to_peer: bool,
    /// The RTR types offered, in order of preference: a non-empty list of distinct
    /// `"write"`, `"read"`, `"send"`. Default `["write", "read", "send"]`.
    #[serde(default = "default_rtr_types")]
    pub rtr_types: Vec<RtrType>,
    /// Startup dialect: `"rfc6581"` (default), `"draft2010"`, `"rtr_frame2007"`.
    #[serde(default)]
    pub dialect: MpaDialect,
    /// Inbound RDMA Read queue depth offered, 0..=0x3FFE ([`MAX_IRD_ORD`]). Default 16.
    #[serde(default = "default_ird_ord")]
    pub ird: u16,
    /// Outbound RDMA Read queue depth requested, 0..=0x3FFE. Default 16.
    #[serde(default = "default_ird_ord")]
    pub ord: u16,
    /// Largest private data accepted from a peer or configured on a listener, 0..=512
    /// octets ([`MAX_PRIVATE_DATA`]). Default 512.
    #[serde(default = "default_max_private_data")]
    pub max_private_data: u16,
    /// How long an Initiator waits for the MPA Reply. Default `"10s"`; 1ms..=10m.
    #[serde(default = "default_10s")]
    pub reply_timeout: Millis,
    /// How long a Responder waits for the MPA Request. Default `"5s"`; 1ms..=10m.
    #[serde(default = "default_5s")]
    pub request_timeout: Millis,
    /// How long a peer-to-peer Responder waits for the RTR. Default `"10s"`; 1ms..=10m.
    #[serde(default = "default_10s")]
    pub rtr_timeout: Millis,
    /// How long a client-server Responder waits for the Initiator's first FPDU after its
    /// Reply. Default `"10s"`; 1ms..=10m.
    #[serde(default = "default_10s")]
    pub first_fpdu_timeout: Millis,
    /// How long an Initiator waits after the MPA Reply before its first FPDU (the RTR when
    /// peer-to-peer, else the consumer's first message). Default `"0ms"`; 0..=10s. Linux
    /// siw needs about `"100ms"` (it may not read an FPDU that arrives right after its
    /// Reply).
    #[serde(default)]
    pub first_fpdu_delay: Millis,
}

impl Default for Mpa {
    fn default() -> Self {
        Mpa {
            rev: default_rev(),
            markers: false,
            crc: true,
            peer_to_peer: true,
            rtr_types: default_rtr_types(),
            dialect: MpaDialect::default(),
            ird: default_ird_ord(),
            ord: default_ird_ord(),
            max_private_data: default_max_private_data(),
            reply_timeout: default_10s(),
            request_timeout: default_5s(),
            rtr_timeout: default_10s(),
            first_fpdu_timeout: default_10s(),
            first_fpdu_delay: Millis::default(),
        }
    }
}

fn default_rev() -> u8 {
    2
}
fn yes() -> bool {
    true
}
fn default_rtr_types() -> Vec<RtrType> {
    vec![RtrType::Write, RtrType::Read, RtrType::Send]
}
fn default_ird_ord() -> u16 {
    16
}
fn default_max_private_data() -> u16 {
    MAX_PRIVATE_DATA
}
fn default_10s() -> Millis {
    Millis(Duration::from_secs(10))
}
fn default_5s() -> Millis {
    Millis(Duration::from_secs(5))
}

/// Per-listener MPA overrides: each field, when given, replaces the `[mpa]` value with
/// the same name and the same rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MpaOverrides {
    /// Overrides [`Mpa::rev`].
    #[serde(default)]
    pub rev: Option<u8>,
    /// Overrides [`Mpa::markers`].
    #[serde(default)]
    pub markers: Option<bool>,
    /// Overrides [`Mpa::crc`].
    #[serde(default)]
    pub crc: Option<bool>,
    /// Overrides [`Mpa::peer_to_peer`].
    #[serde(default)]
    pub peer_to_peer: Option<bool>,
    /// Overrides [`Mpa::rtr_types`].
    #[serde(default)]
    pub rtr_types: Option<Vec<RtrType>>,
    /// Overrides [`Mpa::ird`].
    #[serde(default)]
    pub ird: Option<u16>,
    /// Overrides [`Mpa::ord`].
    #[serde(default)]
    pub ord: Option<u16>,
    /// Overrides [`Mpa::max_private_data`].
    #[serde(default)]
    pub max_private_data: Option<u16>,
}

impl Mpa {
    /// This policy with `overrides` applied (durations and dialect are not overridable).
    pub fn with_overrides(&self, overrides: &MpaOverrides) -> Mpa {
        Mpa {
            rev: overrides.rev.unwrap_or(self.rev),
            markers: overrides.markers.unwrap_or(self.markers),
            crc: overrides.crc.unwrap_or(self.crc),
            peer_to_peer: overrides.peer_to_peer.unwrap_or(self.peer_to_peer),
            rtr_types: overrides
                .rtr_types
                .clone()
                .unwrap_or_else(|| self.rtr_types.clone()),
            ird: overrides.ird.unwrap_or(self.ird),
            ord: overrides.ord.unwrap_or(self.ord),
            max_private_data: overrides.max_private_data.unwrap_or(self.max_private_data),
            ..self.clone()
        }
    }

    /// Private data octets left to the ULP: `max_private_data`, less the 4-octet enhanced
    /// word when `peer_to_peer` is on (capped so the total stays within 512).
    pub fn ulp_private_data_limit(&self) -> u16 {
        if self.peer_to_peer {
            self.max_private_data
                .min(MAX_PRIVATE_DATA - ENHANCED_DATA_LEN)
        } else {
            self.max_private_data
        }
    }
}

/// `[tcp]`: TCP engine tuning.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcp {
    /// Lower bound of the retransmission timeout. Default `"200ms"`; 1ms..=`rto_initial`.
    #[serde(default = "default_rto_min")]
    pub rto_min: Millis,
    /// Retransmission timeout before any RTT sample. Default `"1s"`; at most 1m.
    #[serde(default = "default_rto_initial")]
    pub rto_initial: Millis,
    /// Receive buffer per connection in octets, 4096..=1073741824; at most 65535 without
    /// `window_scaling`. Default 262144.
    #[serde(default = "default_buffer")]
    pub recv_buffer: u32,
    /// Send buffer per connection in octets, 4096..=1073741824. Default 262144.
    #[serde(default = "default_buffer")]
    pub send_buffer: u32,
    /// Delay ACKs (RFC 1122). Default true.
    #[serde(default = "yes")]
    pub delayed_ack: bool,
    /// Selective acknowledgements (RFC 2018). Default false.
    #[serde(default)]
    pub sack: bool,
    /// Timestamps option (RFC 7323). Default true.
    #[serde(default = "yes")]
    pub timestamps: bool,
    /// Window scaling (RFC 7323). Default true.
    #[serde(default = "yes")]
    pub window_scaling: bool,
}

impl Default for Tcp {
    fn default() -> Self {
        Tcp {
            rto_min: default_rto_min(),
            rto_initial: default_rto_initial(),
            recv_buffer: default_buffer(),
            send_buffer: default_buffer(),
            delayed_ack: true,
            sack: false,
            timestamps: true,
            window_scaling: true,
        }
    }
}

fn default_rto_min() -> Millis {
    Millis(Duration::from_millis(200))
}
fn default_rto_initial() -> Millis {
    Millis(Duration::from_secs(1))
}
fn default_buffer() -> u32 {
    256 * 1024
}

/// `[qp]`: queue pair limits.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Qp {
    /// Most QPs the node's connections hold at once (connecting, accepted or
    /// established), 1..=65536; beyond, a connect fails "busy" and a connection request
    /// is rejected with the reason. Default 64.
    #[serde(default = "default_max_qps")]
    pub max_qps: u32,
}

impl Default for Qp {
    fn default() -> Self {
        Qp {
            max_qps: default_max_qps(),
        }
    }
}

fn default_max_qps() -> u32 {
    64
}

/// `[limits]`: the resource model. Every resource a peer can make a core, the control
/// thread or `iwarp serve` hold has a cap, and every wait a timeout (see the `dataplane`
/// crate's `limits` module for what happens beyond each).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// TCP connections per core, handshake to close. Default 16384; 1..=1048576.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// SYN-RECEIVED connections per listener; beyond it SYNs get SYN cookies. Default
    /// 1024; 1..=1048576.
    #[serde(default = "default_syn_backlog")]
    pub syn_backlog: u32,
    /// From SYN (or connect) to FPDU mode, every MPA startup step included. Default
    /// `"20s"`; 10ms..=10m.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout: Millis,
    /// Octets a peer may send before FPDU mode (beyond: reset). Default 66600 (the largest
    /// Request or Reply and one largest FPDU); 532..=16777216.
    #[serde(default = "default_startup_octets")]
    pub startup_octets: u32,
    /// TCP user timeout: how long data may wait for an acknowledgment that makes progress
    /// (zero window, dead peer) before the connection is reset and its work requests
    /// flushed. Default `"30s"`; 10ms..=1h.
    #[serde(default = "default_user_timeout")]
    pub user_timeout: Millis,
    /// Longest graceful close before a reset. Default `"5s"`; 1ms..=10m.
    #[serde(default = "default_linger")]
    pub linger: Millis,
    /// TIME-WAIT tuples kept per core (beyond: the oldest is forgotten). Default 16384;
    /// 0..=4194304.
    #[serde(default = "default_max_connections")]
    pub time_wait: u32,
    /// Messages per control channel (core, control thread, consumers). Default 4096;
    /// 16..=1048576.
    #[serde(default = "default_control_queue")]
    pub control_queue: u32,
    /// Connection requests per listener waiting for the application (beyond: MPA Reject
    /// "listener queue full"). Default 128; 1..=65536.
    #[serde(default = "default_listener_queue")]
    pub listener_queue: u32,
    /// `iwarp serve`: memory one bench session may ask for, MiB (beyond: MPA Reject
    /// saying why). Default 256; 1..=1048576.
    #[serde(default = "default_session_memory_mib")]
    pub session_memory_mib: u32,
    /// `iwarp serve`: memory of all sessions at once, MiB. Default 1024; 1..=1048576.
    #[serde(default = "default_serve_memory_mib")]
    pub serve_memory_mib: u32,
    /// `iwarp serve`: sessions running at once. Default 64; 1..=4096.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u32,
    /// `iwarp serve`: sessions still in their MPA startup from one client address.
    /// Default 16; 1..=4096.
    #[serde(default = "default_pending_per_peer")]
    pub pending_sessions_per_peer: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: default_max_connections(),
            syn_backlog: default_syn_backlog(),
            startup_timeout: default_startup_timeout(),
            startup_octets: default_startup_octets(),
            user_timeout: default_user_timeout(),
            linger: default_linger(),
            time_wait: default_max_connections(),
            control_queue: default_control_queue(),
            listener_queue: default_listener_queue(),
            session_memory_mib: default_session_memory_mib(),
            serve_memory_mib: default_serve_memory_mib(),
            max_sessions: default_max_sessions(),
            pending_sessions_per_peer: default_pending_per_peer(),
        }
    }
}

fn default_max_connections() -> u32 {
    16384
}
fn default_syn_backlog() -> u32 {
    1024
}
fn default_startup_timeout() -> Millis {
    Millis(Duration::from_secs(20))
}
/// The largest Request or Reply (532 octets) and one largest FPDU (66068 octets with
/// markers): the dataplane's `MAX_STARTUP_OCTETS`.
pub const DEFAULT_STARTUP_OCTETS: u32 = 66600;
fn default_startup_octets() -> u32 {
    DEFAULT_STARTUP_OCTETS
}
fn default_user_timeout() -> Millis {
    Millis(Duration::from_secs(30))
}
fn default_linger() -> Millis {
    Millis(Duration::from_secs(5))
}
fn default_control_queue() -> u32 {
    4096
}
fn default_listener_queue() -> u32 {
    128
}
fn default_session_memory_mib() -> u32 {
    256
}
fn default_serve_memory_mib() -> u32 {
    1024
}
fn default_max_sessions() -> u32 {
    64
}
fn default_pending_per_peer() -> u32 {
    16
}

/// `[[listeners]]`: a passive endpoint (MPA Responder).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    /// TCP port to listen on, 1..=65535. (`port` in the file would be ambiguous with
    /// `[[ports]]`.)
    pub tcp_port: u16,
    /// The `[[ports]]` name to listen on. At least one of `port_name` and `address`.
    #[serde(default)]
    pub port_name: Option<String>,
    /// The local address to listen on: the `ipv4` address of a port (of `port_name` when
    /// both are given).
    #[serde(default)]
    pub address: Option<Ipv4Addr>,
    /// Private data sent in the MPA Reply, as hex (`"c0ffee"`, `"c0 ff ee"` or
    /// `"c0:ff:ee"`). At most the effective `max_private_data`, less 4 with `peer_to_peer`.
    /// Default: none.
    #[serde(default)]
    pub private_data: Option<HexBytes>,
    /// `[listeners.mpa]`: overrides of `[mpa]` for this listener.
    #[serde(default)]
    pub mpa: Option<MpaOverrides>,
}

/// `[bench]`: defaults for `iwarp bench` as a client; command-line flags override them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bench {
    /// The server, `"10.77.0.2:18515"`. Must be in a port's prefix, or a port needs a
    /// gateway.
    pub peer: SocketAddrV4,
    /// Message size in octets when `iwarp bench` is given no `-s`, 1..=1073741824.
    /// Default 65536. (The test is always the command line's.)
    #[serde(default = "default_bench_size")]
    pub size: u32,
    /// Number of messages when `iwarp bench` is given neither `-n` nor `-D`, at least 1.
    /// Default 1000.
    #[serde(default = "default_bench_iters")]
    pub iters: u64,
    /// The local `[[ports]]` name to use. Default: the port whose prefix holds `peer`.
    #[serde(default)]
    pub port_name: Option<String>,
}

fn default_bench_size() -> u32 {
    65536
}
fn default_bench_iters() -> u64 {
    1000
}
