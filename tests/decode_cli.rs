//! `iwarp decode` end to end: the shipped samples, every kind of malformed input, and the
//! exit status contract (0 clean, 1 malformed stream, 2 unusable input; never a panic).

mod common;
use common::sample;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn iwarp(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iwarp"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iwarp runs");
    {
        let mut pipe = child.stdin.take().unwrap();
        if let Some(input) = stdin {
            pipe.write_all(input).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect()
}

#[test]
fn rping_sample_decodes_every_frame() {
    let out = iwarp(
        &[
            "decode",
            "--startup",
            "--crc",
            "--json",
            "--hex",
            "tests/data/rping-initiator.hex",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = json_lines(&out);
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["mpa_request", "fpdu", "fpdu", "fpdu"]);
    let req = &recs[0];
    assert_eq!(req["offset"], 0);
    assert_eq!(req["rev"], 2);
    assert_eq!(req["c"], true);
    assert_eq!(req["s"], true);
    assert_eq!(req["ird"], 1);
    assert_eq!(req["ord"], 1);
    let ops: Vec<&str> = recs[1..]
        .iter()
        .map(|r| r["opcode"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["send", "rdma_read_request", "rdma_write"]);
    for r in &recs[1..] {
        assert_eq!(r["crc"], "ok");
    }
    assert_eq!(recs[1]["offset"], 24);
    assert_eq!(recs[1]["ulpdu_len"], 34);
    assert_eq!(recs[2]["read_size"], 64);
    assert_eq!(recs[3]["payload_len"], 64);
    // Without --crc the CRCs are not checked.
    let out = iwarp(
        &[
            "decode",
            "--startup",
            "--json",
            "--hex",
            "tests/data/rping-initiator.hex",
        ],
        None,
    );
    assert!(out.status.success());
    assert!(json_lines(&out)[1..]
        .iter()
        .all(|r| r["crc"] == "unchecked"));
}

#[test]
fn readable_listing_by_default_and_stdin_input() {
    let bytes = sample("rping-initiator.hex");
    let out = iwarp(
        &["decode", "--startup", "--crc", "--bin", "-"],
        Some(&bytes),
    );
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(
        lines[0].starts_with("00000000  mpa_request"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("opcode=send") && lines[1].contains("crc=ok"));
    assert!(lines[3].contains("opcode=rdma_write"));
}

#[test]
fn draft_figures_decode_with_markers_and_flag_draft_ddp_version() {
    let out = iwarp(
        &[
            "decode",
            "--markers",
            "--crc",
            "--json",
            "--hex",
            "tests/data/draft-figure5-6.hex",
        ],
        None,
    );
    let recs = json_lines(&out);
    let fpdus: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "fpdu").collect();
    assert_eq!(fpdus.len(), 3);
    assert!(fpdus.iter().all(|r| r["crc"] == "ok"));
    assert_eq!(fpdus[0]["offset"], 0);
    assert_eq!(fpdus[2]["offset"], 0x1ec);
    assert_eq!(fpdus[2]["ulpdu_len"], 42);
    // The draft predates DDP version 1: a receiver would TERM (DDP, untagged, code 6).
    assert_eq!(out.status.code(), Some(1));
    let err = recs.iter().find(|r| r["kind"] == "error").unwrap();
    assert_eq!(err["term"]["layer"], 1);
    assert_eq!(err["term"]["code"], 6);
    // Read without --markers the same bytes are nonsense, and are said to be.
    let out = iwarp(
        &[
            "decode",
            "--crc",
            "--json",
            "--hex",
            "tests/data/draft-figure5-6.hex",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let recs = json_lines(&out);
    assert!(recs.iter().any(|r| r["kind"] == "error"));
}

#[test]
fn bad_crc_is_reported_with_mpa_code_2_and_decoding_stops() {
    let mut bytes = sample("rping-initiator.hex");
    bytes[24 + 20] ^= 0x10; // inside the first FPDU's payload
    let out = iwarp(
        &["decode", "--startup", "--crc", "--json", "--bin", "-"],
        Some(&bytes),
    );
    assert_eq!(out.status.code(), Some(1));
    let recs = json_lines(&out);
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["mpa_request", "fpdu", "error"]);
    assert_eq!(recs[1]["crc"], "bad");
    assert_eq!(recs[1]["offset"], 24);
    assert_eq!(recs[2]["mpa_code"], 2);
}

#[test]
fn marker_mismatch_is_reported_with_mpa_code_3() {
    let mut bytes = sample("draft-figure5-6.hex");
    // The marker at 0x200 (FPDUPTR 0x14) made to point elsewhere; CRC off so only the
    // marker check can see it.
    bytes[0x203] = 0x18;
    let out = iwarp(
        &["decode", "--markers", "--json", "--bin", "-"],
        Some(&bytes),
    );
    assert_eq!(out.status.code(), Some(1));
    let recs = json_lines(&out);
    let last = recs.last().unwrap();
    assert_eq!(last["kind"], "error");
    assert_eq!(last["mpa_code"], 3);
    assert_eq!(last["offset"], 0x1ec);
}

#[test]
fn malformed_startup_frames_give_mpa_code_4() {
    let good = sample("rping-initiator.hex");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad key", {
            let mut b = good.clone();
            b[13] = b'X';
            b
        }),
        ("unsupported rev", {
            let mut b = good.clone();
            b[17] = 3;
            b
        }),
        ("PD_Length over 512", {
            let mut b = good.clone();
            b[18] = 0x02;
            b[19] = 0x01;
            b
        }),
        ("S with PD_Length 2", {
            let mut b = good[..20].to_vec();
            b[19] = 2;
            b.extend_from_slice(&[0, 1]);
            b
        }),
        ("truncated header", good[..10].to_vec()),
        ("truncated private data", good[..22].to_vec()),
    ];
    for (what, bytes) in cases {
        let out = iwarp(
            &["decode", "--startup", "--json", "--bin", "-"],
            Some(&bytes),
        );
        assert_eq!(out.status.code(), Some(1), "{what}");
        let recs = json_lines(&out);
        assert_eq!(recs.len(), 1, "{what}");
        assert_eq!(recs[0]["kind"], "error", "{what}");
        assert_eq!(recs[0]["offset"], 0, "{what}");
        assert_eq!(recs[0]["mpa_code"], 4, "{what}");
    }
}

#[test]
fn stream_ending_inside_an_fpdu_is_an_error() {
    let bytes = sample("rping-initiator.hex");
    let cut = &bytes[..bytes.len() - 5];
    let out = iwarp(
        &["decode", "--startup", "--crc", "--json", "--bin", "-"],
        Some(cut),
    );
    assert_eq!(out.status.code(), Some(1));
    let recs = json_lines(&out);
    assert_eq!(recs.last().unwrap()["kind"], "error");
    assert!(recs.last().unwrap().get("mpa_code").is_none());
}

#[test]
fn unusable_input_exits_2_with_a_message() {
    let out = iwarp(&["decode", "--hex", "-"], Some(b"00 1z"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a hex digit"));
    let out = iwarp(&["decode", "--hex", "-"], Some(b"001"));
    assert_eq!(out.status.code(), Some(2));
    let out = iwarp(&["decode", "--bin", "/nonexistent/stream"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/stream"));
    // Neither or both inputs: a usage error from the argument parser.
    let out = iwarp(&["decode"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = iwarp(&["decode", "--hex", "a", "--bin", "b"], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn arbitrary_bytes_never_crash_the_cli() {
    // A deterministic pseudo-random stream in every mode.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut bytes = Vec::new();
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    for flags in [
        &[][..],
        &["--startup"],
        &["--markers", "--crc"],
        &["--startup", "--markers"],
    ] {
        let mut args = vec!["decode", "--json", "--bin", "-"];
        args.extend_from_slice(flags);
        let out = iwarp(&args, Some(&bytes));
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "{flags:?}: {:?}",
            out.status
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = json_lines(&out);
    }
}
