//! The embedded default: two iWARP devices in one process joined by the in-memory wire
//! ([`dataplane::port::mem`]). Used by `iwarp bench` without a config file and by the
//! end-to-end tests.
//!
//! Node A is `10.77.0.1`, node B `10.77.0.2`, both in `10.77.0.0/24`; ARP resolves them
//! over the simulated wire like on a real link.

use std::net::{Ipv4Addr, SocketAddrV4};

use dataplane::lcore::steer::{self, Steering};
use dataplane::lcore::{Core, CoreConfig};
use dataplane::limits::Limits;
use dataplane::net::NetConfig;
pub use dataplane::port::faults::FaultConfig;
use dataplane::port::mem;
pub use dataplane::port::mem::{WireConfig, WireConfigError};
use dataplane::port::Port;
use proto::tcp;

use crate::verbs::{self, Device};

/// Node A's address.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Node B's address.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The TCP port B listens on in the benchmark (perftest's default).
pub const BENCH_PORT: u16 = 18515;

/// Two devices joined by the in-memory wire, with their cores (not running yet).
#[derive(Debug)]
pub struct Pair {
    /// Node A (the client in benchmarks).
    pub a: Device,
    /// A's core.
    pub core_a: Core,
    /// Node B (the server).
    pub b: Device,
    /// B's core.
    pub core_b: Core,
}

impl Pair {
    /// Where B listens for benchmarks.
    pub fn server_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(ADDR_B, BENCH_PORT)
    }
}

/// Idle polls after which an embedded core yields its CPU ([`Core::set_idle_yield`]):
/// both nodes' threads, and whatever else runs, may share few CPUs, and a core spinning
/// on an empty wire keeps its peer from running.
pub const IDLE_YIELD_POLLS: u32 = 256;

/// TCP tunables for the in-memory link: a 200 µs RTO floor (the wire's RTT is a few
/// microseconds) and RTO at least 200 µs above SRTT, 10 ms initial RTO with 10 SYN
/// retries (so a lost ARP request, retried after 100 ms, does not exhaust them), 10 µs
/// timestamp ticks, 512 KiB windows (a larger window only spreads the octets in flight
/// over more cache: measured 20-30% slower with 4 MiB).
pub fn tcp_config(mtu: usize) -> tcp::Config {
    tcp::Config {
        mtu,
        recv_buffer: 512 << 10,
        send_buffer: 512 << 10,
        rto_initial: smoltcp::time::Duration::from_millis(10),
        syn_retries: 10,
        rto_min: smoltcp::time::Duration::from_micros(200),
        // RTO at least 200 µs above SRTT: with a steady RTT (queueing in a full window)
        // RTTVAR decays to microseconds and RTO would sit right on SRTT, so a peer thread
        // descheduled for a moment looked like loss.
        rto_min_var: smoltcp::time::Duration::from_micros(200),
        delayed_ack: smoltcp::time::Duration::from_micros(50),
        // 10 µs timestamp ticks, far below the RTO floor, so Eifel detection tells the
        // ACK of an original from the ACK of its retransmission (RFC 3522).
        ts_tick: smoltcp::time::Duration::from_micros(10),
        ..tcp::Config::default()
    }
}

/// A device and its core on `port` at `addr` (a /24), with `tcp` and `limits`; the core
/// yields its CPU when idle ([`IDLE_YIELD_POLLS`]).
pub fn node(
    port: Box<dyn Port>,
    addr: Ipv4Addr,
    tcp: tcp::Config,
    limits: Limits,
) -> (Device, Core) {
    let cfg = CoreConfig {
        net: NetConfig {
            mac: port.mac(),
            addr,
            prefix_len: 24,
            gateway: None,
            mtu: port.mtu(),
        },
        tcp,
        isn_key: None,
        limits,
    };
    let (dev, mut core) = verbs::open(cfg, port);
    core.set_idle_yield(IDLE_YIELD_POLLS);
    (dev, core)
}

