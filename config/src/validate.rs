//! Semantic checks after parsing: each problem is a field path and a message. The caller
//! turns paths into file positions.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::schema::{
    Config, Control, Driver, Eal, Limits, Listener, Mpa, Port, Qp, Tcp, ENHANCED_DATA_LEN,
    MAX_IRD_ORD, MAX_PRIVATE_DATA,
};
use crate::value::Millis;

/// Largest lcore id accepted (DPDK's RTE_MAX_LCORE is at most 1024).
const MAX_LCORE: u32 = 1023;

struct Problems(Vec<(String, String)>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push((path.into(), message.into()));
    }
}

/// Every problem found in `c`, as (field path, message).
pub(crate) fn validate(c: &Config) -> Vec<(String, String)> {
    let mut p = Problems(Vec::new());
    eal(&c.eal, c, &mut p);
    ports(&c.ports, &mut p);
    lcores(c, &mut p);
    control(&c.control, &mut p);
    for (field, message, _) in mpa_checks(&c.mpa) {
        p.add(format!("mpa.{field}"), message);
    }
    for (field, t) in [
        ("reply_timeout", c.mpa.reply_timeout),
        ("request_timeout", c.mpa.request_timeout),
        ("rtr_timeout", c.mpa.rtr_timeout),
        ("first_fpdu_timeout", c.mpa.first_fpdu_timeout),
    ] {
        timeout(&format!("mpa.{field}"), t, &mut p);
    }
    if c.mpa.first_fpdu_delay.0 > Duration::from_secs(10) {
        p.add(
            "mpa.first_fpdu_delay",
            format!("{} is out of range: 0ms..=10s", c.mpa.first_fpdu_delay),
        );
    }
    tcp(&c.tcp, &mut p);
    qp(&c.qp, &mut p);
    limits(&c.limits, &mut p);
    listeners(c, &mut p);
    bench(c, &mut p);
    p.0
}

fn limits(l: &Limits, p: &mut Problems) {
    range("limits.max_connections", l.max_connections, 1, 1 << 20, p);
    range("limits.syn_backlog", l.syn_backlog, 1, 1 << 20, p);
    let span =
        |path: &str, t: Millis, lo: Duration, hi: Duration, shown: &str, p: &mut Problems| {
            if t.0 < lo || t.0 > hi {
                p.add(path, format!("{t} is out of range: {shown}"));
            }
        };
    span(
        "limits.startup_timeout",
        l.startup_timeout,
        Duration::from_millis(10),
        Duration::from_secs(600),
        "10ms..=10m",
        p,
    );
    range("limits.startup_octets", l.startup_octets, 532, 16 << 20, p);
    span(
        "limits.user_timeout",
        l.user_timeout,
        Duration::from_millis(10),
        Duration::from_secs(3600),
        "10ms..=1h",
        p,
    );
    span(
        "limits.linger",
        l.linger,
        Duration::from_millis(1),
        Duration::from_secs(600),
        "1ms..=10m",
        p,
    );
    range("limits.time_wait", l.time_wait, 0, 1 << 22, p);
    range("limits.control_queue", l.control_queue, 16, 1 << 20, p);
    range("limits.listener_queue", l.listener_queue, 1, 1 << 16, p);
    range(
        "limits.session_memory_mib",
        l.session_memory_mib,
        1,
        1 << 20,
        p,
    );
    range("limits.serve_memory_mib", l.serve_memory_mib, 1, 1 << 20, p);
    range("limits.max_sessions", l.max_sessions, 1, 4096, p);
    range(
        "limits.pending_sessions_per_peer",
        l.pending_sessions_per_peer,
        1,
        4096,
        p,
    );
    if l.session_memory_mib > l.serve_memory_mib {
        p.add(
            "limits.session_memory_mib",
            format!(
                "{} MiB is more than serve_memory_mib ({} MiB): one session could never get it",
                l.session_memory_mib, l.serve_memory_mib
            ),
        );
    }
}

fn timeout(path: &str, t: Millis, p: &mut Problems) {
    if t.0 < Duration::from_millis(1) || t.0 > Duration::from_secs(600) {
        p.add(path, format!("{t} is out of range: 1ms..=10m"));
    }
}

fn range<T: PartialOrd + std::fmt::Display>(path: &str, v: T, lo: T, hi: T, p: &mut Problems) {
    if v < lo || v > hi {
        p.add(path, format!("{v} is out of range: {lo}..={hi}"));
    }
}

