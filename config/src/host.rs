//! Checks of a deployment against the machine it is to run on, before DPDK starts: the
//! problems a check can see (a missing interface, an lcore the process may not run on,
//! too few hugepages, a missing PCI device, a memif socket in a missing directory) are
//! reported at the field at fault, like the schema's, instead of as a DPDK failure or
//! EAL's usage text.

use std::collections::BTreeSet;
use std::path::Path;

use crate::schema::{Config, Driver};
use crate::validate::parse_core_list;

/// What the checks ask of the machine. [`System`] answers from `/sys` and `/proc`; tests
/// answer for a machine of their own.
pub trait Host {
    /// Whether a network interface of this name exists.
    fn interface_exists(&self, name: &str) -> bool;
    /// The CPUs this process may run on, if known.
    fn allowed_cpus(&self) -> Option<BTreeSet<u32>>;
    /// Free hugepage memory in MiB, if known.
    fn free_hugepages_mib(&self) -> Option<u64>;
    /// Whether a PCI device of this full address (`0000:01:00.0`) exists.
    fn pci_device_exists(&self, addr: &str) -> bool;
    /// Whether this directory exists.
    fn directory_exists(&self, dir: &Path) -> bool;
}

/// The machine this process runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Host for System {
    fn interface_exists(&self, name: &str) -> bool {
        !name.contains('/') && Path::new("/sys/class/net").join(name).exists()
    }

    fn allowed_cpus(&self) -> Option<BTreeSet<u32>> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
            .trim();
        parse_core_list(list).ok().map(|v| v.into_iter().collect())
    }

    fn free_hugepages_mib(&self) -> Option<u64> {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<u64> {
            info.lines()
                .find_map(|l| l.strip_prefix(name))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        let pages = field("HugePages_Free:")?;
        let kib = field("Hugepagesize:")?;
        Some(pages * kib / 1024)
    }

    fn pci_device_exists(&self, addr: &str) -> bool {
        !addr.contains('/') && Path::new("/sys/bus/pci/devices").join(addr).exists()
    }

    fn directory_exists(&self, dir: &Path) -> bool {
        dir.is_dir()
    }
}

/// A PCI address in full form: `01:00.0` gets the domain `0000:`.
fn full_pci(addr: &str) -> String {
    if addr.matches(':').count() == 1 {
        format!("0000:{addr}")
    } else {
        addr.to_string()
    }
}

/// The problems of `c` on `host`, as (field path, message).
pub(crate) fn check(c: &Config, host: &dyn Host) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(allowed) = host.allowed_cpus() {
        let list = || {
            let v: Vec<String> = allowed.iter().map(u32::to_string).collect();
            v.join(",")
        };
        let mut lcore = |path: String, id: u32| {
            if !allowed.contains(&id) {
                out.push((
                    path,
                    format!(
                        "lcore {id} is not a CPU this process may run on (allowed: {})",
                        list()
                    ),
                ));
            }
        };
        if let Some(id) = c.control.lcore {
            lcore("control.lcore".into(), id);
        }
        if let Some(id) = c.control.cpu {
            lcore("control.cpu".into(), id);
        }
        for (i, l) in c.lcores.iter().enumerate() {
            lcore(format!("lcores[{i}].id"), l.id);
        }
        if let Some(ids) = c
            .eal
            .lcores
            .as_deref()
            .and_then(|s| parse_core_list(s).ok())
        {
            if let Some(id) = ids.into_iter().find(|id| !allowed.contains(id)) {
                lcore("eal.lcores".into(), id);
            }
        }
    }
    for (i, p) in c.ports.iter().enumerate() {
        match p.driver {
            Driver::AfPacket => {
                if let Some(iface) = &p.iface {
                    if !host.interface_exists(iface) {
                        out.push((
                            format!("ports[{i}].iface"),
                            format!(
                                "no network interface {iface:?} on this machine (`ip link` lists them)"
                            ),
                        ));
                    }
                }
            }
            Driver::Pci => {
                if let Some(addr) = &p.pci_addr {
                    let full = full_pci(addr);
                    if !host.pci_device_exists(&full) {
                        out.push((
                            format!("ports[{i}].pci_addr"),
                            format!("no PCI device {full} on this machine (`lspci -D` lists them)"),
                        ));
                    }
                }
            }
            Driver::Memif => {
                if let Some(dir) = p.socket.as_deref().map(Path::new).and_then(Path::parent) {
                    if !dir.as_os_str().is_empty() && !host.directory_exists(dir) {
                        out.push((
                            format!("ports[{i}].socket"),
                            format!(
                                "the directory {} of the memif socket does not exist",
                                dir.display()
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if c.eal.hugepages {
        if let Some(free) = host.free_hugepages_mib() {
            let want = u64::from(c.eal.memory_mb);
            if free < want {
                out.push((
                    "eal.hugepages".into(),
                    format!(
                        "{free} MiB of hugepages free, memory_mb asks {want}: reserve more \
                         (e.g. `echo {} > /proc/sys/vm/nr_hugepages` for 2 MiB pages) or set \
                         hugepages = false",
                        want.div_ceil(2)
                    ),
                ));
            }
        }
    }
    out
}
