//! Checks of a deployment against the machine, before DPDK starts: each problem at its
//! field, `file:line:col: field: message`.

use std::collections::BTreeSet;
use std::path::Path;

use appconfig::{from_str_on, ErrorKind, Host};

/// A machine with CPUs 0 and 1, interface `veth0`, PCI device `0000:01:00.0`, 300 MiB of
/// free hugepages and the directory `/run/memif`.
struct Machine;

impl Host for Machine {
    fn interface_exists(&self, name: &str) -> bool {
        name == "veth0"
    }
    fn allowed_cpus(&self) -> Option<BTreeSet<u32>> {
        Some([0, 1].into())
    }
    fn free_hugepages_mib(&self) -> Option<u64> {
        Some(300)
    }
    fn pci_device_exists(&self, addr: &str) -> bool {
        addr == "0000:01:00.0"
    }
    fn directory_exists(&self, dir: &Path) -> bool {
        dir == Path::new("/run/memif")
    }
}

fn port(driver: &str, extra: &str) -> String {
    format!(
        "[[ports]]\nname = \"p0\"\ndriver = \"{driver}\"\n{extra}ipv4 = \"10.0.0.1/24\"\n\n\
         [[lcores]]\nid = 1\nports = [\"p0\"]\n"
    )
}

fn errors(text: &str) -> Vec<String> {
    match from_str_on(text, "d.toml", &Machine) {
        Ok(_) => Vec::new(),
        Err(e) => {
            assert!(
                e.diagnostics().iter().all(|d| d.kind == ErrorKind::Host),
                "{e}"
            );
            e.diagnostics().iter().map(|d| d.to_string()).collect()
        }
    }
}

#[test]
fn a_deployment_this_machine_can_run_passes() {
    assert_eq!(
        errors(&port("af_packet", "iface = \"veth0\"\n")),
        Vec::<String>::new()
    );
    let pci = format!(
        "[eal]\nhugepages = true\nmemory_mb = 256\n{}",
        port("pci", "pci_addr = \"01:00.0\"\n")
    );
    assert_eq!(errors(&pci), Vec::<String>::new());
}

#[test]
fn each_problem_points_at_its_field() {
    let e = errors(&port("af_packet", "iface = \"eth9\"\n"));
    assert_eq!(
        e,
        ["d.toml:4:1: ports[0].iface: no network interface \"eth9\" on this machine (`ip link` lists them)"]
    );
    let e = errors(&format!(
        "[eal]\nhugepages = true\n{}",
        port("pci", "pci_addr = \"02:00.0\"\n").replace("id = 1", "id = 7")
    ));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("d.toml:6:1: ports[0].pci_addr: no PCI device 0000:02:00.0"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with(
            "d.toml:10:1: lcores[0].id: lcore 7 is not a CPU this process may run on (allowed: 0,1)"
        ),
        "{e:?}"
    );
    let e = errors(&format!(
        "[eal]\nhugepages = true\nmemory_mb = 1024\n{}",
        port("af_packet", "iface = \"veth0\"\n")
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(
            "d.toml:2:1: eal.hugepages: 300 MiB of hugepages free, memory_mb asks 1024"
        ),
        "{e:?}"
    );
    let e = errors(&port(
        "memif",
        "socket = \"/run/nowhere/m.sock\"\nrole = \"server\"\n",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains(
            "ports[0].socket: the directory /run/nowhere of the memif socket does not exist"
        ),
        "{e:?}"
    );
    let e = errors(&format!(
        "[control]\nlcore = 5\n\n{}",
        port("af_packet", "iface = \"veth0\"\n")
    ));
    assert!(
        e[0].contains("control.lcore: lcore 5 is not a CPU"),
        "{e:?}"
    );
}

/// The machine is asked only about a deployment that is right in itself: schema and
/// rule errors come first, alone.
#[test]
fn rule_errors_come_before_the_machine() {
    let e = from_str_on(
        &port("af_packet", "iface = \"eth9\"\n").replace("10.0.0.1/24", "10.0.0.1/33"),
        "d.toml",
        &Machine,
    )
    .unwrap_err();
    assert!(
        e.diagnostics().iter().all(|d| d.kind != ErrorKind::Host),
        "{e}"
    );
}

/// The real machine answers too (this one has `lo`, and a CPU 0).
#[test]
fn this_machine() {
    let s = appconfig::System;
    assert!(s.interface_exists("lo"));
    assert!(!s.interface_exists("no-such-interface0"));
    assert!(!s.interface_exists("../lo"));
    assert!(s.allowed_cpus().is_some_and(|c| !c.is_empty()));
    assert!(s.free_hugepages_mib().is_some());
    assert!(s.directory_exists(Path::new("/tmp")));
}