/// Parses an EAL core list: `0-3,8,10-11`.
pub(crate) fn parse_core_list(s: &str) -> Result<Vec<u32>, String> {
    let bad = || format!("invalid core list {s:?}: expected ids and ranges such as \"0-2,4\"");
    let mut ids = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |x: &str| {
            if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            x.parse::<u32>().map_err(|_| bad())
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi || hi > MAX_LCORE {
            return Err(bad());
        }
        ids.extend(lo..=hi);
    }
    Ok(ids)
}

fn eal(e: &Eal, c: &Config, p: &mut Problems) {
    range("eal.memory_mb", e.memory_mb, 1, 1 << 20, p);
    if let Some(list) = &e.lcores {
        match parse_core_list(list) {
            Err(m) => p.add("eal.lcores", m),
            Ok(ids) => {
                let wanted = c.lcores.iter().map(|l| l.id).chain(c.control.lcore);
                for id in wanted {
                    if !ids.contains(&id) {
                        p.add(
                            "eal.lcores",
                            format!("lcore {id} is used but not in the core list {list:?}"),
                        );
                    }
                }
            }
        }
    }
    if let Some(prefix) = &e.file_prefix {
        if prefix.is_empty()
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        {
            p.add(
                "eal.file_prefix",
                format!("invalid file prefix {prefix:?}: use 1 or more of A-Z a-z 0-9 _ - ."),
            );
        }
    }
    for (i, arg) in e.args.iter().enumerate() {
        let path = format!("eal.args[{i}]");
        if arg.is_empty() {
            p.add(path, "empty EAL argument");
        } else if arg == "--in-memory" && !e.hugepages {
            p.add(
                path,
                "--in-memory cannot go with --no-huge (set hugepages = true, or drop it: \
                 --no-shconf is already used)",
            );
        } else if arg == "--no-huge" && e.hugepages {
            p.add(path, "--no-huge contradicts hugepages = true");
        }
    }
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `s` can go into a DPDK devargs string (`key=value,key=value`).
fn devarg_ok(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|ch| ch == ',' || ch == '=' || ch.is_whitespace() || ch.is_control())
}

