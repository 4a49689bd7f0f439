//! Every example deployment under config/ loads and validates, and builds the EAL argv
//! its comments promise.

use std::path::{Path, PathBuf};

use appconfig::{device_names, load, loopback, Driver, MemifRole, LOOPBACK_TOML};

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn example(name: &str) -> appconfig::Config {
    let path = config_dir().join(name);
    load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_toml_file_in_config_loads() {
    let mut n = 0;
    for entry in std::fs::read_dir(config_dir()).unwrap() {
        let path = entry.unwrap().path();
        // Cargo.toml is this crate's manifest, not a deployment.
        if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("Cargo.toml") {
            load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 6, "only {n} example files");
}

#[test]
fn loopback_is_the_embedded_default_and_needs_no_eal() {
    let c = loopback();
    assert_eq!(c, example("loopback.toml"));
    assert!(LOOPBACK_TOML.contains("driver = \"mem\""));
    assert!(!c.needs_eal());
    assert_eq!(c.ports.len(), 2);
    assert!(c.ports.iter().all(|p| p.driver == Driver::Mem));
    assert_eq!(c.ports[0].peer.as_deref(), Some("p1"));
    assert_eq!(device_names(&c.ports), vec![None, None]);
    let bench = c.bench.as_ref().unwrap();
    assert_eq!(bench.peer.to_string(), "10.77.0.2:18515");
}

#[test]
fn af_packet_argv() {
    let c = example("af_packet.toml");
    assert!(c.needs_eal());
    assert_eq!(
        c.eal_argv(),
        [
            "iwarp",
            "-l",
            "0,1",
            "--main-lcore=0",
            "--no-huge",
            "-m",
            "256",
            "--no-shconf",
            "--no-pci",
            "--vdev=net_af_packet0,iface=iw0,framecnt=512",
        ]
    );
    assert_eq!(device_names(&c.ports), vec![Some("net_af_packet0".into())]);
    // Without the Config, no -l or --main-lcore is made up.
    let argv = c.eal.eal_argv(&c.ports);
    assert!(!argv
        .iter()
        .any(|a| a == "-l" || a.starts_with("--main-lcore")));
}

#[test]
fn tap_argv() {
    let c = example("tap.toml");
    let argv = c.eal_argv();
    assert!(argv.contains(&"--vdev=net_tap0,iface=iwtap0".to_string()));
    assert!(argv.contains(&"--no-pci".to_string()));
}

#[test]
fn memif_pair_can_coexist() {
    let server = example("memif-server.toml");
    let client = example("memif-client.toml");
    assert_eq!(server.ports[0].role, Some(MemifRole::Server));
    assert_eq!(client.ports[0].role, Some(MemifRole::Client));
    assert_eq!(server.ports[0].socket, client.ports[0].socket);
    let (s, c) = (server.eal_argv(), client.eal_argv());
    assert!(s.contains(&"--file-prefix=iwarp-memif-server".to_string()));
    assert!(c.contains(&"--file-prefix=iwarp-memif-client".to_string()));
    assert!(s
        .iter()
        .any(|a| a.starts_with("--vdev=net_memif0,role=server,socket=/run/iwarp-memif.sock,id=0")));
    assert!(c
        .iter()
        .any(|a| a.starts_with("--vdev=net_memif0,role=client,socket=/run/iwarp-memif.sock,id=0")));
    // Distinct lcores, so both fit on one machine.
    let lcores = |c: &appconfig::Config| {
        c.lcores
            .iter()
            .map(|l| l.id)
            .chain(c.control.lcore)
            .collect::<Vec<_>>()
    };
    assert!(lcores(&server)
        .iter()
        .all(|id| !lcores(&client).contains(id)));
    assert_eq!(
        server.listeners[0].private_data.as_ref().unwrap().0,
        b"iwarp".to_vec()
    );
}

#[test]
fn baremetal_argv_and_overrides() {
    let c = example("baremetal.toml");
    assert_eq!(
        c.eal_argv(),
        [
            "iwarp",
            "-l",
            "0-2",
            "--main-lcore=0",
            "-m",
            "1024",
            "--file-prefix=iwarp",
            "-a",
            "0000:3b:00.0",
            "-a",
            "0000:3b:00.1",
            "--log-level=lib.eal:notice",
        ]
    );
    // A two-port, two-core appliance: two queue pairs per port (RSS), each lcore polling
    // one queue of each port.
    assert_eq!(c.lcores.len(), 2);
    assert!(c.eal.hugepages);
    for p in &c.ports {
        assert_eq!((p.rx_queues, p.tx_queues), (2, 2), "{}", p.name);
        assert_eq!(p.driver, appconfig::Driver::Pci);
    }
    for l in &c.lcores {
        assert_eq!(l.ports, ["nic0", "nic1"]);
    }
    assert_eq!(c.qp.max_qps, 1024);
    assert!(c.listeners.iter().all(|l| l.private_data.is_none()));
    assert_eq!(
        c.control.ready_timeout.get(),
        std::time::Duration::from_millis(5000)
    );
    assert_eq!(c.tcp.rto_min.get(), std::time::Duration::from_millis(5));
    // Every [limits] key, set away from its default.
    let d = appconfig::Limits::default();
    let l = &c.limits;
    assert_eq!(l.max_connections, 65536);
    assert_eq!(l.syn_backlog, 4096);
    assert_eq!(l.startup_timeout.get(), std::time::Duration::from_secs(10));
    assert_eq!(l.user_timeout.get(), std::time::Duration::from_secs(10));
    assert_eq!(l.linger.get(), std::time::Duration::from_secs(2));
    assert_eq!(
        (l.time_wait, l.control_queue, l.listener_queue),
        (65536, 16384, 1024)
    );
    assert_eq!((l.session_memory_mib, l.serve_memory_mib), (4096, 16384));
    assert_eq!((l.max_sessions, l.pending_sessions_per_peer), (256, 64));
    assert_eq!(l.startup_octets, d.startup_octets);
    assert_eq!(
        c.mpa.first_fpdu_timeout.get(),
        std::time::Duration::from_secs(10)
    );
    let l1 = c.listener_mpa(&c.listeners[1]);
    assert!(l1.markers && !c.mpa.markers);
    assert_eq!((l1.ird, l1.ord, l1.rev), (16, 16, 2));
    assert_eq!(c.listener_mpa(&c.listeners[0]), c.mpa);
    assert_eq!(
        device_names(&c.ports),
        vec![Some("0000:3b:00.0".into()), Some("0000:3b:00.1".into())]
    );
}
