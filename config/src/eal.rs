//! The DPDK EAL argv of a deployment, and the DPDK device name of each port.

use crate::schema::{Config, Driver, Eal, Port};

impl Eal {
    /// The full EAL argv for `ports`, program name first (`"iwarp"`), in this order:
    ///
    /// * `-l <lcores>` when `[eal] lcores` is set ([`Config::eal_argv`] fills it in
    ///   otherwise);
    /// * memory: `--no-huge -m <memory_mb>` without hugepages, `-m <memory_mb>` with them;
    /// * coexistence: `--file-prefix=<file_prefix>` when set, else `--no-shconf` without
    ///   hugepages or `--in-memory` with them (DPDK refuses `--in-memory` with
    ///   `--no-huge`);
    /// * devices: `-a <pci_addr>` for each `pci` port, or `--no-pci` when there is none;
    ///   one `--vdev` per `af_packet` / `tap` / `memif` port, numbered per driver in file
    ///   order (`net_af_packet0,iface=eth1,qpairs=2,framecnt=512`,
    ///   `net_tap0,iface=iwtap0` (the port's `mac` is used in software, not given to the
    ///   kernel interface),
    ///   `net_memif0,role=server,socket=/run/iwarp/memif.sock,id=0[,mac=..]`); `mem`
    ///   ports need nothing;
    /// * `args`, verbatim.
    pub fn eal_argv(&self, ports: &[Port]) -> Vec<String> {
        build(self, ports, self.lcores.clone(), None)
    }
}

pub(crate) fn config_argv(c: &Config) -> Vec<String> {
    let lcores = c.eal.lcores.clone().or_else(|| {
        let mut ids: Vec<u32> = c.lcores.iter().map(|l| l.id).collect();
        ids.extend(c.control.lcore);
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            None
        } else {
            Some(ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
        }
    });
    build(&c.eal, &c.ports, lcores, c.control.lcore)
}

fn build(eal: &Eal, ports: &[Port], lcores: Option<String>, main: Option<u32>) -> Vec<String> {
    let mut argv = vec!["iwarp".to_string()];
    if let Some(l) = lcores {
        argv.push("-l".into());
        argv.push(l);
    }
    if let Some(m) = main {
        argv.push(format!("--main-lcore={m}"));
    }
    if !eal.hugepages {
        argv.push("--no-huge".into());
    }
    argv.push("-m".into());
    argv.push(eal.memory_mb.to_string());
    match (&eal.file_prefix, eal.hugepages) {
        (Some(p), _) => argv.push(format!("--file-prefix={p}")),
        (None, false) => argv.push("--no-shconf".into()),
        (None, true) => argv.push("--in-memory".into()),
    }
    let mut any_pci = false;
    for port in ports.iter().filter(|p| p.driver == Driver::Pci) {
        if let Some(addr) = &port.pci_addr {
            any_pci = true;
            argv.push("-a".into());
            argv.push(normalize_pci(addr));
        }
    }
    if !any_pci {
        argv.push("--no-pci".into());
    }
    for (port, name) in ports.iter().zip(device_names(ports)) {
        let Some(name) = name else { continue };
        let mut vdev = format!("--vdev={name}");
        match port.driver {
            Driver::AfPacket => {
                push_arg(&mut vdev, "iface", port.iface.as_deref());
                let qpairs = port.rx_queues.max(port.tx_queues);
                if qpairs > 1 {
                    push_arg(&mut vdev, "qpairs", Some(&qpairs.to_string()));
                }
                push_arg(
                    &mut vdev,
                    "framecnt",
                    port.framecnt.map(|n| n.to_string()).as_deref(),
                );
            }
            Driver::Tap => {
                // No `mac=`: the port's MAC is not the kernel interface's (see
                // dpdk_port::PortConfig::software_mac).
                push_arg(&mut vdev, "iface", port.iface.as_deref());
            }
            Driver::Memif => {
                push_arg(&mut vdev, "role", port.role.map(|r| r.as_str()));
                push_arg(&mut vdev, "socket", port.socket.as_deref());
                push_arg(&mut vdev, "id", Some(&port.id.unwrap_or(0).to_string()));
                push_arg(&mut vdev, "mac", port.mac.map(|m| m.to_string()).as_deref());
            }
            Driver::Mem | Driver::Pci => continue,
        }
        argv.push(vdev);
    }
    argv.extend(eal.args.iter().cloned());
    argv
}

fn push_arg(vdev: &mut String, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        vdev.push(',');
        vdev.push_str(key);
        vdev.push('=');
        vdev.push_str(v);
    }
}

/// `01:00.0` → `0000:01:00.0`, lower case (the name DPDK gives the device).
pub(crate) fn normalize_pci(addr: &str) -> String {
    let a = addr.to_ascii_lowercase();
    if a.matches(':').count() == 1 {
        format!("0000:{a}")
    } else {
        a
    }
}

/// The DPDK device name of each port, in order, for `rte_eth_dev_get_port_by_name`:
/// `net_af_packet<i>`, `net_tap<i>`, `net_memif<i>` (numbered per driver in file order,
/// as [`Eal::eal_argv`] creates them), the full PCI address (`0000:01:00.0`) for `pci`,
/// and `None` for `mem` ports (no DPDK device).
pub fn device_names(ports: &[Port]) -> Vec<Option<String>> {
    let (mut af, mut tap, mut memif) = (0, 0, 0);
    let next = |n: &mut u32, prefix: &str| {
        let name = format!("{prefix}{n}");
        *n += 1;
        Some(name)
    };
    ports
        .iter()
        .map(|p| match p.driver {
            Driver::Mem => None,
            Driver::AfPacket => next(&mut af, "net_af_packet"),
            Driver::Tap => next(&mut tap, "net_tap"),
            Driver::Memif => next(&mut memif, "net_memif"),
            Driver::Pci => p.pci_addr.as_deref().map(normalize_pci),
        })
        .collect()
}
