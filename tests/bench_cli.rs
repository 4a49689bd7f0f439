//! `iwarp bench` as a user types it: every flag changes what the run does or reports, and
//! every flag that cannot apply is refused with a reason (exit status 2), never ignored.
//! Runs are short, on the embedded default (both ends in this process).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn iwarp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iwarp"))
        .args(args)
        .output()
        .expect("running iwarp")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A run with `--json`: must succeed; its report.
fn json(args: &[&str]) -> Value {
    let mut a = vec!["bench"];
    a.extend_from_slice(args);
    a.push("--json");
    let o = iwarp(&a);
    assert!(o.status.success(), "{args:?}:\n{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", text(&o)))
}

/// A run that must be refused (exit status 2) with `why` in its message.
fn refused(args: &[&str], why: &str) {
    let mut a = vec!["bench"];
    a.extend_from_slice(args);
    let o = iwarp(&a);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{args:?} was not refused:\n{}",
        text(&o)
    );
    assert!(
        text(&o).contains(why),
        "{args:?}: no {why:?} in:\n{}",
        text(&o)
    );
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iwarp-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn every_test_runs_with_its_size_count_and_depth() {
    for (test, kind) in [
        ("write-bw", "bw"),
        ("read-bw", "bw"),
        ("send-bw", "bw"),
        ("write-lat", "lat"),
        ("read-lat", "lat"),
        ("send-lat", "lat"),
    ] {
        let r = json(&[test, "-s", "512", "-n", "64", "-t", "8"]);
        let s = &r["samples"][0];
        assert_eq!(s["kind"], kind, "{test}");
        assert_eq!(s["bytes"], 512, "{test}");
        assert_eq!(s["iterations"], 64, "{test}");
        assert_eq!(r["params"]["iterations"], 64);
        let depth = if kind == "bw" { 8 } else { 1 };
        assert_eq!(r["params"]["tx_depth"], depth, "{test}");
    }
}

#[test]
fn duration_all_sizes_and_mtu() {
    let r = json(&["write-bw", "-s", "4096", "-D", "0.3"]);
    assert_eq!(r["params"]["duration_s"], 0.3);
    assert!(r["samples"][0]["iterations"].as_u64().unwrap() > 0);
    let r = json(&["send-lat", "-a", "-n", "2"]);
    let sizes: Vec<u64> = r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, (1..=23).map(|p| 1u64 << p).collect::<Vec<_>>());
    let r = json(&["write-bw", "-n", "50", "--mtu", "9000"]);
    assert_eq!(r["params"]["link"], "memory mtu=9000");
}

#[test]
fn mpa_flags_reach_the_connection() {
    let r = json(&["write-bw", "-n", "50"]);
    assert_eq!(r["params"]["mpa"], "rev2 markers=off crc=on ird=16 ord=16");
    let r = json(&[
        "write-bw",
        "-n",
        "50",
        "--markers",
        "--no-crc",
        "--ird",
        "3",
        "--ord",
        "5",
    ]);
    assert_eq!(r["params"]["mpa"], "rev2 markers=on crc=off ird=3 ord=5");
    let r = json(&["read-bw", "-n", "50", "--ird-ord", "7", "--p2p", "read"]);
    assert_eq!(
        r["params"]["mpa"],
        "rev2 markers=off crc=on ird=7 ord=7 p2p=read"
    );
    let r = json(&["send-lat", "-n", "20", "--rev1"]);
    assert_eq!(r["params"]["mpa"], "rev1 markers=off crc=on ird=16 ord=16");
    refused(
        &["write-bw", "--rev1", "--p2p", "write"],
        "cannot be used with",
    );
    refused(
        &["write-bw", "--ird-ord", "2", "--ird", "3"],
        "cannot be used with",
    );
    refused(&["write-bw", "--p2p", "rdma"], "not an RTR type");
}

/// Every kind of fault the in-memory link injects, at rates a run survives.
const FAULTS: [&str; 10] = [
    "--loss",
    "0.02",
    "--reorder",
    "0.02",
    "--duplicate",
    "0.02",
    "--resegment",
    "0.05",
    "--corrupt",
    "0.01",
];

