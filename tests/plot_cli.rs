//! `--plot` and `iwarp report compare`: each kind of chart is well-formed SVG with the
//! series it should have; the comparison prints ratios and refuses what it cannot compare.

use std::path::PathBuf;
use std::process::{Command, Output};

fn iwarp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iwarp"))
        .args(args)
        .output()
        .expect("running iwarp")
}

fn ok(args: &[&str]) -> String {
    let o = iwarp(args);
    assert!(
        o.status.success(),
        "{args:?}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iwarp-plot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The SVG at `path`: parsed (well-formed), its texts, and how many lines it draws.
fn svg(path: &PathBuf) -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not well-formed: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    (texts, lines)
}

fn count(texts: &[String], pred: impl Fn(&str) -> bool) -> usize {
    texts.iter().filter(|t| pred(t)).count()
}

#[test]
fn latency_percentile_plots() {
    let one = tmp("lat.svg");
    ok(&[
        "bench",
        "write-lat",
        "-n",
        "300",
        "--plot",
        one.to_str().unwrap(),
    ]);
    let (texts, lines) = svg(&one);
    assert!(texts.iter().any(|t| t == "percentile"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "latency [usec]"));
    assert!(texts.iter().any(|t| t == "99%"), "{texts:?}");
    assert_eq!(count(&texts, |t| t.ends_with(" octets")), 1, "{texts:?}");
    assert!(lines >= 1);
    // A sweep: eight of its sizes, spread from the smallest to the largest.
    let sweep = tmp("sweep.svg");
    ok(&[
        "bench",
        "send-lat",
        "-a",
        "-n",
        "2",
        "--plot",
        sweep.to_str().unwrap(),
    ]);
    let (texts, _) = svg(&sweep);
    assert_eq!(count(&texts, |t| t.ends_with(" octets")), 8, "{texts:?}");
    assert!(texts.iter().any(|t| t == "2 octets") && texts.iter().any(|t| t == "8388608 octets"));
}

#[test]
fn bandwidth_plots_by_size_and_over_time() {
    let p = tmp("bw.svg");
    ok(&[
        "bench",
        "write-bw",
        "-a",
        "-n",
        "20",
        "--plot",
        p.to_str().unwrap(),
    ]);
    let (texts, lines) = svg(&p);
    assert!(
        texts.iter().any(|t| t == "average bandwidth [MiB/sec]"),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t == "message rate [Mpps]"));
    assert!(
        texts.iter().any(|t| t == "8M") && texts.iter().any(|t| t == "4K"),
        "{texts:?}"
    );
    assert_eq!(count(&texts, |t| t == "this run"), 2);
    assert!(lines >= 2);
    let iv = tmp("iv.svg");
    ok(&[
        "bench",
        "send-bw",
        "-D",
        "0.5",
        "--interval",
        "0.1",
        "--plot",
        iv.to_str().unwrap(),
    ]);
    let (texts, _) = svg(&iv);
    assert!(
        texts.iter().any(|t| t.ends_with("bandwidth per interval")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t == "time [s]"));
}

#[test]
fn compare_two_runs() {
    let (a, b) = (tmp("a.json"), tmp("b.json"));
    std::fs::write(
        &a,
        ok(&["bench", "read-bw", "-s", "4096", "-n", "200", "--json"]),
    )
    .unwrap();
    std::fs::write(
        &b,
        ok(&[
            "bench",
            "read-bw",
            "-s",
            "4096",
            "-n",
            "200",
            "--markers",
            "--json",
        ]),
    )
    .unwrap();
    let p = tmp("cmp.svg");
    let out = ok(&[
        "report",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--plot",
        p.to_str().unwrap(),
    ]);
    assert!(out.contains(" B: RDMA_Read rev2 markers=on"), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("BW average[MiB/sec]"))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let (va, vb, ratio): (f64, f64, f64) = (
        cols[3].parse().unwrap(),
        cols[4].parse().unwrap(),
        cols[5].parse().unwrap(),
    );
    assert!((ratio - vb / va).abs() < 0.002, "{line}");
    let (texts, lines) = svg(&p);
    assert_eq!(count(&texts, |t| t.starts_with("A: ")), 2, "{texts:?}");
    assert_eq!(count(&texts, |t| t.starts_with("B: ")), 2);
    assert!(lines >= 4);

    // Latency against bandwidth cannot be compared; a report from a newer iwarp is refused.
    let l = tmp("l.json");
    std::fs::write(&l, ok(&["bench", "write-lat", "-n", "50", "--json"])).unwrap();
    let o = iwarp(&[
        "report",
        "compare",
        a.to_str().unwrap(),
        l.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not of the same kind"));
    let newer = tmp("newer.json");
    let text = std::fs::read_to_string(&a)
        .unwrap()
        .replacen("\"schema\": 1", "\"schema\": 99", 1);
    std::fs::write(&newer, text).unwrap();
    let o = iwarp(&[
        "report",
        "compare",
        a.to_str().unwrap(),
        newer.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("newer than this iwarp's"));
    let o = iwarp(&[
        "report",
        "compare",
        a.to_str().unwrap(),
        "/nonexistent.json",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
