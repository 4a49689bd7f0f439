//! Broken deployment files: each is refused with the right line, column, field path and
//! message, without touching any device.

use appconfig::{from_str, load, ErrorKind};

/// A valid two-port `mem` deployment; the line numbers in the cases below refer to it.
const BASE: &str = r#"[[ports]]
name = "p0"
driver = "mem"
peer = "p1"
ipv4 = "10.77.0.1/24"

[[ports]]
name = "p1"
driver = "mem"
peer = "p0"
ipv4 = "10.77.0.2/24"

[[lcores]]
id = 0
ports = ["p0", "p1"]
"#;
// Text appended to BASE starts on line 16.

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

fn append(more: &str) -> String {
    format!("{BASE}{more}")
}

struct Case {
    what: &'static str,
    text: String,
    line: usize,
    field: &'static str,
    message: &'static str,
    kind: ErrorKind,
}

fn cases() -> Vec<Case> {
    use ErrorKind::{Schema, Semantic, Syntax};
    let p0_ipv4 = "ipv4 = \"10.77.0.1/24\"\n";
    let p1_ipv4 = "ipv4 = \"10.77.0.2/24\"\n";
    let both = "ports = [\"p0\", \"p1\"]\n";
    let case = |what, text, line, field, message, kind| Case {
        what,
        text,
        line,
        field,
        message,
        kind,
    };
    vec![
        case(
            "missing field",
            replace(p0_ipv4, ""),
            1,
            "ports[0].ipv4",
            "missing field `ipv4`",
            Schema,
        ),
        case(
            "missing top-level array",
            BASE.replace("[[lcores]]\nid = 0\nports = [\"p0\", \"p1\"]\n", ""),
            1,
            "lcores",
            "missing field `lcores`",
            Schema,
        ),
        case(
            "unknown field",
            replace(p1_ipv4, "ipv4 = \"10.77.0.2/24\"\ncolour = \"red\"\n"),
            12,
            "ports[1].colour",
            "unknown field `colour`",
            Schema,
        ),
        case(
            "unknown table",
            append("[dpdk]\nx = 1\n"),
            16,
            "dpdk",
            "unknown field `dpdk`",
            Schema,
        ),
        case(
            "unknown field in a listener's mpa overrides",
            append(
                "[[listeners]]\ntcp_port = 1\nport_name = \"p0\"\n[listeners.mpa]\nmpa_rev = 1\n",
            ),
            20,
            "listeners[0].mpa.mpa_rev",
            "unknown field `mpa_rev`",
            Schema,
        ),
        case(
            "wrong type",
            replace(p0_ipv4, "ipv4 = \"10.77.0.1/24\"\nmtu = \"big\"\n"),
            6,
            "ports[0].mtu",
            "invalid type: string \"big\", expected u16",
            Schema,
        ),
        case(
            "unknown driver",
            replace(
                "driver = \"mem\"\npeer = \"p0\"",
                "driver = \"vhost\"\npeer = \"p0\"",
            ),
            9,
            "ports[1].driver",
            "unknown variant `vhost`",
            Schema,
        ),
        case(
            "bad prefix",
            replace(p0_ipv4, "ipv4 = \"10.0.0.1/33\"\n"),
            5,
            "ports[0].ipv4",
            "invalid IPv4 prefix \"10.0.0.1/33\": prefix length must be at most 32",
            Schema,
        ),
        case(
            "network address",
            replace(p1_ipv4, "ipv4 = \"10.77.0.0/24\"\n"),
            11,
            "ports[1].ipv4",
            "10.77.0.0 is the network address of 10.77.0.0/24",
            Semantic,
        ),
        case(
            "gateway outside the prefix",
            replace(
                p0_ipv4,
                "ipv4 = \"10.77.0.1/24\"\ngateway = \"10.78.0.1\"\n",
            ),
            6,
            "ports[0].gateway",
            "gateway 10.78.0.1 is outside the port's prefix 10.77.0.0/24",
            Semantic,
        ),
        case(
            "bad duration",
            append("[control]\nlink_timeout = \"10 s\"\n"),
            17,
            "control.link_timeout",
            "invalid duration \"10 s\"",
            Schema,
        ),
        case(
            "MTU out of range",
            replace(p1_ipv4, "ipv4 = \"10.77.0.2/24\"\nmtu = 9001\n"),
            12,
            "ports[1].mtu",
            "9001 is out of range: 576..=9000",
            Semantic,
        ),
        case(
            "driver argument of another driver",
            replace(
                p0_ipv4,
                "ipv4 = \"10.77.0.1/24\"\nsocket = \"/run/x.sock\"\n",
            ),
            6,
            "ports[0].socket",
            "`socket` is not used by driver \"mem\"",
            Semantic,
        ),
        case(
            "mem peer not mutual",
            replace("peer = \"p0\"", "peer = \"p1\""),
            4,
            "ports[0].peer",
            "port \"p1\" must name \"p0\" as its peer in turn",
            Semantic,
        ),
        case(
            "duplicate lcore",
            append("\n[[lcores]]\nid = 0\nports = [\"p1\"]\n").replacen(
                both,
                "ports = [\"p0\"]\n",
                1,
            ),
            18,
            "lcores[1].id",
            "duplicate lcore id 0 (also lcores[0])",
            Semantic,
        ),
        case(
            "port polled by more lcores than it has queue pairs",
            append("\n[[lcores]]\nid = 1\nports = [\"p1\"]\n"),
            7,
            "ports[1].rx_queues",
            "port \"p1\" has 1 queue pair(s) but is polled by 2 lcore(s) (lcore 0 (lcores[0]), lcore 1 (lcores[1]))",
            Semantic,
        ),
        case(
            "queue pairs without an lcore each",
            replace(p0_ipv4, "ipv4 = \"10.77.0.1/24\"\nrx_queues = 2\ntx_queues = 2\n"),
            6,
            "ports[0].rx_queues",
            "port \"p0\" has 2 queue pair(s) but is polled by 1 lcore(s) (lcore 0 (lcores[0]))",
            Semantic,
        ),
        case(
            "receive and transmit queues differ",
            replace(p0_ipv4, "ipv4 = \"10.77.0.1/24\"\nrx_queues = 2\ntx_queues = 1\n"),
            7,
            "ports[0].tx_queues",
            "each core owns one receive and one transmit queue: tx_queues (1) must equal rx_queues (2)",
            Semantic,
        ),
        case(
            "pci port without hugepages",
            format!(
                "{}[[ports]]\nname = \"n\"\ndriver = \"pci\"\npci_addr = \"01:00.0\"\nipv4 = \"10.78.0.1/24\"\n",
                replace(both, "ports = [\"p0\", \"p1\", \"n\"]\n")
            ),
            18,
            "ports[2].driver",
            "a pci port needs hugepages",
            Semantic,
        ),
        case(
            "port polled by no lcore",
            replace(both, "ports = [\"p0\"]\n"),
            8,
            "ports[1].name",
            "port \"p1\" is polled by no lcore",
            Semantic,
        ),
        case(
            "lcore polls an unknown port",
            replace(both, "ports = [\"p0\", \"p1\", \"p2\"]\n"),
            15,
            "lcores[0].ports[2]",
            "no port named \"p2\"",
            Semantic,
        ),
        case(
            "listener on unknown port",
            append("\n[[listeners]]\ntcp_port = 18515\nport_name = \"p9\"\n"),
            19,
            "listeners[0].port_name",
            "no port named \"p9\"",
            Semantic,
        ),
        case(
            "listener on an address of no port",
            append("\n[[listeners]]\ntcp_port = 18515\naddress = \"10.77.0.9\"\n"),
            19,
            "listeners[0].address",
            "10.77.0.9 is not the address of any port",
            Semantic,
        ),
        case(
            "IRD too big",
            append("[mpa]\nird = 16383\n"),
            17,
            "mpa.ird",
            "IRD 16383 is too big: at most 16382 (0x3FFE)",
            Semantic,
        ),
        case(
            "ORD too big in a listener override",
            append(
                "[[listeners]]\ntcp_port = 1\nport_name = \"p0\"\n[listeners.mpa]\nord = 0x3FFF\n",
            ),
            20,
            "listeners[0].mpa.ord",
            "ORD 16383 is too big",
            Semantic,
        ),
        case(
            "first_fpdu_delay too long",
            append("[mpa]\nfirst_fpdu_delay = \"11s\"\n"),
            17,
            "mpa.first_fpdu_delay",
            "11s is out of range: 0ms..=10s",
            Semantic,
        ),
        case(
            "max_private_data too big",
            append("[mpa]\nmax_private_data = 513\n"),
            17,
            "mpa.max_private_data",
            "513 is too big: MPA private data is at most 512 octets",
            Semantic,
        ),
        case(
            "private data too long",
            append(&format!(
                "[[listeners]]\ntcp_port = 1\nport_name = \"p0\"\nprivate_data = \"{}\"\n",
                "ab".repeat(509)
            )),
            19,
            "listeners[0].private_data",
            "private data of 509 octets is too long: at most 508",
            Semantic,
        ),
        case(
            "private data not hex",
            append("[[listeners]]\ntcp_port = 1\nport_name = \"p0\"\nprivate_data = \"xy\"\n"),
            19,
            "listeners[0].private_data",
            "invalid hex string \"xy\"",
            Schema,
        ),
        case(
            "peer_to_peer with rev 1",
            append("[mpa]\nrev = 1\n"),
            16,
            "mpa.peer_to_peer",
            "peer_to_peer (RFC 6581) needs rev = 2",
            Semantic,
        ),
        case(
            "duplicate RTR type",
            append("[mpa]\nrtr_types = [\"read\", \"write\", \"read\"]\n"),
            17,
            "mpa.rtr_types[2]",
            "RTR type \"read\" is listed twice",
            Semantic,
        ),
        case(
            "--in-memory without hugepages",
            append("[eal]\nargs = [\"-v\",\n  \"--in-memory\"]\n"),
            18,
            "eal.args[1]",
            "--in-memory cannot go with --no-huge",
            Semantic,
        ),
        case(
            "bench peer unreachable",
            append("[bench]\npeer = \"10.9.9.9:18515\"\n"),
            17,
            "bench.peer",
            "10.9.9.9 is not reachable",
            Semantic,
        ),
        case(
            "limits: a count out of range",
            append("[limits]\nsyn_backlog = 0\n"),
            17,
            "limits.syn_backlog",
            "0 is out of range: 1..=1048576",
            Semantic,
        ),
        case(
            "limits: a timeout out of range",
            append("[limits]\nmax_connections = 10\nlinger = \"20m\"\n"),
            18,
            "limits.linger",
            "1200s is out of range: 1ms..=10m",
            Semantic,
        ),
        case(
            "limits: startup octets below one Request",
            append("[limits]\nstartup_octets = 100\n"),
            17,
            "limits.startup_octets",
            "100 is out of range: 532..=16777216",
            Semantic,
        ),
        case(
            "limits: a session larger than the server",
            append("[limits]\nsession_memory_mib = 2048\nserve_memory_mib = 1024\n"),
            17,
            "limits.session_memory_mib",
            "2048 MiB is more than serve_memory_mib (1024 MiB)",
            Semantic,
        ),
        case(
            "limits: unknown key",
            append("[limits]\nmax_conns = 10\n"),
            17,
            "limits.max_conns",
            "unknown field `max_conns`",
            Schema,
        ),
        case(
            "mpa: first_fpdu_timeout out of range",
            append("[mpa]\nfirst_fpdu_timeout = \"0ms\"\n"),
            17,
            "mpa.first_fpdu_timeout",
            "is out of range: 1ms..=10m",
            Semantic,
        ),
        case(
            "tso on a driver without it",
            replace(p0_ipv4, "ipv4 = \"10.77.0.1/24\"\ntso = true\n"),
            6,
            "ports[0].tso",
            "driver \"mem\" does not offer TCP segmentation offload (tap and PCI NICs may)",
            Semantic,
        ),
        case(
            "tso without checksum offload",
            replace(
                p0_ipv4,
                "ipv4 = \"10.77.0.1/24\"\nchecksum_offload = false\ntso = true\n",
            ),
            7,
            "ports[0].tso",
            "tso needs checksum_offload = true (a device that segments fills the checksums)",
            Semantic,
        ),
        case("syntax error", append("[tcp\n"), 16, "", "", Syntax),
    ]
}