#[test]
fn faults_verify_and_post_lists() {
    let mut args = vec!["write-bw", "-n", "300", "-s", "8192", "--verify"];
    args.extend(FAULTS);
    args.extend(["--seed", "9"]);
    let r = json(&args);
    let f = r["params"]["faults"].as_str().unwrap();
    for want in [
        "loss=0.02",
        "reorder=0.02",
        "duplicate=0.02",
        "resegment=0.05",
        "corrupt=0.01",
        "seed=9",
    ] {
        assert!(f.contains(want), "{f}");
    }
    assert_eq!(r["verify"]["wrong_octets"], 0);
    assert_eq!(r["verify"]["verified_octets"], 300 * 8192);
    assert!(
        r["alignment"]["client"]["retransmitted_octets"]
            .as_u64()
            .unwrap()
            > 0
    );
    // Probes that repaired a loss are some of the probes.
    let c = &r["alignment"]["client"];
    assert!(
        c["tail_loss_probe_repairs"].as_u64().unwrap() <= c["tail_loss_probes"].as_u64().unwrap(),
        "{c}"
    );
    // 2 % loss over some 1700 segments: loss recoveries, which took time, and the
    // sender measured round trips of the link.
    assert!(c["fast_retransmits"].as_u64().unwrap() > 0, "{c}");
    assert!(c["recovery_us"].as_u64().unwrap() > 0, "{c}");
    assert!(c["mean_rtt_us"].as_f64().unwrap() > 0.0, "{c}");
    // And the text report says so.
    let mut args = vec!["bench", "write-bw", "-n", "300", "-s", "8192"];
    args.extend(FAULTS);
    args.extend(["--seed", "9"]);
    let o = iwarp(&args);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(" loss recoveries, ") && out.contains(" ms in them; mean RTT "),
        "{out}"
    );
    // Small messages: many FPDUs share each TCP record, and each record is still sent,
    // lost, resent and placed whole.
    for (test, markers) in [("send-bw", false), ("write-bw", true), ("read-bw", false)] {
        let mut args = vec![test, "-n", "20000", "-s", "24", "--verify"];
        args.extend(FAULTS);
        if markers {
            args.push("--markers");
        }
        let r = json(&args);
        assert_eq!(r["verify"]["wrong_octets"], 0, "{test}");
        assert_eq!(r["verify"]["verified_octets"], 20000 * 24, "{test}");
    }
    let r = json(&["send-bw", "-n", "400", "-t", "32", "-l", "8", "--verify"]);
    assert_eq!(r["params"]["post_list"], 8);
    assert_eq!(r["verify"]["verified_octets"], 400 * 65536);
    refused(&["write-bw", "-l", "0"], "post list");
    refused(&["write-bw", "-t", "4", "-l", "8"], "post list");
    refused(
        &["write-lat", "-l", "2"],
        "post lists (-l) are for the bandwidth tests",
    );
}

/// `--verify` with messages longer than the server's check reads at a time (64 KiB), and a
/// length that is not a whole number of the pattern's 8-octet words: every octet of every
/// message checked, in pieces, on both ends (the ping-pongs check both directions).
#[test]
fn verify_checks_long_messages_in_pieces() {
    let size = 200_003u64;
    for (test, directions) in [
        ("write-bw", 1),
        ("send-bw", 1),
        ("write-lat", 2),
        ("send-lat", 2),
    ] {
        let r = json(&[test, "-s", "200003", "-n", "20", "--verify"]);
        assert_eq!(r["verify"]["wrong_octets"], 0, "{test}: {r}");
        assert_eq!(
            r["verify"]["verified_octets"],
            directions * 20 * size,
            "{test}: {r}"
        );
    }
}

