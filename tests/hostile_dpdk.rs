//! Hostile peers against `iwarp serve` on a DPDK af_packet port, from kernel TCP sockets
//! (and raw SYNs) of another host on the same bridge: a SYN flood of 20,000, 10,000
//! connections that stall after the handshake, after half a Request and after the
//! Request, and a Request sent one octet per second. Each time a well-behaved `iwarp
//! bench` client on a third port completes a verified run during the attack, the
//! server's resident set stays under a bound, and the server's connection table is
//! empty at the end.
//!
//! Topology, all in a namespace the test creates and deletes: a bridge with three veth
//! pairs; the server's DPDK port (af_packet on `hs0`, 10.90.0.1), the good client's
//! (af_packet on `hc0`, 10.90.0.2), and the attacker's kernel interface (`ha0`,
//! 10.90.0.3, the only one with a kernel address). The attacker is
//! `tests/data/hostile_peer.py` (Python 3, raw and ordinary sockets); during the SYN flood
//! an `nft` rule in the namespace drops the attacker's RSTs, so its SYNs stay half-open as
//! a flood's do. Needs root, DPDK (`--features dpdk`), python3 and nft; a failure under
//! `CI=true` when any is missing.

#[cfg(not(feature = "dpdk"))]
#[test]
fn built_with_the_dpdk_feature() {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("tests/hostile_dpdk.rs was built without the `dpdk` feature: run it with --features dpdk");
    }
    eprintln!("skipped: built without the `dpdk` feature (cargo test --features dpdk)");
}

#[cfg(feature = "dpdk")]
#[path = "common/procs.rs"]
mod procs;

