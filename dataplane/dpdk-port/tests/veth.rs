//! End-to-end test of `DpdkPort` over the `net_af_packet` PMD on veth pairs.
//!
//! EAL can be initialised once per process and `net_af_packet` binds interfaces of the
//! process's own network namespace, so the outer test ([`veth_pair_traffic`]) creates a
//! private namespace with two veth pairs and re-runs this test binary inside it
//! (`ip netns exec`), running only the `#[ignore]`d [`inner_veth_traffic`]. The namespace
//! (and with it the veth pairs) is deleted afterwards, also on failure. Nothing leaves
//! the namespace. Needs root; skipped otherwise (a failure under `CI=true`).

use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::port::Port;
use dpdk_port::{DpdkError, DpdkPort, Eal, PortConfig};

/// Set in the environment of the re-executed inner test.
const INNER_ENV: &str = "IWARP_DPDK_PORT_INNER";
/// IEEE 802 local experimental ethertype: no host stack consumes it.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
/// MAC override of the first port of each pair.
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0xaa, 0x01];
/// Interfaces: (A, B) at MTU 1500; (C, D) at MTU 9000 (refused by DPDK 22.11 af_packet), then 1500.
const IFACES: [&str; 4] = ["dpktA", "dpktB", "dpktC", "dpktD"];

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the namespace (and the veth pairs in it) when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.0]) {
            eprintln!("cleanup: {e}");
        }
    }
}