/// `-Q`: only every N-th request is signaled; one completion covers the ones before it,
/// and every message is still counted and checked.
#[test]
fn completion_moderation() {
    for (q, cqes) in [("1", 1000), ("100", 10), ("128", 8)] {
        let r = json(&["write-bw", "-s", "8", "-n", "1000", "-Q", q]);
        assert_eq!(r["params"]["cq_mod"], q.parse::<u64>().unwrap());
        assert_eq!(r["samples"][0]["iterations"], 1000, "-Q {q}");
        // 1000 is no multiple of 128: the last request is signaled too.
        assert_eq!(r["samples"][0]["completions"], cqes, "-Q {q}");
    }
    // Reads: at most ORD (16 here) per completion; every Read's data checked, under
    // faults.
    let mut args = vec![
        "read-bw", "-s", "100", "-n", "1000", "-Q", "100", "--verify",
    ];
    args.extend(FAULTS);
    let r = json(&args);
    assert_eq!(r["samples"][0]["completions"], 1000 / 16 + 1);
    assert_eq!(r["verify"]["wrong_octets"], 0);
    assert_eq!(r["verify"]["verified_octets"], 1000 * 100);
    // A timed run ends with a whole group, so its last request is a signaled one.
    for test in ["write-bw", "send-bw"] {
        let mut args = vec![test, "-s", "64", "-D", "0.3", "-Q", "50", "--verify"];
        args.extend(FAULTS);
        let r = json(&args);
        let n = r["samples"][0]["iterations"].as_u64().unwrap();
        assert!(n > 0 && n.is_multiple_of(50), "{test}: {n}");
        assert_eq!(r["samples"][0]["completions"], n / 50, "{test}");
        assert_eq!(r["verify"]["wrong_octets"], 0, "{test}");
        assert_eq!(r["verify"]["verified_octets"], n * 64, "{test}");
    }
    let t = text(&iwarp(&["bench", "write-bw", "-n", "200", "-Q", "20"]));
    assert!(t.contains("CQ Moderation   : 20"), "{t}");
    refused(&["write-bw", "-Q", "0"], "completion moderation (-Q)");
    refused(&["write-bw", "-t", "64", "-Q", "100"], "within 1..=64");
    refused(&["write-lat", "-Q", "2"], "-Q) is for the bandwidth tests");
    // (On an interface every machine has, so that the deployment passes its check of the
    // machine and the flag is what is refused.)
    let cfg = std::fs::read_to_string("config/af_packet.toml")
        .unwrap()
        .replace("iface = \"iw0\"", "iface = \"lo\"");
    let path = tmp("lo.toml");
    std::fs::write(&path, cfg).unwrap();
    refused(
        &[
            "write-bw",
            "--perftest",
            "--config",
            path.to_str().unwrap(),
            "-Q",
            "2",
        ],
        "--perftest does not take -Q",
    );
}

/// Without -Q, a bandwidth test moderates its completions as perftest does: every 100th
/// request (at most the tx depth), but every request of one size above 8192 octets, and
/// once per post list with -l.
#[test]
fn completion_moderation_defaults_as_perftest() {
    for (args, q, cqes) in [
        (&["write-bw", "-s", "8", "-n", "1000"][..], 100, Some(10)),
        (&["send-bw", "-s", "8192", "-n", "1000"][..], 100, Some(10)),
        (
            &["write-bw", "-s", "8", "-n", "1000", "-t", "40"][..],
            40,
            Some(25),
        ),
        (&["write-bw", "-s", "8193", "-n", "100"][..], 1, Some(100)),
        // A post list is signaled at its last request, whatever the size.
        (
            &["write-bw", "-s", "8", "-n", "1000", "-l", "10"][..],
            10,
            Some(100),
        ),
        (
            &["write-bw", "-s", "65536", "-n", "100", "-l", "4"][..],
            4,
            Some(25),
        ),
        (&["read-bw", "-s", "65536", "-n", "100"][..], 1, Some(100)),
        // A sweep keeps one figure for all its sizes (perftest's -a).
        (&["write-bw", "-a", "-n", "2"][..], 100, None),
        (&["write-lat", "-s", "8", "-n", "100"][..], 1, None),
    ] {
        let r = json(args);
        assert_eq!(r["params"]["cq_mod"], q, "{args:?}");
        if let Some(c) = cqes {
            assert_eq!(r["samples"][0]["completions"], c, "{args:?}");
        }
    }
    let t = text(&iwarp(&["bench", "write-bw", "-s", "64", "-n", "200"]));
    assert!(t.contains("CQ Moderation   : 100"), "{t}");
    // perftest's default size (65536) is above the limit: no line, as perftest prints none.
    let t = text(&iwarp(&["bench", "write-bw", "-n", "200"]));
    assert!(!t.contains("CQ Moderation"), "{t}");
    // -Q as given, whatever the size.
    let r = json(&["write-bw", "-s", "65536", "-n", "100", "-Q", "10"]);
    assert_eq!(r["samples"][0]["completions"], 10);
}

#[test]
fn tso_hands_the_link_frames_of_several_segments() {
    // Reads: the server's Read Responses are the large transmits; Writes: the client's.
    for (test, side) in [("write-bw", "client"), ("read-bw", "server")] {
        let r = json(&[test, "-n", "300", "-s", "65536", "--verify", "--tso"]);
        assert_eq!(r["params"]["link"], "memory mtu=1500 tso", "{r}");
        assert_eq!(r["verify"]["wrong_octets"], 0);
        assert_eq!(r["verify"]["verified_octets"], 300 * 65536);
        let a = &r["alignment"][side];
        let (frames, segments) = (
            a["tso_frames"].as_u64().unwrap(),
            a["tso_segments"].as_u64().unwrap(),
        );
        // At least half of the run's full-size segments went in frames the link cut.
        assert!(
            frames > 0 && segments >= 300 * 65536 / 1500 / 2,
            "{test}: {a}"
        );
        // The device cut exactly the segments TCP planned: whole FPDUs each.
        assert_eq!(a["new_split"], 0, "{test}: {a}");
        let plain = json(&[test, "-n", "300", "-s", "65536"]);
        assert_eq!(plain["alignment"][side]["tso_frames"], 0, "{plain}");
    }
    refused(
        &["write-bw", "--tso", "--config", "config/af_packet.toml"],
        "cannot be used with",
    );
}