fn pci_ok(s: &str) -> bool {
    let hex = |x: &str, n: usize| x.len() == n && x.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let (bus, devfn) = match parts.as_slice() {
        [dom, bus, devfn] if hex(dom, 4) => (*bus, *devfn),
        [bus, devfn] => (*bus, *devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    hex(bus, 2) && hex(dev, 2) && func.len() == 1 && matches!(func.as_bytes()[0], b'0'..=b'7')
}

fn ports(ports: &[Port], p: &mut Problems) {
    if ports.is_empty() {
        p.add("ports", "at least one [[ports]] is needed");
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut addrs: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut macs: HashMap<[u8; 6], usize> = HashMap::new();
    let mut pcis: HashMap<String, usize> = HashMap::new();
    let mut memifs: HashMap<(String, u32, bool), usize> = HashMap::new();
    for (i, port) in ports.iter().enumerate() {
        let at = |f: &str| format!("ports[{i}].{f}");
        if !name_ok(&port.name) {
            p.add(
                at("name"),
                format!(
                    "invalid port name {:?}: use 1 to 32 of A-Z a-z 0-9 _ -",
                    port.name
                ),
            );
        } else if let Some(j) = names.insert(&port.name, i) {
            p.add(
                at("name"),
                format!("duplicate port name {:?} (also ports[{j}])", port.name),
            );
        }

        // Driver arguments: required ones present, others absent.
        let d = port.driver;
        let args: [(&str, bool, bool); 7] = [
            (
                "iface",
                port.iface.is_some(),
                matches!(d, Driver::AfPacket | Driver::Tap),
            ),
            ("framecnt", port.framecnt.is_some(), d == Driver::AfPacket),
            ("socket", port.socket.is_some(), d == Driver::Memif),
            ("role", port.role.is_some(), d == Driver::Memif),
            ("id", port.id.is_some(), d == Driver::Memif),
            ("pci_addr", port.pci_addr.is_some(), d == Driver::Pci),
            ("peer", port.peer.is_some(), d == Driver::Mem),
        ];
        for (field, present, allowed) in args {
            let required = allowed && !matches!(field, "framecnt" | "id");
            if present && !allowed {
                p.add(
                    at(field),
                    format!("`{field}` is not used by driver \"{}\"", d.as_str()),
                );
            } else if !present && required {
                p.add(
                    at(field),
                    format!("driver \"{}\" needs `{field}`", d.as_str()),
                );
            }
        }
        if let Some(iface) = &port.iface {
            if !devarg_ok(iface) || iface.len() > 15 || iface.contains('/') {
                p.add(
                    at("iface"),
                    format!("invalid interface name {iface:?}: 1 to 15 characters, no '/', ',', '=' or spaces"),
                );
            }
        }
        if let Some(n) = port.framecnt {
            range(&at("framecnt"), n, 1, 1 << 20, p);
        }
        if let Some(socket) = &port.socket {
            if !socket.starts_with('/') || !devarg_ok(socket) || socket.len() > 107 {
                p.add(
                    at("socket"),
                    format!("invalid socket path {socket:?}: an absolute path of at most 107 characters, no ',', '=' or spaces"),
                );
            } else if let Some(role) = port.role {
                let key = (
                    socket.clone(),
                    port.id.unwrap_or(0),
                    role == crate::MemifRole::Server,
                );
                if let Some(j) = memifs.insert(key, i) {
                    p.add(
                        at("socket"),
                        format!(
                            "ports[{j}] already is the memif {} with this socket and id",
                            role.as_str()
                        ),
                    );
                }
            }
        }
        if port.tso {
            if !port.checksum_offload {
                p.add(
                    at("tso"),
                    "tso needs checksum_offload = true (a device that segments fills the checksums)",
                );
            }
            if matches!(d, Driver::AfPacket | Driver::Memif | Driver::Mem) {
                p.add(
                    at("tso"),
                    format!(
                        "driver \"{}\" does not offer TCP segmentation offload (tap and PCI NICs may)",
                        d.as_str()
                    ),
                );
            }
        }
        if let Some(addr) = &port.pci_addr {
            if !pci_ok(addr) {
                p.add(
                    at("pci_addr"),
                    format!(
                        "invalid PCI address {addr:?}: expected \"0000:01:00.0\" or \"01:00.0\""
                    ),
                );
            } else if let Some(j) = pcis.insert(crate::eal::normalize_pci(addr), i) {
                p.add(
                    at("pci_addr"),
                    format!("PCI device {addr} is already ports[{j}]"),
                );
            }
        }
        if let Some(peer) = &port.peer {
            match ports.iter().position(|q| &q.name == peer) {
                None => p.add(at("peer"), format!("no port named {peer:?}")),
                Some(j) if j == i => p.add(at("peer"), "a mem port cannot be its own peer"),
                Some(j) if ports[j].driver != Driver::Mem => p.add(
                    at("peer"),
                    format!(
                        "port {peer:?} is driver \"{}\", not \"mem\"",
                        ports[j].driver.as_str()
                    ),
                ),
                Some(j) if ports[j].peer.as_deref() != Some(&port.name) => p.add(
                    at("peer"),
                    format!(
                        "port {peer:?} must name {:?} as its peer in turn",
                        port.name
                    ),
                ),
                Some(_) => {}
            }
        }

        if let Some(mac) = port.mac {
            if mac.is_multicast() || mac.0 == [0; 6] {
                p.add(at("mac"), format!("{mac} is not a unicast address"));
            } else if let Some(j) = macs.insert(mac.0, i) {
                p.add(at("mac"), format!("{mac} is also the MAC of ports[{j}]"));
            }
        }

        let net = port.ipv4;
        let a = net.addr;
        if a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast() {
            p.add(
                at("ipv4"),
                format!(
                    "{a} cannot be a port address (unspecified, loopback, multicast or broadcast)"
                ),
            );
        } else if net.len <= 30 && (a == net.network() || a == net.broadcast()) {
            p.add(
                at("ipv4"),
                format!(
                    "{a} is the {} address of {}/{}, not a host address",
                    if a == net.network() {
                        "network"
                    } else {
                        "broadcast"
                    },
                    net.network(),
                    net.len
                ),
            );
        } else if let Some(j) = addrs.insert(a, i) {
            p.add(at("ipv4"), format!("{a} is also the address of ports[{j}]"));
        }
        if let Some(gw) = port.gateway {
            if !net.contains(gw) {
                p.add(
                    at("gateway"),
                    format!(
                        "gateway {gw} is outside the port's prefix {}/{}",
                        net.network(),
                        net.len
                    ),
                );
            } else if gw == a {
                p.add(
                    at("gateway"),
                    format!("gateway {gw} is the port's own address"),
                );
            } else if net.len <= 30 && (gw == net.network() || gw == net.broadcast()) {
                p.add(
                    at("gateway"),
                    format!(
                        "gateway {gw} is not a host address of {}/{}",
                        net.network(),
                        net.len
                    ),
                );
            }
        }
        range(&at("mtu"), port.mtu, 576, 9000, p);
        range(&at("rx_queues"), port.rx_queues, 1, 64, p);
        range(&at("tx_queues"), port.tx_queues, 1, 64, p);
        for (field, n) in [("rx_ring", port.rx_ring), ("tx_ring", port.tx_ring)] {
            if !n.is_power_of_two() || !(64..=16384).contains(&n) {
                p.add(
                    at(field),
                    format!("{n} descriptors: must be a power of two in 64..=16384"),
                );
            }
        }
    }
}

fn lcores(c: &Config, p: &mut Problems) {
    for (i, port) in c.ports.iter().enumerate() {
        if port.driver == Driver::Pci && !c.eal.hugepages {
            p.add(
                format!("ports[{i}].driver"),
                "a pci port needs hugepages: its NIC reads and writes the mbufs by DMA, \
                 which needs pinned, IOVA-contiguous memory (set [eal] hugepages = true)",
            );
        }
    }
    let mut ids: HashMap<u32, usize> = HashMap::new();
    // Per port: the lcores that poll it, in file order (queue pair i: the i-th).
    let mut polled: HashMap<&str, Vec<(usize, u32)>> = HashMap::new();
    for (i, lcore) in c.lcores.iter().enumerate() {
        let id = lcore.id;
        if id > MAX_LCORE {
            p.add(
                format!("lcores[{i}].id"),
                format!("{id} is out of range: 0..={MAX_LCORE}"),
            );
        } else if let Some(j) = ids.insert(id, i) {
            p.add(
                format!("lcores[{i}].id"),
                format!("duplicate lcore id {id} (also lcores[{j}])"),
            );
        } else if c.control.lcore == Some(id) {
            p.add(
                format!("lcores[{i}].id"),
                format!("lcore {id} is the [control] lcore; a dataplane lcore needs its own"),
            );
        }
        if lcore.ports.is_empty() {
            p.add(
                format!("lcores[{i}].ports"),
                "an lcore must poll at least one port",
            );
        }
        for (k, name) in lcore.ports.iter().enumerate() {
            let path = format!("lcores[{i}].ports[{k}]");
            if c.port(name).is_none() {
                p.add(path, format!("no port named {name:?}"));
                continue;
            }
            let list = polled.entry(name).or_default();
            if list.iter().any(|&(j, _)| j == i) {
                p.add(path, format!("port {name:?} is listed twice by this lcore"));
            } else {
                list.push((i, id));
            }
        }
    }
    for (i, port) in c.ports.iter().enumerate() {
        let n = polled.get(port.name.as_str()).map_or(0, Vec::len);
        if n == 0 {
            p.add(
                format!("ports[{i}].name"),
                format!(
                    "port {:?} is polled by no lcore: list it in the `ports` of one [[lcores]]",
                    port.name
                ),
            );
            continue;
        }
        if port.rx_queues != port.tx_queues {
            p.add(
                format!("ports[{i}].tx_queues"),
                format!(
                    "each core owns one receive and one transmit queue: tx_queues ({}) must \
                     equal rx_queues ({})",
                    port.tx_queues, port.rx_queues
                ),
            );
        } else if n != usize::from(port.rx_queues) {
            let whom: Vec<String> = polled[port.name.as_str()]
                .iter()
                .map(|(j, id)| format!("lcore {id} (lcores[{j}])"))
                .collect();
            p.add(
                format!("ports[{i}].rx_queues"),
                format!(
                    "port {:?} has {} queue pair(s) but is polled by {n} lcore(s) ({}): each \
                     queue pair needs exactly one lcore (queue i: the i-th lcore listing the \
                     port)",
                    port.name,
                    port.rx_queues,
                    whom.join(", ")
                ),
            );
        }
    }
}

fn control(ctl: &Control, p: &mut Problems) {
    if ctl.lcore.is_some() && ctl.cpu.is_some() {
        p.add("control.cpu", "give at most one of `lcore` and `cpu`");
    }
    if let Some(l) = ctl.lcore {
        range("control.lcore", l, 0, MAX_LCORE, p);
    }
    timeout("control.link_timeout", ctl.link_timeout, p);
    timeout("control.ready_timeout", ctl.ready_timeout, p);
}

/// The checks of one MPA policy: (field path under the policy, message, fields involved).
pub(crate) fn mpa_checks(m: &Mpa) -> Vec<(String, String, &'static [&'static str])> {
    let mut out: Vec<(String, String, &'static [&'static str])> = Vec::new();
    if !matches!(m.rev, 1 | 2) {
        out.push((
            "rev".into(),
            format!("MPA revision {} is not 1 or 2", m.rev),
            &["rev"],
        ));
    }
    if m.peer_to_peer && m.rev == 1 {
        out.push((
            "peer_to_peer".into(),
            "peer_to_peer (RFC 6581) needs rev = 2".into(),
            &["peer_to_peer", "rev"],
        ));
    }
    for (field, v, name) in [("ird", m.ird, "IRD"), ("ord", m.ord, "ORD")] {
        if v > MAX_IRD_ORD {
            out.push((
                field.into(),
                format!(
                    "{name} {v} is too big: at most {MAX_IRD_ORD} (0x3FFE); 0x3FFF means \
                     \"no negotiation\" on the wire"
                ),
                if field == "ird" { &["ird"] } else { &["ord"] },
            ));
        }
    }
    if m.max_private_data > MAX_PRIVATE_DATA {
        out.push((
            "max_private_data".into(),
            format!(
                "{} is too big: MPA private data is at most {MAX_PRIVATE_DATA} octets",
                m.max_private_data
            ),
            &["max_private_data"],
        ));
    }
    if m.peer_to_peer && m.rtr_types.is_empty() {
        out.push((
            "rtr_types".into(),
            "peer_to_peer needs at least one RTR type".into(),
            &["rtr_types", "peer_to_peer"],
        ));
    }
    for (k, t) in m.rtr_types.iter().enumerate() {
        if m.rtr_types[..k].contains(t) {
            out.push((
                format!("rtr_types[{k}]"),
                format!("RTR type \"{}\" is listed twice", t.name()),
                &["rtr_types"],
            ));
        }
    }
    out
}

fn tcp(t: &Tcp, p: &mut Problems) {
    if t.rto_min.0 < Duration::from_millis(1) {
        p.add(
            "tcp.rto_min",
            format!("{} is too small: at least 1ms", t.rto_min),
        );
    } else if t.rto_min > t.rto_initial {
        p.add(
            "tcp.rto_min",
            format!(
                "{} is larger than rto_initial ({})",
                t.rto_min, t.rto_initial
            ),
        );
    }
    if t.rto_initial.0 > Duration::from_secs(60) {
        p.add(
            "tcp.rto_initial",
            format!("{} is too large: at most 1m", t.rto_initial),
        );
    }
    range("tcp.recv_buffer", t.recv_buffer, 4096, 1 << 30, p);
    range("tcp.send_buffer", t.send_buffer, 4096, 1 << 30, p);
    if !t.window_scaling && t.recv_buffer > 65535 {
        p.add(
            "tcp.recv_buffer",
            format!(
                "{} octets need window_scaling = true (at most 65535 without it)",
                t.recv_buffer
            ),
        );
    }
}

fn qp(q: &Qp, p: &mut Problems) {
    range("qp.max_qps", q.max_qps, 1, 65536, p);
}

fn listeners(c: &Config, p: &mut Problems) {
    let mut bound: HashMap<(Ipv4Addr, u16), usize> = HashMap::new();
    for (i, l) in c.listeners.iter().enumerate() {
        let at = |f: &str| format!("listeners[{i}].{f}");
        if l.tcp_port == 0 {
            p.add(at("tcp_port"), "TCP port 0 is not a port to listen on");
        }
        let addr = listener_address(c, l, i, p);
        if let Some(addr) = addr {
            if l.tcp_port != 0 {
                if let Some(j) = bound.insert((addr, l.tcp_port), i) {
                    p.add(
                        at("tcp_port"),
                        format!(
                            "{addr}:{} is already listened on by listeners[{j}]",
                            l.tcp_port
                        ),
                    );
                }
            }
        }
        let effective = c.listener_mpa(l);
        if let Some(o) = &l.mpa {
            let overridden = |f: &str| match f {
                "rev" => o.rev.is_some(),
                "markers" => o.markers.is_some(),
                "crc" => o.crc.is_some(),
                "peer_to_peer" => o.peer_to_peer.is_some(),
                "rtr_types" => o.rtr_types.is_some(),
                "ird" => o.ird.is_some(),
                "ord" => o.ord.is_some(),
                "max_private_data" => o.max_private_data.is_some(),
                _ => false,
            };
            for (field, message, involved) in mpa_checks(&effective) {
                if involved.iter().any(|f| overridden(f)) {
                    p.add(at(&format!("mpa.{field}")), message);
                }
            }
        }
        if let Some(pd) = &l.private_data {
            let limit = effective.ulp_private_data_limit();
            if pd.0.len() > usize::from(limit) {
                let why = if effective.peer_to_peer && limit < effective.max_private_data {
                    format!(
                        "{MAX_PRIVATE_DATA} less the {ENHANCED_DATA_LEN}-octet RFC 6581 enhanced word"
                    )
                } else {
                    "max_private_data".to_string()
                };
                p.add(
                    at("private_data"),
                    format!(
                        "private data of {} octets is too long: at most {limit} ({why})",
                        pd.0.len()
                    ),
                );
            }
        }
    }
}

/// The address `l` listens on, if it can be told; reports what is wrong.
fn listener_address(c: &Config, l: &Listener, i: usize, p: &mut Problems) -> Option<Ipv4Addr> {
    let at = |f: &str| format!("listeners[{i}].{f}");
    match (&l.port_name, l.address) {
        (None, None) => {
            p.add(
                format!("listeners[{i}]"),
                "give `port_name` or `address` (or both)",
            );
            None
        }
        (Some(name), addr) => {
            let Some(port) = c.port(name) else {
                p.add(at("port_name"), format!("no port named {name:?}"));
                return None;
            };
            match addr {
                Some(a) if a != port.ipv4.addr => {
                    p.add(
                        at("address"),
                        format!(
                            "{a} is not the address of port {name:?} ({})",
                            port.ipv4.addr
                        ),
                    );
                    None
                }
                _ => Some(port.ipv4.addr),
            }
        }
        (None, Some(a)) => {
            if c.ports.iter().any(|q| q.ipv4.addr == a) {
                Some(a)
            } else {
                p.add(at("address"), format!("{a} is not the address of any port"));
                None
            }
        }
    }
}

fn bench(c: &Config, p: &mut Problems) {
    let Some(b) = &c.bench else { return };
    range("bench.size", b.size, 1, 1 << 30, p);
    if b.iters == 0 {
        p.add("bench.iters", "at least 1 iteration");
    }
    let peer = *b.peer.ip();
    if b.peer.port() == 0 {
        p.add("bench.peer", "the peer's TCP port cannot be 0");
    }
    if peer.is_unspecified() || peer.is_multicast() || peer.is_broadcast() || peer.is_loopback() {
        p.add("bench.peer", format!("{peer} cannot be a peer address"));
        return;
    }
    let candidates: Vec<&Port> = match &b.port_name {
        Some(name) => match c.port(name) {
            Some(port) => vec![port],
            None => {
                p.add("bench.port_name", format!("no port named {name:?}"));
                return;
            }
        },
        None => c.ports.iter().collect(),
    };
    let reachable = candidates
        .iter()
        .any(|port| port.ipv4.contains(peer) || port.gateway.is_some());
    if !reachable {
        p.add(
            "bench.peer",
            format!(
                "{peer} is not reachable: in no {} prefix, and no gateway",
                if b.port_name.is_some() {
                    "of the port's"
                } else {
                    "port's"
                }
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists() {
        assert_eq!(parse_core_list("0-2,5"), Ok(vec![0, 1, 2, 5]));
        assert_eq!(parse_core_list("3"), Ok(vec![3]));
        for bad in ["", "a", "2-1", "1,,2", "0-5000", "-1"] {
            assert!(parse_core_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pci_addresses() {
        for good in ["0000:01:00.0", "01:00.0", "0000:af:1f.7", "AF:00.1"] {
            assert!(pci_ok(good), "{good}");
        }
        for bad in [
            "01:00",
            "1:00.0",
            "0000:01:00.8",
            "00:01:00.0",
            "0000:01:00.0.1",
        ] {
            assert!(!pci_ok(bad), "{bad}");
        }
    }
}
