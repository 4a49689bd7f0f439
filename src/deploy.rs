//! Config-file deployments: one iWARP node on a DPDK port described by an
//! [`appconfig::Config`] (`iwarp serve --config FILE`, `iwarp bench --config FILE --peer
//! ADDR`).
//!
//! [`open`] validates the selection, starts DPDK's EAL with the file's arguments, opens
//! the chosen port and builds the node's [`Device`] (its control thread starts then) and
//! [`Core`]. [`Node::run`] runs a job that drives the core on the port's dataplane lcore
//! (the `[[lcores]]` entry that polls the port), through `rte_eal_remote_launch`, so the
//! core runs on the CPU DPDK pinned for it while the control thread stays on the main
//! lcore.
//!
//! The translations from the file's tables to the engine's configuration live here too:
//! [`tcp_config`], [`limits`], [`port_config`]; the `[mpa]` table's are
//! [`crate::mpa`]'s.

use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

use appconfig::{Config, Driver};
use control::verbs::Device;
use dataplane::lcore::Core;
use dataplane::port::faults::FaultConfig;
use proto::tcp;

/// Why a deployment could not be opened or run.
#[derive(Debug)]
pub enum DeployError {
    /// The file selects nothing usable: no such port, a `mem` port, no port for the
    /// peer's address. The message says what to change.
    Select(String),
    /// This build has no DPDK (built without the `dpdk` feature).
    NoDpdk,
    /// A DPDK call failed.
    Dpdk(String),
}

impl fmt::Display for DeployError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeployError::Select(m) => write!(f, "{m}"),
            DeployError::NoDpdk => write!(
                f,
                "this iwarp was built without DPDK, so it cannot open the file's ports; only \
                 the embedded default (no --config) runs. To run deployment files: \
                 `apt-get install libdpdk-dev libclang-dev pkg-config`, then \
                 `cargo build --release --features dpdk` (or `cargo run --release --features \
                 dpdk -- ...`)"
            ),
            DeployError::Dpdk(m) => write!(f, "DPDK: {m}"),
        }
    }
}

impl std::error::Error for DeployError {}

/// The port a node uses: by `name` if given; else the port whose prefix holds `peer`
/// (when given); else the only port. Returns its index in `cfg.ports`.
pub fn select_port(
    cfg: &Config,
    name: Option<&str>,
    peer: Option<Ipv4Addr>,
) -> Result<usize, DeployError> {
    let i = if let Some(n) = name {
        cfg.ports
            .iter()
            .position(|p| p.name == n)
            .ok_or_else(|| DeployError::Select(format!("no [[ports]] entry is named {n:?}")))?
    } else if let Some(ip) = peer.and_then(|ip| {
        cfg.ports
            .iter()
            .position(|p| in_prefix(ip, p.ipv4.addr, p.ipv4.len))
    }) {
        ip
    } else if cfg.ports.len() == 1 {
        0
    } else if let Some(ip) = peer {
        match cfg.ports.iter().position(|p| p.gateway.is_some()) {
            Some(i) => i,
            None => {
                return Err(DeployError::Select(format!(
                    "no port's prefix holds {ip} and none has a gateway; name the port"
                )))
            }
        }
    } else {
        return Err(DeployError::Select(
            "the file has several ports: name the one to use".into(),
        ));
    };
    let p = &cfg.ports[i];
    if p.driver == Driver::Mem {
        return Err(DeployError::Select(format!(
            "port {:?} is a `mem` port: the in-memory link exists only inside one process \
             (run `iwarp bench` without --config for the embedded default)",
            p.name
        )));
    }
    Ok(i)
}

fn in_prefix(ip: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    };
    u32::from(ip) & mask == u32::from(net) & mask
}

/// The TCP engine configuration of a port with `mtu` from the file's `[tcp]` table.
pub fn tcp_config(t: &appconfig::Tcp, mtu: usize) -> tcp::Config {
    let us = |d: Duration| smoltcp::time::Duration::from_micros(d.as_micros() as u64);
    tcp::Config {
        mtu,
        recv_buffer: t.recv_buffer as usize,
        send_buffer: t.send_buffer as usize,
        window_scaling: t.window_scaling,
        timestamps: t.timestamps,
        sack: t.sack,
        rto_initial: us(t.rto_initial.0),
        rto_min: us(t.rto_min.0),
        delayed_ack: if t.delayed_ack {
            tcp::Config::default().delayed_ack
        } else {
            smoltcp::time::Duration::ZERO
        },
        ..tcp::Config::default()
    }
}

/// The core's caps and timeouts from the file's `[limits]` table (the `iwarp serve`
/// budgets there are the server's, not the core's), with `[qp] max_qps`.
pub fn limits_of(cfg: &Config) -> dataplane::limits::Limits {
    dataplane::limits::Limits {
        max_qps: cfg.qp.max_qps as usize,
        ..limits(&cfg.limits)
    }
}