#[test]
fn the_base_is_valid() {
    from_str(BASE, "t.toml").unwrap();
}

#[test]
fn broken_snippets() {
    let mut failures = Vec::new();
    for c in cases() {
        let e = match from_str(&c.text, "t.toml") {
            Ok(_) => {
                failures.push(format!("{}: accepted", c.what));
                continue;
            }
            Err(e) => e,
        };
        let d = e.first();
        let shown = d.to_string();
        let prefix = if c.field.is_empty() {
            format!("t.toml:{}:", c.line)
        } else {
            format!("t.toml:{}:{}: {}: ", c.line, d.column, c.field)
        };
        if d.line != c.line
            || d.field != c.field
            || d.kind != c.kind
            || !d.message.contains(c.message)
            || !shown.starts_with(&prefix)
            || !e.to_string().starts_with(&shown)
        {
            failures.push(format!(
                "{}: expected line {} field {:?} kind {:?} message containing {:?}; got {:?}: {shown}",
                c.what, c.line, c.field, c.kind, c.message, d.kind
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_display_form_of_the_brief() {
    let e = from_str(
        &replace("ipv4 = \"10.77.0.1/24\"", "ipv4 = \"10.0.0.1/33\""),
        "config/af_packet.toml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config/af_packet.toml:5:8: ports[0].ipv4: invalid IPv4 prefix \"10.0.0.1/33\": prefix length must be at most 32"
    );
    // Semantic errors point at the key.
    let e = from_str(&append("[mpa]\nird = 20000\n"), "t.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("t.toml:17:1: mpa.ird: IRD 20000 is too big"),
        "{e}"
    );
}

#[test]
fn every_semantic_problem_is_reported_in_file_order() {
    let text = append("[mpa]\nird = 20000\nord = 20000\n").replacen(
        "ipv4 = \"10.77.0.2/24\"",
        "ipv4 = \"10.77.0.2/24\"\nmtu = 100",
        1,
    );
    let e = from_str(&text, "t.toml").unwrap_err();
    let got: Vec<(usize, &str)> = e
        .diagnostics()
        .iter()
        .map(|d| (d.line, d.field.as_str()))
        .collect();
    assert_eq!(
        got,
        [(12, "ports[1].mtu"), (18, "mpa.ird"), (19, "mpa.ord")]
    );
    assert_eq!(e.to_string().lines().count(), 3);
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("appconfig-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, append("[qp]\nmax_qps = 0\n")).unwrap();
    let e = load(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:17:1: qp.max_qps: 0 is out of range: 1..=65536",
            path.display()
        )
    );
    let missing = dir.join("missing.toml");
    let e = load(&missing).unwrap_err();
    assert_eq!(e.first().kind, ErrorKind::Io);
    assert!(e
        .to_string()
        .starts_with(&format!("{}: cannot read the file", missing.display())));
    std::fs::remove_dir_all(&dir).unwrap();
}
