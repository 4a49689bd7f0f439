//! `iwarp::rping` against Linux siw's `rping` in the peer guest (`../shared/peer`).
//!
//! Runs only when `IWARP_SIW_PEER=1` (and as root, with the peer up: `up.sh`); otherwise
//! it says why and passes. The outer test re-runs this binary inside the peer's network
//! namespace (`ip netns exec siwpeer`), where the inner test opens a DPDK `net_af_packet`
//! port on the host side of the guest's tap (`siwtap0`) with an address of its own
//! (10.77.0.3, MAC 02:00:00:77:00:03): the kernel's 10.77.0.1 on that tap is left alone.
//! `scripts/interop-siw.sh` drives it.
//!
//! * `IWARP_SIW_ROLE=client`: we are the rping client; the guest runs
//!   `rping -s -P -a 10.77.0.2` (started by the script or by hand).
//! * `IWARP_SIW_ROLE=server`: we listen on 7174; the script runs `rping -c -a 10.77.0.3
//!   -C N -V -v` in the guest while we serve.
//!
//! `IWARP_SIW_MODE` picks the MPA settings of our side: `crc` (default), `nocrc`,
//! `p2p-write`, `p2p-read`.

#![cfg(feature = "dpdk")]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::Duration;

use control::startup::{RtrType, RtrTypes};
use control::verbs;
use dataplane::lcore::CoreConfig;
use dataplane::net::NetConfig;
use dataplane::port::Port;
use dataplane::tcp;
use dpdk_port::{DpdkPort, Eal, PortConfig};
use iwarp::rping::{self, RpingOptions};

const INNER_ENV: &str = "IWARP_SIW_INNER";
const OUR_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
const GUEST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0x77, 0, 0x03];

fn env(k: &str, d: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| d.to_string())
}

#[test]
fn rping_against_siw() {
    if env("IWARP_SIW_PEER", "0") != "1" {
        eprintln!("skipped: set IWARP_SIW_PEER=1 with the siw peer up (scripts/interop-siw.sh)");
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new("ip")
        .args(["netns", "exec", &env("SIWPEER_NETNS", "siwpeer")])
        .arg(exe)
        .args([
            "--exact",
            "inner_rping_against_siw",
            "--include-ignored",
            "--nocapture",
        ])
        .env(INNER_ENV, "1")
        .status()
        .expect("ip netns exec runs");
    assert!(out.success(), "inner test failed: {out}");
}

#[test]
#[ignore = "run inside the siw peer's namespace by rping_against_siw"]
fn inner_rping_against_siw() {
    if std::env::var(INNER_ENV).is_err() {
        return;
    }
    let tap = env("SIWPEER_TAP", "siwtap0");
    let argv: Vec<String> = [
        "iwarp-interop",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "-l",
        "0",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=notice",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--vdev=net_af_packet0,iface={tap},framecnt=4096")])
    .collect();
    let eal = Eal::init(&argv).unwrap_or_else(|e| panic!("{e}"));
    let mut pc = PortConfig::new("net_af_packet0");
    pc.mac = Some(OUR_MAC);
    let port = DpdkPort::open(&eal, &pc).unwrap_or_else(|e| panic!("{e}"));
    let cfg = CoreConfig {
        net: NetConfig {
            mac: port.mac(),
            addr: OUR_ADDR,
            prefix_len: 24,
            gateway: None,
            mtu: port.mtu(),
        },
        tcp: tcp::Config::default(),
        isn_key: None,
    };
    let (dev, mut core) = verbs::open(cfg, Box::new(port));
    let count: u64 = env("IWARP_SIW_COUNT", "20")
        .parse()
        .expect("IWARP_SIW_COUNT");
    let size: usize = env("IWARP_SIW_SIZE", "64").parse().expect("IWARP_SIW_SIZE");
    let mut o = RpingOptions {
        count,
        size,
        verbose: true,
        validate: true,
        step_timeout: Duration::from_secs(30),
        accept_timeout: Some(Duration::from_secs(60)),
        ..RpingOptions::default()
    };
    match env("IWARP_SIW_MODE", "crc").as_str() {
        "crc" => {}
        "nocrc" => {
            o.initiator.crc = false;
            o.responder.crc = false;
        }
        m @ ("p2p-write" | "p2p-read") => {
            o.initiator.peer_to_peer = true;
            o.initiator.rtr_types = RtrTypes::NONE.with(if m == "p2p-write" {
                RtrType::Write
            } else {
                RtrType::Read
            });
        }
        m => panic!("unknown IWARP_SIW_MODE {m}"),
    }
    let mut stdout = std::io::stdout();
    let port_no: u16 = env("IWARP_SIW_PORT", "7174")
        .parse()
        .expect("IWARP_SIW_PORT");
    let r = match env("IWARP_SIW_ROLE", "client").as_str() {
        "client" => rping::run_client(
            &dev,
            &mut core,
            SocketAddrV4::new(GUEST, port_no),
            &o,
            &mut stdout,
        ),
        "server" => rping::run_server(&dev, &mut core, port_no, &o, &mut stdout),
        r => panic!("unknown IWARP_SIW_ROLE {r}"),
    };
    let stats = r.unwrap_or_else(|e| panic!("rping against siw: {e}"));
    eprintln!("rping against siw: {stats:?}");
    assert_eq!(stats.pings, count);
    dev.shutdown();
}
