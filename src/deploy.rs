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
/// budgets there are the server's, not the core's).
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

/// One node of a deployment: a device on a DPDK port, with the core that drives it.
pub struct Node {
    /// The verbs device (its control thread runs).
    pub device: Device,
    /// The core polling the port; run it with [`Node::run`].
    pub core: Core,
    /// The port's `[[ports]]` name.
    pub port_name: String,
    /// The port's address.
    pub addr: Ipv4Addr,
    /// The `[[lcores]]` id that polls the port, if the file says.
    pub lcore: Option<u32>,
    #[cfg(feature = "dpdk")]
    eal: dpdk_port::Eal,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("port_name", &self.port_name)
            .field("addr", &self.addr)
            .field("lcore", &self.lcore)
            .finish_non_exhaustive()
    }
}

/// The DPDK configuration of a deployment-file port whose device EAL names `device` (see
/// [`appconfig::device_names`]): its MTU, ring sizes and MAC, the default mempool size;
/// `tap` ports set their MAC in software; a memif server does not wait for its link. Only
/// one rx and one tx queue are used whatever `rx_queues`/`tx_queues` say.
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
/// with [`Config::eal_argv`], opens the DPDK device, and builds its device and core.
pub fn open(cfg: &Config, port: usize) -> Result<Node, DeployError> {
    open_with_faults(cfg, port, FaultConfig::default())
}

/// [`open`], with `faults` injected into what the port transmits (a
/// [`Faulty`](dataplane::port::faults::Faulty) wrapper around the DPDK port) when any has
/// a chance.
#[cfg(feature = "dpdk")]
pub fn open_with_faults(
    cfg: &Config,
    port: usize,
    faults: FaultConfig,
) -> Result<Node, DeployError> {
    use dataplane::lcore::CoreConfig;
    use dataplane::net::NetConfig;
    use dataplane::port::Port;
    use dpdk_port::{DpdkPort, Eal};

    let p = cfg
        .ports
        .get(port)
        .ok_or_else(|| DeployError::Select(format!("no port {port}")))?;
    let mut pcfg = port_configs(&cfg.ports)
        .swap_remove(port)
        .ok_or_else(|| DeployError::Select(format!("port {:?} has no DPDK device", p.name)))?;
    let eal = Eal::init(&cfg.eal_argv()).map_err(|e| DeployError::Dpdk(e.to_string()))?;
    pcfg.link_timeout = cfg.control.link_timeout.0;
    let dpdk = DpdkPort::open(&eal, &pcfg).map_err(|e| DeployError::Dpdk(e.to_string()))?;
    let mtu = dpdk.mtu();
    let core_cfg = CoreConfig {
        net: NetConfig {
            mac: dpdk.mac(),
            addr: p.ipv4.addr,
            prefix_len: p.ipv4.len,
            gateway: p.gateway,
            mtu,
        },
        tcp: tcp_config(&cfg.tcp, mtu),
        isn_key: None,
        limits: limits(&cfg.limits),
    };
    let port: Box<dyn Port> = if faults.any() {
        Box::new(dataplane::port::faults::Faulty::new(dpdk, faults))
    } else {
        Box::new(dpdk)
    };
    let (device, core) = control::verbs::open(core_cfg, port);
    let lcore = cfg
        .lcores
        .iter()
        .find(|l| l.ports.contains(&p.name))
        .map(|l| l.id);
    Ok(Node {
        device,
        core,
        port_name: p.name.clone(),
        addr: p.ipv4.addr,
        lcore,
        eal,
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

impl Node {
    /// Runs `job` with the device and core on the port's dataplane lcore (EAL remote
    /// launch), or on the calling thread when the file names no lcore for the port or
    /// names the main lcore. Blocks until the job returns.
    pub fn run<F, T>(self, job: F) -> Result<T, DeployError>
    where
        F: FnOnce(Device, Core) -> T + Send + 'static,
        T: Send + 'static,
    {
        #[cfg(feature = "dpdk")]
        {
            let Node {
                device,
                core,
                lcore,
                eal,
                ..
            } = self;
            match lcore {
                Some(l) if l != eal.main_lcore() => {
                    let launched = eal
                        .launch(l, move || job(device, core))
                        .map_err(|e| DeployError::Dpdk(e.to_string()))?;
                    launched
                        .join()
                        .map_err(|e| DeployError::Dpdk(e.to_string()))
                }
                _ => Ok(job(device, core)),
            }
        }
        #[cfg(not(feature = "dpdk"))]
        {
            Ok(job(self.device, self.core))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "dpdk")]
    const DEPLOYMENT: &str = r#"
[eal]
memory_mb = 256

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
        let t = ports[1].as_ref().expect("tap port");
        assert!(t.tx_zero_copy);
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