/// Builds the pair: `a_to_b` configures frames from A to B, `b_to_a` the reverse (their
/// MTUs must agree). `tcp` applies to both nodes.
pub fn pair(
    a_to_b: WireConfig,
    b_to_a: WireConfig,
    tcp: tcp::Config,
) -> Result<Pair, WireConfigError> {
    pair_with_limits(a_to_b, b_to_a, tcp, Limits::default())
}

/// [`pair`] with both nodes' [`Limits`].
pub fn pair_with_limits(
    a_to_b: WireConfig,
    b_to_a: WireConfig,
    tcp: tcp::Config,
    limits: Limits,
) -> Result<Pair, WireConfigError> {
    a_to_b.validate()?;
    b_to_a.validate()?;
    let (pa, pb) = mem::link(a_to_b, b_to_a);
    let (a, core_a) = node(Box::new(pa), ADDR_A, tcp.clone(), limits);
    let (b, core_b) = node(Box::new(pb), ADDR_B, tcp, limits);
    Ok(Pair {
        a,
        core_a,
        b,
        core_b,
    })
}

/// Two devices of several cores each, joined by a multi-queue in-memory wire
/// ([`mem::link_multi`]): core `i` of each node polls queue pair `i`, and the wire
/// spreads flows over the queues by RSS, as a NIC does.
#[derive(Debug)]
pub struct MultiPair {
    /// Node A (the client in benchmarks).
    pub a: Device,
    /// A's cores, by index.
    pub cores_a: Vec<Core>,
    /// Node B (the server).
    pub b: Device,
    /// B's cores, by index.
    pub cores_b: Vec<Core>,
}

impl MultiPair {
    /// Where B listens for benchmarks.
    pub fn server_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(ADDR_B, BENCH_PORT)
    }
}

/// The most cores per node of [`pair_cores`].
pub const MAX_CORES: usize = mem::MAX_QUEUES;

/// A device of `ports.len()` cores at `addr` (a /24), one per queue pair, grouped by the
/// symmetric RSS of the in-memory wire ([`Steering::group`]).
pub fn node_cores(
    ports: Vec<mem::MemPort>,
    addr: Ipv4Addr,
    tcp: tcp::Config,
    limits: Limits,
) -> (Device, Vec<Core>) {
    let n = ports.len();
    let cfgs = ports
        .into_iter()
        .map(|port| {
            let cfg = CoreConfig {
                net: NetConfig {
                    mac: port.mac(),
                    addr,
                    prefix_len: 24,
                    gateway: None,
                    mtu: port.mtu(),
                },
                tcp: tcp.clone(),
                isn_key: None,
                limits,
            };
            (cfg, Box::new(port) as Box<dyn Port>)
        })
        .collect();
    let steering = (n > 1).then(|| {
        let rss = wire::rss::Rss::symmetric(n).expect("at least one core");
        Steering::group(rss, steer::DEFAULT_INBOX)
    });
    let (dev, mut cores) = verbs::open_group(cfgs, steering);
    for c in &mut cores {
        c.set_idle_yield(IDLE_YIELD_POLLS);
    }
    (dev, cores)
}

/// Builds a pair of `cores`-core nodes (1..=[`MAX_CORES`]) like [`pair_with_limits`].
pub fn pair_cores(
    a_to_b: WireConfig,
    b_to_a: WireConfig,
    tcp: tcp::Config,
    limits: Limits,
    cores: usize,
) -> Result<MultiPair, WireConfigError> {
    let (pa, pb) = mem::link_multi(a_to_b, b_to_a, cores)?;
    let (a, cores_a) = node_cores(pa, ADDR_A, tcp.clone(), limits);
    let (b, cores_b) = node_cores(pb, ADDR_B, tcp, limits);
    Ok(MultiPair {
        a,
        cores_a,
        b,
        cores_b,
    })
}