/// The core's caps and timeouts from the file's `[limits]` table alone (`max_qps` at its
/// default: see [`limits_of`]).
pub fn limits(l: &appconfig::Limits) -> dataplane::limits::Limits {
    dataplane::limits::Limits {
        max_connections: l.max_connections as usize,
        syn_backlog: l.syn_backlog as usize,
        startup_timeout: l.startup_timeout.0,
        startup_octets: l.startup_octets as usize,
        user_timeout: l.user_timeout.0,
        linger: l.linger.0,
        time_wait: l.time_wait as usize,
        control_queue: l.control_queue as usize,
        listener_queue: l.listener_queue as usize,
        ..dataplane::limits::Limits::default()
    }
}

/// Longest [`quiesce_memif`] waits for the peer to go.
pub const MEMIF_QUIESCE: Duration = Duration::from_secs(2);
/// How long [`quiesce_memif`] keeps still once the link went down.
const MEMIF_TEARDOWN: Duration = Duration::from_millis(50);

/// Keeps `core` from polling while a memif peer is expected to disconnect (a bench
/// client exits after its session): until the port's link goes down, plus
/// 50 ms, or at most `max`.
///
/// DPDK 22.11's memif PMD handles a peer's disconnect in the EAL interrupt thread: it
/// marks the link down and unmaps the shared rings and buffers (`memif_disconnect`,
/// `memif_free_regions`) with nothing to stop a receive or transmit burst that is under
/// way on the lcore; one that was preempted in between touches unmapped memory (a server
/// died with SIGSEGV about once in 50 client exits here). Not polling across the
/// teardown avoids that.
pub fn quiesce_memif(core: &Core, max: Duration) {
    let end = std::time::Instant::now() + max;
    while std::time::Instant::now() < end {
        if core.link_up() == Some(false) {
            std::thread::sleep(MEMIF_TEARDOWN);
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One node of a deployment: a device on a DPDK port, with the cores that drive it (one
/// per queue pair of the port).
pub struct Node {
    /// The verbs device (its control thread runs).
    pub device: Device,
    /// The cores polling the port's queue pairs, by queue; run them with [`Node::run`]
    /// (one) or [`Node::run_cores`] (any number).
    pub cores: Vec<Core>,
    /// The port's `[[ports]]` name.
    pub port_name: String,
    /// The port's address.
    pub addr: Ipv4Addr,
    /// The `[[lcores]]` ids that poll the port, by queue (file order).
    pub lcores: Vec<u32>,
    /// How the port's queues spread flows over the cores (for the log).
    pub steering: String,
    /// How long every lcore has to start polling (`[control] ready_timeout`).
    pub ready_timeout: Duration,
    #[cfg(feature = "dpdk")]
    eal: dpdk_port::Eal,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("port_name", &self.port_name)
            .field("addr", &self.addr)
            .field("lcores", &self.lcores)
            .field("cores", &self.cores.len())
            .field("steering", &self.steering)
            .finish_non_exhaustive()
    }
}

/// The DPDK configuration of a deployment-file port whose device EAL names `device` (see
/// [`appconfig::device_names`]): its MTU, ring sizes and MAC, queue pairs (`rx_queues`,
/// which validation keeps equal to `tx_queues`), the default mempool size (per queue);
/// `tap` ports set their MAC in software; a memif server does not wait for its link.
#[cfg(feature = "dpdk")]
pub fn port_config(port: &appconfig::Port, device: impl Into<String>) -> dpdk_port::PortConfig {
    use dpdk_port::PortConfig;
    PortConfig {
        mtu: usize::from(port.mtu),
        rx_ring: port.rx_ring,
        tx_ring: port.tx_ring,
        mempool_size: PortConfig::default_mempool_size(port.rx_ring, port.tx_ring),
        mac: port.mac.map(|m| m.0),
        software_mac: port.driver == Driver::Tap,
        checksum_offload: port.checksum_offload,
        // DPDK's memif role defaults to server.
        wait_for_link: !(port.driver == Driver::Memif
            && port.role != Some(appconfig::MemifRole::Client)),
        tx_zero_copy: port.tx_zero_copy,
        tso: port.tso,
        queues: port.rx_queues,
        ..PortConfig::new(device)
    }
}

/// [`port_config`] for every port of a deployment, with the device names EAL gives them;
/// `None` for `mem` ports, which have no DPDK device.
#[cfg(feature = "dpdk")]
pub fn port_configs(ports: &[appconfig::Port]) -> Vec<Option<dpdk_port::PortConfig>> {
    ports
        .iter()
        .zip(appconfig::device_names(ports))
        .map(|(p, name)| name.map(|n| port_config(p, n)))
        .collect()
}

/// Opens the node of `cfg` on port `port` (an index from [`select_port`]): starts EAL
/// with [`Config::eal_argv`], opens the DPDK device with its queue pairs, and builds its
/// device and cores (one per queue pair, grouped by the device's steering).
pub fn open(cfg: &Config, port: usize) -> Result<Node, DeployError> {
    open_with_faults(cfg, port, FaultConfig::default())
}

/// [`open`], with `faults` injected into what the port transmits (a
/// [`Faulty`](dataplane::port::faults::Faulty) wrapper around each DPDK queue, seeded
/// apart) when any has a chance.
#[cfg(feature = "dpdk")]
pub fn open_with_faults(
    cfg: &Config,
    port: usize,
    faults: FaultConfig,
) -> Result<Node, DeployError> {
    use dpdk_port::Eal;
    faults_fit(cfg, port, &faults)?;
    let eal = Eal::init(&cfg.eal_argv()).map_err(|e| DeployError::Dpdk(e.to_string()))?;
    open_node(cfg, &eal, port, faults)
}

/// Refuses fault injection on a port with `tso`: faults work on the frames the port is
/// given, and a TSO frame is cut by the device only after that.
pub fn faults_fit(cfg: &Config, port: usize, faults: &FaultConfig) -> Result<(), DeployError> {
    match cfg.ports.get(port) {
        Some(p) if p.tso && faults.any() => Err(DeployError::Select(format!(
            "port {:?} has tso = true: fault injection (--loss, --reorder, ...) works on \
             single segments, before a device would cut a TSO frame; set tso = false to \
             inject faults",
            p.name
        ))),
        _ => Ok(()),
    }
}

/// Opens the nodes of `cfg` on each of `ports` (indices from [`select_port`]) in one
/// EAL: the ports of an appliance (`iwarp serve` serves every port with listeners).
#[cfg(feature = "dpdk")]
pub fn open_ports(cfg: &Config, ports: &[usize]) -> Result<Vec<Node>, DeployError> {
    let eal =
        dpdk_port::Eal::init(&cfg.eal_argv()).map_err(|e| DeployError::Dpdk(e.to_string()))?;
    ports
        .iter()
        .map(|&p| open_node(cfg, &eal, p, FaultConfig::default()))
        .collect()
}

/// Without DPDK there is nothing to open.
#[cfg(not(feature = "dpdk"))]
pub fn open_ports(_cfg: &Config, _ports: &[usize]) -> Result<Vec<Node>, DeployError> {
    Err(DeployError::NoDpdk)
}

#[cfg(feature = "dpdk")]
fn open_node(
    cfg: &Config,
    eal: &dpdk_port::Eal,
    port: usize,
    faults: FaultConfig,
) -> Result<Node, DeployError> {
    use dataplane::lcore::steer::{Steering, DEFAULT_INBOX};
    use dataplane::lcore::CoreConfig;
    use dataplane::net::NetConfig;
    use dataplane::port::Port;
    use dpdk_port::DpdkPort;

    let p = cfg
        .ports
        .get(port)
        .ok_or_else(|| DeployError::Select(format!("no port {port}")))?;
    let mut pcfg = port_configs(&cfg.ports)
        .swap_remove(port)
        .ok_or_else(|| DeployError::Select(format!("port {:?} has no DPDK device", p.name)))?;
    pcfg.link_timeout = cfg.control.link_timeout.0;
    let (queues, steering) =
        DpdkPort::open_queues(eal, &pcfg).map_err(|e| DeployError::Dpdk(e.to_string()))?;
    let mtu = queues.first().map_or(pcfg.mtu, |q| q.mtu());
    let mac = queues.first().map(|q| q.mac());
    let n = queues.len();
    let cores: Vec<(CoreConfig, Box<dyn Port>)> = queues
        .into_iter()
        .enumerate()
        .map(|(q, dpdk)| {
            let core_cfg = CoreConfig {
                net: NetConfig {
                    mac: mac.unwrap_or_else(|| dpdk.mac()),
                    addr: p.ipv4.addr,
                    prefix_len: p.ipv4.len,
                    gateway: p.gateway,
                    mtu,
                },
                tcp: tcp_config(&cfg.tcp, mtu),
                isn_key: None,
                limits: limits_of(cfg),
            };
            let port: Box<dyn Port> = if faults.any() {
                let f = FaultConfig {
                    seed: faults.seed.wrapping_add(q as u64 * 0x9E37),
                    ..faults
                };
                Box::new(dataplane::port::faults::Faulty::new(dpdk, f))
            } else {
                Box::new(dpdk)
            };
            (core_cfg, port)
        })
        .collect();
    let group = (n > 1).then(|| Steering::group(steering.rss.clone(), DEFAULT_INBOX));
    let (device, cores) =
        control::verbs::open_group_on(cores, group, cfg.control.cpu.map(|c| c as usize))
            .map_err(|e| DeployError::Select(format!("control.cpu: {e}")))?;
    // Registered memory comes from DPDK's heap: hugepages when EAL has them.
    let heap = eal.clone();
    device.set_region_allocator(std::sync::Arc::new(move |len| {
        heap.region_memory(len).map_err(|e| e.to_string())
    }));
    // Queue pair i is polled by the i-th lcore that lists the port (validation keeps
    // their number equal to the queue pairs).
    let lcores: Vec<u32> = cfg
        .lcores
        .iter()
        .filter(|l| l.ports.contains(&p.name))
        .map(|l| l.id)
        .collect();
    Ok(Node {
        device,
        cores,
        port_name: p.name.clone(),
        addr: p.ipv4.addr,
        lcores,
        steering: steering.how,
        ready_timeout: cfg.control.ready_timeout.0,
        eal: eal.clone(),
    })
}

/// Without DPDK there is nothing to open.
#[cfg(not(feature = "dpdk"))]
pub fn open_with_faults(
    _cfg: &Config,
    _port: usize,
    _faults: FaultConfig,
) -> Result<Node, DeployError> {
    Err(DeployError::NoDpdk)
}

/// What the cores of a running node ([`Node::run_cores`]) last reported: each core
/// publishes its counters every [`SNAPSHOT_EVERY`] polls, so the consumer thread can
/// show them without touching a core.
#[derive(Debug, Clone, Default)]
pub struct CoreSnapshot {
    /// Counters, summed over the cores.
    pub stats: dataplane::lcore::CoreStats,
    /// Gauges, summed.
    pub gauges: dataplane::lcore::CoreGauges,
    /// Port counters, summed over the queues.
    pub port: dataplane::port::PortStats,
    /// Segment alignment, summed.
    pub alignment: dataplane::lcore::AlignmentStats,
    /// Ethernet/ARP/IPv4 counters, summed.
    pub net: dataplane::net::NetStats,
    /// Connections per core, by core index.
    pub per_core: Vec<usize>,
}

impl CoreSnapshot {
    /// Adds `o`'s counters and gauges (not its `per_core`, which callers list their way).
    pub fn add_counters(&mut self, o: &CoreSnapshot) {
        self.stats.add(&o.stats);
        self.gauges.add(&o.gauges);
        self.port.add(&o.port);
        self.alignment.merge(&o.alignment);
        self.net.add(&o.net);
    }

    /// The counters of one core now (no `per_core`): the one place that lists what a
    /// snapshot takes from a core.
    pub fn of_core(core: &Core) -> CoreSnapshot {
        CoreSnapshot {
            stats: core.stats(),
            gauges: core.gauges(),
            port: core.port_stats(),
            alignment: core.alignment(),
            net: core.net_stats(),
            per_core: Vec::new(),
        }
    }

    /// The counters of `cores` now, summed.
    pub fn of(cores: &[Core]) -> CoreSnapshot {
        let mut all = CoreSnapshot::default();
        for c in cores {
            all.add_counters(&CoreSnapshot::of_core(c));
            all.per_core.push(c.connections());
        }
        all
    }
}

/// Polls between two snapshots of a running core.
pub const SNAPSHOT_EVERY: u64 = 4096;

/// The cores of a node running on their lcores ([`Node::run_cores`]): their latest
/// counters, and a way to pause them while a memif peer disconnects.
#[derive(Debug, Clone)]
pub struct Cores {
    snaps: Vec<std::sync::Arc<std::sync::Mutex<CoreSnapshot>>>,
    quiesce: std::sync::Arc<std::sync::atomic::AtomicU64>,
    limits: dataplane::limits::Limits,
    offload: dataplane::port::ChecksumOffload,
    zero_copy: bool,
    tso_max: usize,
}

impl Cores {
    /// The cores' last counters, summed (`per_core`: each core's connections).
    pub fn snapshot(&self) -> CoreSnapshot {
        let mut all = CoreSnapshot::default();
        for s in &self.snaps {
            let s = s.lock().unwrap_or_else(|e| e.into_inner()).clone();
            all.add_counters(&s);
            all.per_core.push(s.gauges.connections);
        }
        all
    }

    /// Number of cores.
    pub fn len(&self) -> usize {
        self.snaps.len()
    }

    /// Whether there are none (never: a node has at least one core).
    pub fn is_empty(&self) -> bool {
        self.snaps.is_empty()
    }

    /// The cores' limits.
    pub fn limits(&self) -> &dataplane::limits::Limits {
        &self.limits
    }

    /// The port's checksum offloads.
    pub fn checksum_offload(&self) -> dataplane::port::ChecksumOffload {
        self.offload
    }

    /// Whether the port transmits payloads without copying them.
    pub fn tx_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The largest payload of a frame the port's device segments; 0 without TSO.
    pub fn tso_max_payload(&self) -> usize {
        self.tso_max
    }

    /// Asks every core to stop polling until its memif link has gone down (at most
    /// [`MEMIF_QUIESCE`]; see [`quiesce_memif`]): the client is about to exit.
    pub fn quiesce_memif(&self) {
        self.quiesce
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

/// One polled core: the core, where it publishes its snapshot, its node's quiesce
/// generation.
type Polled = (
    Core,
    std::sync::Arc<std::sync::Mutex<CoreSnapshot>>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
);

/// Waits until `want` poll loops have started (`started` counts them), at most
/// `timeout`; `Err` with how many had not.
pub fn wait_ready(
    started: &std::sync::atomic::AtomicUsize,
    want: usize,
    timeout: Duration,
) -> Result<(), usize> {
    let end = std::time::Instant::now() + timeout;
    loop {
        let n = started.load(std::sync::atomic::Ordering::Acquire);
        if n >= want {
            return Ok(());
        }
        if std::time::Instant::now() >= end {
            return Err(want - n);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A polled core with its node's index and its queue.
type Placed = (usize, usize, Polled);

/// One lcore's poll loop over its cores (one per port it polls): polls each in turn until
/// `stop`, publishing snapshots every [`SNAPSHOT_EVERY`] rounds and pausing a core when
/// its node asks ([`Cores::quiesce_memif`]).
fn poll_loop(
    cores: Vec<Polled>,
    stop: &std::sync::atomic::AtomicBool,
    started: &std::sync::atomic::AtomicUsize,
) -> Vec<Polled> {
    use std::sync::atomic::Ordering;
    let mut cores = cores;
    // An lcore that shares its CPU (with the main thread's consumers, another process's
    // lcores, or its other cores' queues) must not keep it while idle: after
    // IDLE_YIELD_POLLS empty polls a core yields (a cheap system call on a dedicated CPU).
    for (core, _, _) in cores.iter_mut() {
        core.set_idle_yield(control::embedded::IDLE_YIELD_POLLS);
    }
    started.fetch_add(1, Ordering::Release);
    let mut seen: Vec<u64> = cores
        .iter()
        .map(|(_, _, q)| q.load(Ordering::Acquire))
        .collect();
    let mut rounds = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for (core, _, _) in cores.iter_mut() {
            core.poll();
        }
        rounds += 1;
        if rounds.is_multiple_of(SNAPSHOT_EVERY) {
            for ((core, snap, quiesce), seen) in cores.iter().zip(seen.iter_mut()) {
                let q = quiesce.load(Ordering::Acquire);
                if q != *seen {
                    *seen = q;
                    quiesce_memif(core, MEMIF_QUIESCE);
                }
                let s = CoreSnapshot::of_core(core);
                *snap.lock().unwrap_or_else(|e| e.into_inner()) = s;
            }
        }
    }
    cores
}

/// Runs every core of `nodes` (the ports of a deployment) and `job` on the calling
/// thread, as [`Node::run_cores`] does for one: each lcore polls the cores of the queues
/// it was given, one per port it lists, and nothing else. `job` gets each node's device
/// and a view of its running cores, in the order of `nodes`; when it returns the cores
/// stop and come back (per node, by queue) with its result.
pub fn run_nodes<F, T>(nodes: Vec<Node>, job: F) -> Result<(T, Vec<Vec<Core>>), DeployError>
where
    F: FnOnce(Vec<Device>, &[Cores]) -> T,
{
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::{Arc, Mutex};
    #[cfg(feature = "dpdk")]
    let eal = match nodes.first() {
        Some(n) => n.eal.clone(),
        None => return Err(DeployError::Select("no port to run".into())),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ready_timeout = nodes
        .iter()
        .map(|n| n.ready_timeout)
        .max()
        .unwrap_or(Duration::from_secs(5));
    let mut views = Vec::new();
    let mut devices = Vec::new();
    // lcore id (None: a thread of its own) -> (node, queue, polled core).
    let mut by_lcore: BTreeMap<Option<u32>, Vec<Placed>> = BTreeMap::new();
    for (ni, node) in nodes.into_iter().enumerate() {
        let Node {
            device,
            cores,
            lcores,
            ..
        } = node;
        let first = cores
            .first()
            .ok_or_else(|| DeployError::Select("a port has no queue pair to poll".into()))?;
        let quiesce = Arc::new(AtomicU64::new(0));
        let view = Cores {
            snaps: cores
                .iter()
                .map(|_| Arc::new(Mutex::new(CoreSnapshot::default())))
                .collect(),
            quiesce: quiesce.clone(),
            limits: *first.limits(),
            offload: first.checksum_offload(),
            zero_copy: first.tx_zero_copy(),
            tso_max: first.tso_max_payload(),
        };
        for (qi, core) in cores.into_iter().enumerate() {
            let lcore = lcores.get(qi).copied();
            #[cfg(feature = "dpdk")]
            let lcore = lcore.filter(|&l| l != eal.main_lcore());
            by_lcore.entry(lcore).or_default().push((
                ni,
                qi,
                (core, view.snaps[qi].clone(), quiesce.clone()),
            ));
        }
        views.push(view);
        devices.push(device);
    }
    enum Running {
        #[cfg(feature = "dpdk")]
        Lcore(dpdk_port::Launched<Vec<Polled>>),
        Thread(std::thread::JoinHandle<Vec<Polled>>),
    }
    let mut running: Vec<(Vec<(usize, usize)>, Running)> = Vec::new();
    let mut failed = None;
    let mut groups: Vec<(Option<u32>, Vec<Placed>)> = Vec::new();
    for (lcore, list) in by_lcore {
        match lcore {
            Some(_) => groups.push((lcore, list)),
            // Cores without an lcore of their own: a thread each.
            None => groups.extend(list.into_iter().map(|c| (None, vec![c]))),
        }
    }
    for (lcore, list) in groups {
        let ids: Vec<(usize, usize)> = list.iter().map(|(n, q, _)| (*n, *q)).collect();
        let polled: Vec<Polled> = list.into_iter().map(|(_, _, p)| p).collect();
        let (stop, started) = (stop.clone(), started.clone());
        let body = move || poll_loop(polled, &stop, &started);
        #[cfg(feature = "dpdk")]
        {
            if let Some(l) = lcore {
                match eal.launch(l, body) {
                    Ok(h) => running.push((ids, Running::Lcore(h))),
                    Err(e) => {
                        failed = Some(DeployError::Dpdk(e.to_string()));
                        break;
                    }
                }
                continue;
            }
        }
        let name = match lcore {
            Some(l) => format!("iwarp-lcore{l}"),
            None => format!("iwarp-core{}.{}", ids[0].0, ids[0].1),
        };
        match std::thread::Builder::new().name(name).spawn(body) {
            Ok(h) => running.push((ids, Running::Thread(h))),
            Err(e) => {
                failed = Some(DeployError::Dpdk(format!("spawning a core thread: {e}")));
                break;
            }
        }
    }
    if failed.is_none() {
        if let Err(n) = wait_ready(&started, running.len(), ready_timeout) {
            failed = Some(DeployError::Dpdk(format!(
                "{n} of {} lcore(s) did not start polling within control.ready_timeout ({:?})",
                running.len(),
                ready_timeout
            )));
        }
    }
    let out = if failed.is_none() {
        Some(job(devices, &views))
    } else {
        None
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut back: Vec<Vec<(usize, Core)>> = views.iter().map(|_| Vec::new()).collect();
    for (ids, r) in running {
        let polled = match r {
            #[cfg(feature = "dpdk")]
            Running::Lcore(h) => h.join().map_err(|e| DeployError::Dpdk(e.to_string())),
            Running::Thread(h) => h
                .join()
                .map_err(|_| DeployError::Dpdk("a core thread panicked".into())),
        };
        match polled {
            Ok(list) => {
                for ((n, q), (core, _, _)) in ids.into_iter().zip(list) {
                    back[n].push((q, core));
                }
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    let back: Vec<Vec<Core>> = back
        .into_iter()
        .map(|mut v| {
            v.sort_by_key(|(q, _)| *q);
            v.into_iter().map(|(_, c)| c).collect()
        })
        .collect();
    match (out, failed) {
        (Some(t), None) => Ok((t, back)),
        (_, Some(e)) => Err(e),
        (None, None) => Err(DeployError::Dpdk("the cores did not start".into())),
    }
}

impl Node {
    /// Runs `job` with the device and its only core on the port's dataplane lcore (EAL
    /// remote launch), or on the calling thread when the file names no lcore for the
    /// port or names the main lcore: the job drives the core between its own steps (run
    /// to completion). Blocks until the job returns. A port of several queue pairs needs
    /// [`Node::run_cores`]: refused.
    pub fn run<F, T>(self, job: F) -> Result<T, DeployError>
    where
        F: FnOnce(Device, Core) -> T + Send + 'static,
        T: Send + 'static,
    {
        if self.cores.len() != 1 {
            return Err(DeployError::Select(format!(
                "port {:?} has {} queue pairs (one core each); this command drives one core: \
                 give the port rx_queues = tx_queues = 1 and one [[lcores]] entry",
                self.port_name,
                self.cores.len()
            )));
        }
        #[cfg(feature = "dpdk")]
        {
            let Node {
                device,
                mut cores,
                lcores,
                eal,
                ready_timeout,
                ..
            } = self;
            let core = cores.remove(0);
            match lcores.first().copied() {
                Some(l) if l != eal.main_lcore() => {
                    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    let s = started.clone();
                    let launched = eal
                        .launch(l, move || {
                            s.fetch_add(1, std::sync::atomic::Ordering::Release);
                            job(device, core)
                        })
                        .map_err(|e| DeployError::Dpdk(e.to_string()))?;
                    if wait_ready(&started, 1, ready_timeout).is_err() {
                        // The job may still start; this process gives up on it.
                        return Err(DeployError::Dpdk(format!(
                            "lcore {l} did not start within control.ready_timeout \
                             ({ready_timeout:?})"
                        )));
                    }
                    launched
                        .join()
                        .map_err(|e| DeployError::Dpdk(e.to_string()))
                }
                _ => Ok(job(device, core)),
            }
        }
        #[cfg(not(feature = "dpdk"))]
        {
            let mut cores = self.cores;
            Ok(job(self.device, cores.remove(0)))
        }
    }

    /// Runs every core of the node on its lcore, doing nothing but poll (a core whose
    /// lcore is the main lcore, which runs `job`, polls on a thread of its own), and
    /// `job` on the calling thread with the device and a view of the running cores: the
    /// consumer work never takes a core's time. When `job` returns the cores stop; they
    /// come back with its result.
    pub fn run_cores<F, T>(self, job: F) -> Result<(T, Vec<Core>), DeployError>
    where
        F: FnOnce(Device, &Cores) -> T,
    {
        let (t, mut cores) =
            run_nodes(vec![self], |mut devs, views| job(devs.remove(0), &views[0]))?;
        Ok((t, cores.remove(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_add_every_counter() {
        let mut one = CoreSnapshot::default();
        one.stats.polls = 2;
        one.gauges.connections = 3;
        one.port.rx_frames = 4;
        one.alignment.timeouts = 5;
        one.net.held_sent = 6;
        let mut all = CoreSnapshot::default();
        all.add_counters(&one);
        all.add_counters(&one);
        assert_eq!(
            (
                all.stats.polls,
                all.gauges.connections,
                all.port.rx_frames,
                all.alignment.timeouts,
                all.net.held_sent
            ),
            (4, 6, 8, 10, 12)
        );
    }

    /// `[control] ready_timeout` bounds the wait for the lcores to start polling.
    #[test]
    fn wait_ready_ends_at_the_timeout_with_the_missing_count() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let started = AtomicUsize::new(1);
        let t = std::time::Instant::now();
        assert_eq!(wait_ready(&started, 3, Duration::from_millis(30)), Err(2));
        assert!(t.elapsed() >= Duration::from_millis(30));
        started.store(3, Ordering::Release);
        assert_eq!(wait_ready(&started, 3, Duration::ZERO), Ok(()));
    }

    /// `[qp] max_qps` reaches the device's limits.
    #[test]
    fn max_qps_comes_from_the_qp_table() {
        let cfg = appconfig::from_str(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"veth0\"\n\
             ipv4 = \"10.9.0.1/24\"\n\n[[lcores]]\nid = 1\nports = [\"p0\"]\n\n\
             [qp]\nmax_qps = 7\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(limits_of(&cfg).max_qps, 7);
        let bare = appconfig::from_str(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"veth0\"\n\
             ipv4 = \"10.9.0.1/24\"\n\n[[lcores]]\nid = 1\nports = [\"p0\"]\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(limits_of(&bare).max_qps, 64);
    }

    #[cfg(feature = "dpdk")]
    const DEPLOYMENT: &str = r#"
[eal]
memory_mb = 256
hugepages = true

[[ports]]
name = "a"
driver = "af_packet"
iface = "eth1"
ipv4 = "10.77.0.3/24"
mtu = 9000
rx_ring = 512
tx_ring = 2048
mac = "02:00:00:00:00:07"

[[ports]]
name = "t"
driver = "tap"
iface = "iwtap0"
ipv4 = "10.78.0.3/24"
tx_zero_copy = true
tso = true

[[ports]]
name = "n"
driver = "pci"
pci_addr = "01:00.0"
ipv4 = "10.79.0.3/24"

[[ports]]
name = "a2"
driver = "af_packet"
iface = "eth2"
ipv4 = "10.80.0.3/24"

[[lcores]]
id = 1
ports = ["a", "t", "n", "a2"]
"#;

    #[cfg(feature = "dpdk")]
    #[test]
    fn from_ports_maps_a_deployment() {
        let cfg = appconfig::from_str(DEPLOYMENT, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        let ports = port_configs(&cfg.ports);
        assert_eq!(ports.len(), 4);
        let a = ports[0].as_ref().expect("af_packet port");
        assert_eq!(a.device, "net_af_packet0");
        assert_eq!(a.mtu, 9000);
        assert_eq!((a.rx_ring, a.tx_ring), (512, 2048));
        assert_eq!(a.mac, Some([2, 0, 0, 0, 0, 7]));
        assert_eq!(
            a.mempool_size,
            dpdk_port::PortConfig::default_mempool_size(512, 2048)
        );
        assert_eq!(a.validate(), Ok(()));
        assert!(!a.tx_zero_copy, "copying is the default");
        assert!(!a.tso, "no TSO by default");
        let t = ports[1].as_ref().expect("tap port");
        assert!(t.tx_zero_copy);
        assert!(t.tso);
        assert_eq!(t.device, "net_tap0");
        assert_eq!(t.mtu, 1500);
        assert_eq!(t.mac, None);
        assert_eq!(ports[2].as_ref().expect("pci").device, "0000:01:00.0");
        assert_eq!(
            ports[3].as_ref().expect("af_packet").device,
            "net_af_packet1"
        );
        let single = port_config(&cfg.ports[0], "x");
        assert_eq!(single.device, "x");
        assert_eq!(single.mtu, a.mtu);
    }

    #[test]
    fn every_limits_key_and_the_first_fpdu_timeout_reach_the_core() {
        let c = appconfig::from_str(
            &format!(
                "{}[limits]\nmax_connections = 7\nsyn_backlog = 8\nstartup_timeout = \"9s\"\n\
                 startup_octets = 1000\nuser_timeout = \"11s\"\nlinger = \"12ms\"\n\
                 time_wait = 13\ncontrol_queue = 140\nlistener_queue = 15\n\
                 [mpa]\nfirst_fpdu_timeout = \"16s\"\n",
                TWO
            ),
            "t.toml",
        )
        .expect("valid");
        let l = limits(&c.limits);
        assert_eq!(
            l,
            dataplane::limits::Limits {
                max_connections: 7,
                syn_backlog: 8,
                startup_timeout: Duration::from_secs(9),
                startup_octets: 1000,
                user_timeout: Duration::from_secs(11),
                linger: Duration::from_millis(12),
                time_wait: 13,
                control_queue: 140,
                listener_queue: 15,
                max_qps: 65536,
            }
        );
        l.validate().expect("in range");
        assert_eq!(
            crate::mpa::responder(&c.mpa).first_fpdu_timeout,
            Some(Duration::from_secs(16))
        );
    }

    #[test]
    fn limits_defaults_match_the_dataplane() {
        assert_eq!(
            limits(&appconfig::Limits::default()),
            dataplane::limits::Limits::default()
        );
        assert_eq!(
            appconfig::DEFAULT_STARTUP_OCTETS as usize,
            dataplane::limits::MAX_STARTUP_OCTETS
        );
    }

    fn cfg(text: &str) -> Config {
        appconfig::from_str(text, "t.toml").expect("valid config")
    }

    const TWO: &str = r#"
[[ports]]
name = "a"
driver = "af_packet"
iface = "veth0"
ipv4 = "10.1.0.1/24"
[[ports]]
name = "b"
driver = "tap"
iface = "tap0"
ipv4 = "10.2.0.1/16"
gateway = "10.2.0.254"
[[lcores]]
id = 1
ports = ["a", "b"]
"#;

    #[test]
    fn port_selected_by_name_prefix_or_gateway() {
        let c = cfg(TWO);
        assert_eq!(select_port(&c, Some("b"), None).unwrap(), 1);
        assert_eq!(
            select_port(&c, None, Some(Ipv4Addr::new(10, 1, 0, 9))).unwrap(),
            0
        );
        assert_eq!(
            select_port(&c, None, Some(Ipv4Addr::new(10, 2, 200, 9))).unwrap(),
            1
        );
        // Outside both prefixes: the port with a gateway.
        assert_eq!(
            select_port(&c, None, Some(Ipv4Addr::new(192, 0, 2, 1))).unwrap(),
            1
        );
        let e = select_port(&c, Some("c"), None).unwrap_err().to_string();
        assert!(e.contains("\"c\""), "{e}");
        let e = select_port(&c, None, None).unwrap_err().to_string();
        assert!(e.contains("several ports"), "{e}");
    }

    #[test]
    fn mem_port_is_refused_with_a_hint() {
        let c = cfg(include_str!("../config/loopback.toml"));
        let e = select_port(&c, Some("p0"), None).unwrap_err().to_string();
        assert!(e.contains("without --config"), "{e}");
    }

    #[cfg(feature = "dpdk")]
    #[test]
    fn faults_are_refused_on_a_tso_port() {
        let text = DEPLOYMENT.replace("tso = true\n", "");
        let plain = cfg(&text);
        let tso = cfg(DEPLOYMENT);
        let t = tso
            .ports
            .iter()
            .position(|p| p.tso)
            .expect("the tap port has tso");
        let loss = FaultConfig {
            loss: 0.01,
            ..FaultConfig::default()
        };
        let e = faults_fit(&tso, t, &loss).unwrap_err().to_string();
        assert!(
            e.contains("tso = true") && e.contains("set tso = false"),
            "{e}"
        );
        assert!(faults_fit(&tso, t, &FaultConfig::default()).is_ok());
        assert!(faults_fit(&plain, t, &loss).is_ok());
    }

    #[test]
    fn tcp_table_translates() {
        let mut t = appconfig::Tcp {
            sack: true,
            delayed_ack: false,
            ..appconfig::Tcp::default()
        };
        t.rto_min.0 = Duration::from_micros(1500);
        let c = tcp_config(&t, 9000);
        assert_eq!(c.mtu, 9000);
        assert!(c.sack);
        assert_eq!(c.rto_min, smoltcp::time::Duration::from_micros(1500));
        assert_eq!(c.delayed_ack, smoltcp::time::Duration::ZERO);
        assert_eq!(c.recv_buffer, 256 * 1024);
    }
}