#[test]
fn histograms_one_file_per_size() {
    let one = tmp("one.hgrm");
    let o = iwarp(&[
        "bench",
        "read-lat",
        "-n",
        "50",
        "--hgrm",
        one.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let h = std::fs::read_to_string(&one).unwrap();
    assert!(
        h.contains("Value     Percentile TotalCount 1/(1-Percentile)"),
        "{h}"
    );
    let many = tmp("lat.hgrm");
    let o = iwarp(&[
        "bench",
        "write-lat",
        "-a",
        "-n",
        "2",
        "--hgrm",
        many.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for size in [2u64, 1024, 8 << 20] {
        let p = many.with_file_name(format!("lat-{size}.hgrm"));
        let h = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(h.contains("#[Mean"), "{}", p.display());
    }
    refused(&["write-bw", "--hgrm", "x.hgrm"], "needs a latency test");
}

#[test]
fn perftest_style_output_units_and_thresholds() {
    let o = iwarp(&["bench", "write-bw", "-n", "200", "--report-gbits"]);
    assert!(text(&o).contains("BW average[Gb/sec]"), "{}", text(&o));
    let r = json(&["write-bw", "-n", "200", "--report-gbits"]);
    let (mib, gbit) = (
        r["samples"][0]["avg_mib_s"].as_f64().unwrap(),
        r["samples"][0]["avg_gbit_s"].as_f64().unwrap(),
    );
    assert!((gbit - mib * 1_048_576.0 * 8.0 / 1e9).abs() < 1e-9);
    assert_eq!(r["params"]["report_gbits"], true);

    for (test, figure) in [
        ("write-bw", "bandwidth"),
        ("send-bw", "message_rate"),
        ("read-lat", "latency"),
    ] {
        let o = iwarp(&["bench", test, "-n", "50", "--output", figure]);
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{test} {figure}: {out}");
        assert!(lines[0].parse::<f64>().unwrap() > 0.0, "{out}");
    }
    refused(
        &["write-bw", "--output", "latency"],
        "not a figure of write-bw",
    );
    refused(
        &["write-lat", "--output", "bandwidth"],
        "not a figure of write-lat",
    );
    refused(
        &["write-bw", "--output", "bandwidth", "--json"],
        "cannot be used with",
    );

    // Thresholds: a limit no run can reach fails the run (exit 1) and says why.
    let o = iwarp(&[
        "bench", "write-bw", "-n", "100", "--min-bw", "1e12", "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["thresholds"]["passed"], false);
    assert!(r["thresholds"]["failures"][0]
        .as_str()
        .unwrap()
        .contains("below"));
    let o = iwarp(&["bench", "write-lat", "-n", "100", "--max-lat-p99", "1e9"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("thresholds: passed"), "{}", text(&o));
    let o = iwarp(&["bench", "send-lat", "-n", "100", "--max-lat-p99", "0.001"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("threshold missed: size 65536: 99% latency"),
        "{}",
        text(&o)
    );
    refused(
        &["write-lat", "--min-bw", "1"],
        "--min-bw is for the bandwidth tests",
    );
    refused(
        &["write-bw", "--max-lat-p99", "1"],
        "--max-lat-p99 is for the latency tests",
    );
}

#[test]
fn intervals_and_runs_until_interrupted() {
    let r = json(&["send-bw", "-s", "4096", "-D", "0.5", "--interval", "0.1"]);
    let iv = r["intervals"].as_array().unwrap();
    assert!(iv.len() >= 3, "{r}");
    let min = iv
        .iter()
        .map(|i| i["avg_mib_s"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(r["samples"][0]["min_interval_mib_s"].as_f64().unwrap(), min);
    refused(
        &["write-lat", "--interval", "0.1"],
        "for the bandwidth tests",
    );
    refused(&["write-bw", "--interval", "0.001"], "at least 0.01 s");

    // --run-infinitely: lines until Ctrl-C, then the summary and a clean exit.
    let child = Command::new(env!("CARGO_BIN_EXE_iwarp"))
        .args([
            "bench",
            "write-bw",
            "-s",
            "4096",
            "--run-infinitely",
            "--interval",
            "0.1",
            "-Q",
            "7",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.matches(" interval to ").count() >= 3, "{t}");
    assert!(t.contains("lowest interval bandwidth"), "{t}");
    assert!(t.contains("BW average[MiB/sec]"), "{t}");
    // Stopped with completion moderation (-Q 7): the run ends with a whole group, all
    // of it completed.
    let summary = t
        .lines()
        .skip_while(|l| !l.contains("BW average[MiB/sec]"))
        .nth(1)
        .unwrap_or_else(|| panic!("{t}"));
    let n: u64 = summary.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(n > 0 && n.is_multiple_of(7), "{summary}");
    refused(
        &["write-bw", "--run-infinitely", "-n", "5"],
        "cannot be used with",
    );
}

#[test]
fn perftest_flags_accepted_or_refused() {
    // -F has nothing to check (iwarp times with the monotonic clock): accepted.
    let o = iwarp(&["bench", "write-bw", "-n", "50", "-F"]);
    assert!(o.status.success(), "{}", text(&o));
    refused(&["write-bw", "-I", "64"], "-I (inline sends) is refused");
    // --perftest needs a deployment (a DPDK port).
    refused(&["write-bw", "--perftest"], "--config");
    refused(&["write-bw", "--peer", "10.0.0.1"], "--config");
}

#[test]
fn bad_values_are_refused_with_the_reason() {
    refused(
        &["write-bw", "--mtu", "100"],
        "--mtu must be within 576..=9000",
    );
    refused(
        &["write-bw", "--loss", "0.9"],
        "--loss must be a probability within 0..=0.5",
    );
    refused(
        &["write-bw", "-D", "0"],
        "--duration must be a positive number",
    );
    refused(&["write-bw", "-n", "0"], "--iters must be at least 1");
    refused(&["write-bw", "-t", "0"], "tx depth");
    refused(&["write-lat", "-s", "0"], "needs a size of at least 1");
}

/// A deployment this machine cannot run is refused before DPDK starts, at the field at
/// fault (an interface that does not exist, an lcore the process may not use).
#[cfg(feature = "dpdk")]
#[test]
fn deployments_are_checked_against_the_machine_first() {
    let cfg = tmp("nope.toml");
    std::fs::write(
        &cfg,
        "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"iw-no-such0\"\n\
         ipv4 = \"10.99.0.1/24\"\n\n[[lcores]]\nid = 1000\nports = [\"p0\"]\n",
    )
    .unwrap();
    let path = cfg.to_str().unwrap();
    let o = iwarp(&["bench", "write-bw", "--config", path, "--peer", "10.99.0.2"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "{path}:4:1: ports[0].iface: no network interface \"iw-no-such0\""
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "{path}:8:1: lcores[0].id: lcore 1000 is not a CPU"
        )),
        "{t}"
    );
    assert!(!t.contains("EAL"), "EAL must not have started:\n{t}");
}

#[test]
fn qps_cores_and_both_directions() {
    let r = json(&[
        "write-bw", "-q", "4", "--cores", "2", "-b", "-s", "4096", "-n", "50", "--verify",
    ]);
    assert_eq!(r["params"]["qps"], 4);
    assert_eq!(r["params"]["cores"], 2);
    assert_eq!(r["params"]["bidirectional"], true);
    let per_qp = r["per_qp"].as_array().unwrap();
    assert_eq!(per_qp.len(), 8);
    for q in per_qp {
        assert_eq!(q["core"], q["qp"].as_u64().unwrap() % 2, "{q}");
    }
    assert_eq!(r["samples"][0]["iterations"], 8 * 50);
    assert_eq!(r["verify"]["verified_octets"], 8 * 50 * 4096);
    // One QP, one core: no per-QP block.
    let r = json(&["write-bw", "-s", "4096", "-n", "50"]);
    assert!(r.get("per_qp").is_none());
    assert_eq!(r["params"]["qps"], 1);
    // The text shows each QP.
    let o = iwarp(&[
        "bench", "send-lat", "-q", "2", "--cores", "2", "-s", "64", "-n", "20",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("aggregate of 2 QPs"), "{t}");
    assert!(
        t.contains("QP A1 (core 1)") && t.contains("t_typical"),
        "{t}"
    );
    refused(
        &["write-bw", "--cores", "0"],
        "--cores must be within 1..=64",
    );
    refused(&["write-bw", "-q", "0"], "-q must be within");
    refused(
        &["write-bw", "-q", "2", "--interval", "1"],
        "are for one QP",
    );
}