#[test]
fn veth_pair_traffic() {
    let why = if !running_as_root() {
        Some("not root (the DPDK af_packet/veth test needs root)")
    } else if Command::new("ip").arg("-V").output().is_err() {
        Some("the `ip` command (iproute2) is not installed")
    } else {
        None
    };
    if let Some(why) = why {
        // Under CI a skip would hide that the test never ran.
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the DPDK af_packet/veth test cannot run under CI: {why}");
        }
        eprintln!("skipped: {why}");
        return;
    }
    let name = format!("iwarp-dpdk-test-{}", std::process::id());
    ip(&["netns", "add", &name]).unwrap_or_else(|e| panic!("{e}"));
    let ns = Netns(name);
    for pair in IFACES.chunks(2) {
        ip(&[
            "-n", &ns.0, "link", "add", pair[0], "type", "veth", "peer", "name", pair[1],
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }
    for i in IFACES {
        ip(&["-n", &ns.0, "link", "set", i, "up"]).unwrap_or_else(|e| panic!("{e}"));
    }
    // Keep the kernel quiet on the links (no IPv6 DAD/RS); the test filters by
    // ethertype anyway, so a failure here does not matter.
    for key in ["all", "default"] {
        let _ = Command::new("ip")
            .args(["netns", "exec", &ns.0, "sysctl", "-qw"])
            .arg(format!("net.ipv6.conf.{key}.disable_ipv6=1"))
            .output();
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&exe)
        .args([
            "--exact",
            "inner_veth_traffic",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INNER_ENV, "1")
        .output()
        .expect("run the inner test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- inner test stdout ---\n{stdout}\n--- inner test stderr ---\n{stderr}");
    assert!(out.status.success(), "inner test failed: {}", out.status);
    assert!(
        stdout.contains("1 passed"),
        "the inner test did not run: {stdout}"
    );
}

/// The frame with sequence number `seq`: to `dst` from `src`, `len` octets.
fn fill_frame(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], seq: u32) {
    buf[..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    buf[12..14].copy_from_slice(&ETHERTYPE);
    buf[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[18..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
}

fn frame_len(seq: u32, max_frame: usize) -> usize {
    const MIN: usize = 60;
    match seq % 10 {
        0 => max_frame,
        1 => MIN,
        _ => MIN + (seq as usize * 7919) % (max_frame - MIN + 1),
    }
}

/// Sends `count` frames from `tx` to `rx`, in bursts, and checks that `rx` receives
/// each of them, intact and in order. Returns the octets sent.
fn transfer(tx: &mut DpdkPort, rx: &mut DpdkPort, count: u32) -> u64 {
    let dst = rx.mac().0;
    let src = tx.mac().0;
    let max_frame = tx.mtu() + 14;
    let mut sent = 0u32;
    let mut received = 0u32;
    let mut octets = 0u64;
    let mut expected = vec![0u8; max_frame];
    while received < count {
        while sent < count && tx.tx_room() > 0 && sent - received < 64 {
            let len = frame_len(sent, max_frame);
            let seq = sent;
            let mut called = false;
            assert!(tx.tx(len, &mut |buf| {
                called = true;
                assert_eq!(buf.len(), len);
                assert!(buf.iter().all(|&b| b == 0), "tx buffer is zeroed");
                fill_frame(buf, dst, src, seq);
            }));
            assert!(called);
            octets += len as u64;
            sent += 1;
        }
        tx.flush();
        assert_eq!(tx.tx_pending(), 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while received < sent {
            rx.rx_burst(32, &mut |frame| {
                if frame.len() < 18 || frame[12..14] != ETHERTYPE || frame[6..12] != src {
                    return; // not ours (kernel chatter)
                }
                let seq = u32::from_be_bytes(frame[14..18].try_into().unwrap());
                assert_eq!(seq, received, "frames arrive in order, none lost");
                let len = frame_len(seq, max_frame);
                assert_eq!(frame.len(), len, "frame {seq} length");
                fill_frame(&mut expected[..len], dst, src, seq);
                assert!(frame == &expected[..len], "frame {seq} octets");
                received += 1;
            });
            assert!(
                Instant::now() < deadline,
                "timed out: {received} of {sent} frames received ({:?})",
                rx.stats()
            );
        }
    }
    octets
}

/// Sends `count` frames from `tx` to `rx` with [`Port::tx_zero_copy`]: a 54-octet header
/// written by the port's `fill`, then a payload the mbuf chain refers to in a shared
/// record (never copied by us). Checks every frame arrives intact and in order, and that
/// the PMD released every record reference once it had sent the frames (DPDK called the
/// external buffer's free callback). Returns the octets sent.
fn transfer_zero_copy(tx: &mut DpdkPort, rx: &mut DpdkPort, count: u32) -> u64 {
    const HEADER: usize = 54;
    let dst = rx.mac().0;
    let src = tx.mac().0;
    let max_payload = tx.mtu() + 14 - HEADER;
    assert!(
        tx.tx_zero_copy_capable(),
        "{} offers no zero-copy",
        tx.driver_name()
    );
    let before = tx.stats();
    // Records of several FPDU-like payloads each; a frame carries one, from its middle.
    let records: Vec<proto::tcp::SharedRecord> = (0..8u32)
        .map(|r| {
            std::sync::Arc::new(
                (0..3 * max_payload as u32)
                    .map(|i| (r * 131 + i * 7) as u8)
                    .collect(),
            )
        })
        .collect();
    let layout = |seq: u32| {
        let len = (2 * (64 + (seq as usize * 7919) % (max_payload / 2 - 64))).min(max_payload);
        let offset = (seq as usize * 104_729) % (2 * max_payload);
        (seq as usize % records.len(), offset, len)
    };
    let (mut sent, mut received, mut octets) = (0u32, 0u32, 0u64);
    while received < count {
        while sent < count && tx.tx_room() > 0 && sent - received < 64 {
            let (r, offset, len) = layout(sent);
            let payload = dataplane::port::TxPayload {
                record: &records[r],
                offset,
                len,
            };
            let seq = sent;
            assert!(tx.tx_zero_copy(HEADER, payload, false, &mut |buf| {
                assert_eq!(buf.len(), HEADER);
                fill_frame(buf, dst, src, seq);
            }));
            octets += (HEADER + len) as u64;
            sent += 1;
        }
        tx.flush();
        for r in &records {
            assert_eq!(
                std::sync::Arc::strong_count(r),
                1,
                "af_packet sent the frames: every mbuf reference is released"
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while received < sent {
            rx.rx_burst(32, &mut |frame| {
                if frame.len() < HEADER || frame[12..14] != ETHERTYPE || frame[6..12] != src {
                    return;
                }
                let seq = u32::from_be_bytes(frame[14..18].try_into().unwrap());
                assert_eq!(seq, received, "frames arrive in order, none lost");
                let (r, offset, len) = layout(seq);
                let mut header = [0u8; HEADER];
                fill_frame(&mut header, dst, src, seq);
                assert_eq!(frame.len(), HEADER + len, "frame {seq} length");
                assert!(frame[..HEADER] == header, "frame {seq} header");
                assert!(
                    frame[HEADER..] == records[r][offset..offset + len],
                    "frame {seq} payload"
                );
                received += 1;
            });
            assert!(
                Instant::now() < deadline,
                "timed out: {received} of {sent} zero-copy frames received ({:?})",
                rx.stats()
            );
        }
    }
    let after = tx.stats();
    assert_eq!(after.tx_zero_copy - before.tx_zero_copy, u64::from(count));
    assert_eq!(after.tx_frames - before.tx_frames, u64::from(count));
    octets
}

fn run_pair(eal: &Eal, devs: [&str; 2], mtu: usize, count: u32) -> Result<(), DpdkError> {
    let mut ca = PortConfig::new(devs[0]);
    ca.mtu = mtu;
    ca.rx_ring = 512;
    ca.tx_ring = 512;
    ca.mempool_size = PortConfig::default_mempool_size(512, 512);
    ca.mac = Some(MAC_A);
    let mut cb = ca.clone();
    cb.device = devs[1].to_string();
    cb.mac = None;
    // A transmits with zero-copy when asked (below); B copies, the default.
    ca.tx_zero_copy = true;
    let mut a = DpdkPort::open(eal, &ca)?;
    // af_packet offers no TSO: asking for it is refused with the reason, and the device
    // can be opened without it after that.
    let e = DpdkPort::open(
        eal,
        &PortConfig {
            tso: true,
            ..cb.clone()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("tso needs TCP segmentation offload")
            && e.contains("does not offer TSO with multi-segment frames"),
        "{e}"
    );
    let mut b = DpdkPort::open(eal, &cb)?;
    eprintln!("opened {a:?}\nopened {b:?}");
    assert!(a.driver_name().contains("af_packet"), "{}", a.driver_name());
    assert_eq!(a.mac().0, MAC_A, "MAC override");
    assert_ne!(b.mac().0, MAC_A);
    assert_eq!((a.mtu(), b.mtu()), (mtu, mtu));
    assert!(a.tx_zero_copy_capable() && !b.tx_zero_copy_capable());

    // Opening an open device again is refused.
    let e = DpdkPort::open(eal, &ca).unwrap_err();
    assert_eq!(e.code, 16, "{e}");

    // Oversize and empty frames are refused without calling fill.
    let room = a.tx_room();
    assert!(room > 0);
    assert!(!a.tx(mtu + 15, &mut |_| panic!(
        "fill called for an oversize frame"
    )));
    assert!(!a.tx(0, &mut |_| panic!("fill called for an empty frame")));
    assert_eq!(a.tx_room(), room);
    assert_eq!(a.stats().tx_dropped, 2);

    let octets = transfer(&mut a, &mut b, count);
    let back = transfer(&mut b, &mut a, count / 10);

    let (sa, sb) = (a.stats(), b.stats());
    let (da, db) = (a.device_stats()?, b.device_stats()?);
    eprintln!("MTU {mtu}: a {sa:?} {da:?}\nMTU {mtu}: b {sb:?} {db:?}");
    assert_eq!(sa.tx_frames, u64::from(count));
    assert_eq!(sa.tx_octets, octets);
    assert_eq!(sa.tx_dropped, 2);
    assert!(sb.rx_frames >= u64::from(count));
    assert!(sb.rx_octets >= octets);
    assert_eq!(sb.tx_frames, u64::from(count / 10));
    assert_eq!(sb.tx_octets, back);
    assert_eq!(sb.rx_dropped, 0);
    assert!(da.opackets >= u64::from(count) && da.obytes >= octets);
    assert!(db.ipackets >= u64::from(count) && db.ibytes >= octets);
    assert_eq!(a.rx_linearized() + b.rx_linearized(), 0);

    // Zero-copy transmit: more frames (two mbufs each) than the mempool holds, so a
    // leaked mbuf or record would show.
    let zc = 3 * PortConfig::default_mempool_size(512, 512);
    let zc_octets = transfer_zero_copy(&mut a, &mut b, zc);
    let sb2 = b.stats();
    assert!(sb2.rx_octets - sb.rx_octets >= zc_octets);
    assert_eq!(sb2.rx_dropped, 0);
    // Refused without calling fill: odd payload, a header too short for TCP/IPv4.
    let rec: proto::tcp::SharedRecord = std::sync::Arc::new(vec![0; 1000]);
    let p = |len| dataplane::port::TxPayload {
        record: &rec,
        offset: 0,
        len,
    };
    assert!(!a.tx_zero_copy(54, p(999), false, &mut |_| panic!("fill called")));
    assert!(!a.tx_zero_copy(40, p(1000), false, &mut |_| panic!("fill called")));
    assert!(!a.tx_zero_copy(54, p(1000), true, &mut |_| panic!("fill called")));
    assert_eq!(std::sync::Arc::strong_count(&rec), 1);
    // A port without TSO refuses TSO frames without calling fill.
    let dropped = a.stats().tx_dropped;
    assert_eq!(a.tso_max_payload(), 0);
    assert!(!a.tx_tso_begin(66));
    assert!(!a.tx_tso_append(&[0; 100]));
    assert!(!a.tx_tso_finish(Some(1000), &mut |_| panic!("fill called")));
    assert_eq!(a.stats().tx_dropped, dropped + 3);
    Ok(())
}

#[test]
#[ignore = "run by veth_pair_traffic inside its network namespace"]
fn inner_veth_traffic() {
    if std::env::var_os(INNER_ENV).is_none() {
        eprintln!("skipped: run through veth_pair_traffic (needs its namespace)");
        return;
    }
    let prefix = format!("--file-prefix=dpdk-port-test-{}", std::process::id());
    let mut argv: Vec<String> = [
        "dpdk-port-test",
        "--no-huge",
        "-m",
        "512",
        "--no-pci",
        "-l",
        "0",
        "--no-shconf",
        &prefix,
        "--no-telemetry",
        "--log-level=notice",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Default af_packet ring geometry (2048-octet frames): a larger `framesz` makes the
    // PMD demand mbufs of that size, and it refuses jumbo MTUs anyway (below).
    for (i, iface) in IFACES.iter().enumerate() {
        argv.push(format!("--vdev=net_af_packet{i},iface={iface}"));
    }
    eprintln!("EAL args: {}", argv[1..].join(" "));
    let eal = Eal::init(&argv).unwrap_or_else(|e| panic!("{e}"));
    assert!(Eal::initialised());
    assert_eq!(eal.port_count(), 4);

    // Once per process.
    let again = Eal::init(&argv).unwrap_err();
    assert_eq!(again.code, 114, "{again}");
    assert!(again.to_string().starts_with("rte_eal_init: "), "{again}");

    // Region memory from DPDK's heap: zeroed, page-aligned, counted by the heap while it
    // lives, given back when dropped; more than the heap holds is a clear error.
    let before = eal.heap_allocated();
    let m = eal.region_memory(3 << 20).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.len(), 3 << 20);
    assert_eq!(m.as_ptr() as usize % 4096, 0);
    assert!(eal.heap_allocated() >= before + (3 << 20));
    let mut back = vec![1u8; 3 << 20];
    m.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    m.write((3 << 20) - 5, b"tail!").unwrap();
    m.read((3 << 20) - 5, &mut back[..5]).unwrap();
    assert_eq!(&back[..5], b"tail!");
    drop(m);
    assert!(eal.heap_allocated() < before + (3 << 20));
    let e = eal.region_memory(1 << 40).unwrap_err();
    assert!(e.to_string().contains("no room"), "{e}");

    // Unknown device.
    let e = DpdkPort::open(&eal, &PortConfig::new("net_nosuch0")).unwrap_err();
    assert_eq!(e.code, 19, "{e}");
    eprintln!("expected error: {e}");

    run_pair(&eal, ["net_af_packet0", "net_af_packet1"], 1500, 1000)
        .unwrap_or_else(|e| panic!("MTU 1500: {e}"));
    // DPDK 22.11's af_packet PMD reports a 1518-octet max frame (`max_rx_pktlen =
    // RTE_ETHER_MAX_LEN` in rte_eth_af_packet.c), so ethdev refuses jumbo MTUs on it
    // whatever the ring geometry, as it does on net_tap and net_memif: no PMD CI can run
    // moves a jumbo frame, and jumbo MTUs are tested over the in-memory wire
    // (control/tests/e2e_faults.rs `lossless_markers_jumbo`). What is tested here is
    // that the port refuses clearly and stays usable; should a DPDK ever take MTU 9000 on
    // af_packet, this fails so that the case becomes a traffic test.
    match run_pair(&eal, ["net_af_packet2", "net_af_packet3"], 9000, 1000) {
        Ok(()) => panic!("af_packet took MTU 9000: DPDK changed; make this a jumbo traffic test"),
        Err(e) => {
            assert_eq!(e.call, "DpdkPort::open", "{e}");
            assert!(e.message.contains("takes at most"), "{e}");
            eprintln!("MTU 9000 refused as expected: {e}");
        }
    }
    // The refusal left the device usable: it opens at MTU 1500.
    run_pair(&eal, ["net_af_packet2", "net_af_packet3"], 1500, 200)
        .unwrap_or_else(|e| panic!("MTU 1500 after the refusal: {e}"));
    drop(eal);
}