#[cfg(feature = "dpdk")]
#[path = "common/rss.rs"]
mod rss;

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::time::{Duration, Instant};

    use super::procs::{can_run, Netns, Proc, TempDir};

    const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hostile_peer.py");
    const SERVER: &str = "10.90.0.1";
    const ATTACKER: &str = "10.90.0.3";

    fn port(iface: &str, mac: &str, addr: &str) -> String {
        format!(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"{iface}\"\n\
             framecnt = 4096\nmac = \"{mac}\"\nipv4 = \"{addr}/24\"\n"
        )
    }

    /// The server's limits: the defaults but for timeouts short enough for a test.
    const LIMITS: &str = "[limits]\nsyn_backlog = 256\nstartup_timeout = \"3s\"\n\
                          user_timeout = \"2s\"\nlinger = \"500ms\"\nsession_memory_mib = 2\n";
    const MPA: &str = "[mpa]\nrequest_timeout = \"2s\"\nfirst_fpdu_timeout = \"2s\"\n\
                       rtr_timeout = \"2s\"\n";

    fn vm_rss(pid: u32) -> u64 {
        super::rss::rss_of(Some(pid))
    }

    /// An MPA Request (Rev 2, enhanced, no bench hello) as hex.
    fn request_hex() -> String {
        let f = proto::startup::InitiatorConfig::default()
            .request()
            .unwrap()
            .to_bytes(proto::startup::Dialect::Rfc6581)
            .unwrap();
        f.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Runs the attacker script with `args` (in `ns`) and returns its JSON.
    fn attack(ns: &Netns, args: &[&str]) -> Proc {
        let mut a = vec![SCRIPT];
        a.extend_from_slice(args);
        Proc::spawn_program(Some(ns), "python3", &a)
    }

    fn json_of(out: &str) -> serde_json::Value {
        let line = out
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON from the attacker:\n{out}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        ignore = "busy-polling DPDK processes: run in release (scripts/test.sh does)"
    )]
    fn kernel_sockets_flood_stall_and_trickle_against_serve_on_af_packet() {
        if !can_run() {
            return;
        }
        for (tool, flag, why) in [
            ("python3", "-V", "for the attacker"),
            ("nft", "-v", "to keep the SYN flood's source silent"),
        ] {
            if std::process::Command::new(tool).arg(flag).output().is_err() {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{tool} is needed {why} (scripts/test.sh installs it)");
                }
                eprintln!("skipped: no {tool} ({why})");
                return;
            }
        }
        let ns = Netns::new("hostile");
        ns.bridge_with_veths("hbr", &[("hs0", "hs1"), ("hc0", "hc1"), ("ha0", "ha1")]);
        ns.ip(&["addr", "add", &format!("{ATTACKER}/24"), "dev", "ha0"]);
        // The attacker's kernel would leave its TCP checksums to a veth "device" that never
        // computes them (CHECKSUM_PARTIAL), and af_packet hands the server frames with
        // wrong checksums: make the kernel compute them, as a real NIC's peer would see.
        super::procs::run(
            "ip",
            &["netns", "exec", &ns.0, "ethtool", "-K", "ha0", "tx", "off"],
        );
        let dir = TempDir::new("hostile");
        let write = |name: &str, text: String| {
            let p = dir.0.join(name);
            std::fs::write(&p, text).expect("config");
            p.to_string_lossy().into_owned()
        };
        let server_cfg = write(
            "server.toml",
            format!(
                "{}[[lcores]]\nid = 1\nports = [\"p0\"]\n\n[control]\nlcore = 0\n\
                 metrics = \"127.0.0.1:9464\"\n\n[[listeners]]\ntcp_port = 18515\nport_name = \"p0\"\n\n{LIMITS}{MPA}",
                port("hs0", "02:00:00:cc:00:01", SERVER)
            ),
        );
        let client_cfg = write(
            "client.toml",
            format!(
                "{}[[lcores]]\nid = 0\nports = [\"p0\"]\n\n[control]\nlcore = 1\n",
                port("hc0", "02:00:00:cc:00:02", "10.90.0.2")
            ),
        );
        // Three good sessions: one during the flood, one during the stall, one after.
        let mut srv = Proc::spawn(
            Some(&ns),
            &["serve", "--config", &server_cfg, "--count", "3"],
        );
        srv.expect_line("limits:", Duration::from_secs(20));
        let pid = srv.pid();
        std::thread::sleep(Duration::from_millis(300));
        let rss_start = vm_rss(pid);
        let mut rss_max = rss_start;
        let good = |rss_max: &mut u64| {
            let mut c = Proc::spawn(
                Some(&ns),
                &[
                    "bench",
                    "write-bw",
                    "--config",
                    &client_cfg,
                    "--peer",
                    SERVER,
                    "-s",
                    "4096",
                    "-n",
                    "2000",
                    "--verify",
                    "--json",
                ],
            );
            let start = Instant::now();
            while !c.exited() && start.elapsed() < Duration::from_secs(60) {
                *rss_max = (*rss_max).max(vm_rss(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            let (ok, out) = c.finish(Duration::from_secs(5));
            if !ok {
                return Err(format!("the good client failed during the attack:\n{out}"));
            }
            assert!(
                out.contains("\"verified_octets\": 8192000") && out.contains("\"wrong_octets\": 0"),
                "{out}"
            );
            Ok(())
        };
        // A failed good client, with what the server said.
        let fail = |srv: Proc, why: String| -> ! {
            let (_, server) = srv.finish(Duration::from_millis(500));
            panic!("{why}\n--- server:\n{server}");
        };

        // 1. A SYN flood of 20,000 from the attacker's address, with a good client in the
        // middle of it. A flood's sources do not answer: the attacker's kernel would
        // answer each SYN-ACK with a RST, which frees its half-open slot as fast as the
        // server runs (in one CI run not one SYN met a full backlog), so a firewall rule
        // in the namespace drops the attacker's RSTs while the flood lasts.
        let nft = |script: &str| {
            super::procs::run("ip", &["netns", "exec", &ns.0, "nft", script]);
        };
        nft(&format!(
            "add table ip hostile; \
             add chain ip hostile out {{ type filter hook output priority 0; }}; \
             add rule ip hostile out ip saddr {ATTACKER} tcp flags rst drop"
        ));
        let flood = attack(&ns, &["syn-flood", ATTACKER, SERVER, "18515", "20000"]);
        std::thread::sleep(Duration::from_millis(200));
        if let Err(why) = good(&mut rss_max) {
            fail(srv, why);
        }
        let (ok, out) = flood.finish(Duration::from_secs(60));
        nft("delete table ip hostile");
        assert!(ok, "{out}");
        let f = json_of(&out);
        eprintln!("SYN flood: {f}");
        assert_eq!(f["sent"], 20000);
        // The exporter saw it: scraped during the run, from the server's namespace.
        std::thread::sleep(Duration::from_millis(300));
        let (ok, out) =
            attack(&ns, &["scrape", "127.0.0.1", "9464"]).finish(Duration::from_secs(10));
        assert!(ok, "{out}");
        let m = json_of(&out);
        assert_eq!(m["status"], "HTTP/1.1 200 OK", "{m}");
        let sample = |name: &str| {
            m["samples"][name]
                .as_u64()
                .unwrap_or_else(|| panic!("no {name}: {m}"))
        };
        // With the sources silent, the backlog (256) fills and every later SYN the
        // server's socket saw gets a cookie: the exporter must show them, and every frame.
        let cookies = sample("iwarp_tcp_syn_cookies_sent_total");
        eprintln!("SYN cookies sent: {cookies}");
        assert!(cookies > 10_000, "{m}");
        assert!(sample("iwarp_port_rx_frames_total") > 20000, "{m}");
        assert_eq!(sample("iwarp_sessions_finished_total"), 1, "{m}");
        assert_eq!(sample("iwarp_sessions_failed_total"), 0, "{m}");
        // And a status line on demand.
        super::procs::run("kill", &["-USR1", &pid.to_string()]);
        srv.expect_line("status: ", Duration::from_secs(5));
        // The flood's half-open connections go: with the rule gone, the attacker's kernel
        // answers their retransmitted SYN-ACKs with RSTs (and the SYN-ACK retries end the
        // rest). Only then the stall, whose handshakes should not all ride on cookies.
        let start = Instant::now();
        loop {
            let (ok, out) =
                attack(&ns, &["scrape", "127.0.0.1", "9464"]).finish(Duration::from_secs(10));
            assert!(ok, "{out}");
            let m = json_of(&out);
            let half_open = m["samples"]["iwarp_connections_half_open"]
                .as_u64()
                .unwrap_or_else(|| panic!("no half-open gauge: {m}"));
            if half_open == 0 {
                eprintln!("half-open after the flood: 0 after {:?}", start.elapsed());
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the flood's half-open connections stay: {m}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }

        // 2. 10,000 connections that stall: a third after the handshake, a third after half
        // a Request, a third after the Request. Each must be ended by the server within
        // the startup limits; a good client runs meanwhile.
        let mut stall = attack(
            &ns,
            &["stall", SERVER, "18515", "10000", "12", &request_hex()],
        );
        std::thread::sleep(Duration::from_secs(2));
        if let Err(why) = good(&mut rss_max) {
            fail(srv, why);
        }
        while !stall.exited() {
            rss_max = rss_max.max(vm_rss(pid));
            std::thread::sleep(Duration::from_millis(50));
        }
        let (ok, out) = stall.finish(Duration::from_secs(90));
        assert!(ok, "{out}");
        let s = json_of(&out);
        eprintln!("stalled connections: {s}");
        if s["connected"].as_u64().unwrap() < 9900 || s["ended"] != s["connected"] {
            let (_, server) = srv.finish(Duration::from_millis(500));
            panic!("stalled connections: {s}\n--- server:\n{server}");
        }

        // 3. A Request one octet per second: the Request wait (2 s here) ends it.
        let slow = attack(&ns, &["slow", SERVER, "18515", &request_hex()]);
        let (ok, out) = slow.finish(Duration::from_secs(30));
        assert!(ok, "{out}");
        let w = json_of(&out);
        eprintln!("slow Request: {w}");
        assert!(
            w["sent"].as_u64().unwrap() < w["of"].as_u64().unwrap(),
            "{w}"
        );
        let after = w["ended_after"].as_f64().unwrap();
        assert!((1.5..5.0).contains(&after), "{w}");

        // 4. A client that asks for more than a session may have (2 MiB here) is told why.
        let (ok, out) = Proc::spawn(
            Some(&ns),
            &[
                "bench",
                "write-bw",
                "--config",
                &client_cfg,
                "--peer",
                SERVER,
                "-s",
                "1048576",
                "-t",
                "4",
                "-n",
                "10",
                "--verify",
            ],
        )
        .finish(Duration::from_secs(30));
        assert!(!ok, "{out}");
        assert!(
            out.contains("rejected by the peer: write-bw needs 4.")
                && out.contains("a session may have 2.0 MiB"),
            "{out}"
        );

        // 5. A good client after the attacks; then the server reports an empty table.
        if let Err(why) = good(&mut rss_max) {
            fail(srv, why);
        }
        let (ok, out) = srv.finish(Duration::from_secs(30));
        assert!(ok, "server:\n{out}");
        let core = out
            .lines()
            .find(|l| l.starts_with("core: "))
            .unwrap_or_else(|| panic!("no core line:\n{out}"));
        eprintln!("server {core}");
        assert!(
            core.starts_with("core: 0 connections left (0 half-open"),
            "{core}"
        );
        let num = |key: &str| -> u64 {
            core.split(key)
                .next()
                .and_then(|h| h.rsplit(' ').next())
                .and_then(|n| n.trim_start_matches('(').parse().ok())
                .unwrap_or_else(|| panic!("no {key:?} in {core}"))
        };
        assert!(num(" SYN cookies sent") > 1000, "{core}");
        assert!(num(" accepted,") >= 9900, "{core}");
        let grew = rss_max.saturating_sub(rss_start);
        eprintln!(
            "server resident set: {} MiB after start, {} MiB at most (+{} MiB)",
            rss_start >> 20,
            rss_max >> 20,
            grew >> 20
        );
        assert!(grew < 256 << 20, "the server grew {} MiB", grew >> 20);
        for l in out.lines().filter(|l| l.starts_with("session ")) {
            assert!(l.ends_with("verified 8192000 octets, 0 wrong"), "{l}");
        }
    }
}
