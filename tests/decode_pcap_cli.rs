//! `iwarp decode --pcap` end to end: captures of real siw rping exchanges and the
//! synthetic samples of `tests/data/gen_pcaps.py` (reordering, retransmission, markers,
//! Linux cooked frames, gaps, bad CRC, rejection), and the exit status contract.

use std::process::{Command, Output};

use serde_json::Value;

fn iwarp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iwarp"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("iwarp runs")
}

fn decode(file: &str) -> (Option<i32>, Vec<Value>) {
    let out = iwarp(&["decode", "--json", "--pcap", file]);
    let recs = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    (out.status.code(), recs)
}

fn kinds<'a>(recs: &'a [Value], dir: &str) -> Vec<&'a str> {
    recs.iter()
        .filter(|r| r["dir"] == dir)
        .map(|r| r["kind"].as_str().unwrap())
        .collect()
}

fn opcodes<'a>(recs: &'a [Value], dir: &str) -> Vec<&'a str> {
    recs.iter()
        .filter(|r| r["dir"] == dir && r["kind"] == "fpdu")
        .map(|r| r["opcode"].as_str().unwrap())
        .collect()
}

#[test]
fn siw_rping_captures() {
    for (file, crc, p2p) in [
        ("tests/data/siw-rping-default.pcap", "unchecked", false),
        ("tests/data/siw-rping-crc.pcap", "ok", false),
        ("tests/data/siw-rping-p2p.pcap", "unchecked", true),
    ] {
        let (code, recs) = decode(file);
        assert_eq!(code, Some(0), "{file}: {recs:?}");
        assert_eq!(recs[0]["kind"], "connection");
        assert_eq!(recs[0]["mpa"], true);
        let init = opcodes(&recs, "initiator");
        let resp = opcodes(&recs, "responder");
        // Two pings: per ping the client sends two advertisements and a Read Response,
        // the server a Read Request, a Write and two go-aheads.
        let rtr = usize::from(p2p);
        assert_eq!(init.len(), 6 + rtr, "{file}: {init:?}");
        assert_eq!(resp.len(), 8, "{file}: {resp:?}");
        assert_eq!(init[rtr], "send");
        assert_eq!(resp[0], "rdma_read_request");
        for r in recs.iter().filter(|r| r["kind"] == "fpdu") {
            assert_eq!(r["crc"], crc, "{file}: {r}");
            assert!(r["src"].as_str().unwrap().starts_with("10.77.0.2:"));
            assert!(r["packet"].as_u64().unwrap() > 3);
        }
        let req = recs.iter().find(|r| r["kind"] == "mpa_request").unwrap();
        assert_eq!(req["dir"], "initiator");
        assert_eq!(req["peer_to_peer"], p2p);
        // rping's ping data in the Read Responses.
        let rr: Vec<&Value> = recs
            .iter()
            .filter(|r| r["opcode"] == "rdma_read_response" && r["payload_len"] == 64)
            .collect();
        assert_eq!(rr.len(), 2);
        assert!(rr[0]["payload"]
            .as_str()
            .unwrap()
            .starts_with("72646d612d70696e672d303a20414243")); // "rdma-ping-0: ABC"
    }
}

#[test]
fn reordered_retransmitted_wrapping_stream() {
    let (code, recs) = decode("tests/data/gen-crc-reordered.pcap");
    assert_eq!(code, Some(0), "{recs:?}");
    let conns: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "connection").collect();
    assert_eq!(conns.len(), 2);
    assert_eq!(
        conns[1]["mpa"], false,
        "the ssh connection is listed, not decoded"
    );
    assert_eq!(
        opcodes(&recs, "initiator"),
        [
            "send",
            "rdma_read_response",
            "send",
            "send",
            "rdma_read_response",
            "send"
        ]
    );
    assert_eq!(
        opcodes(&recs, "responder"),
        ["rdma_read_request", "send", "rdma_write", "send"].repeat(2)
    );
    for r in recs.iter().filter(|r| r["kind"] == "fpdu") {
        assert_eq!(r["crc"], "ok", "{r}");
    }
    let big: Vec<&Value> = recs.iter().filter(|r| r["payload_len"] == 3000).collect();
    assert_eq!(big.len(), 4);
    // Records come in capture order.
    let packets: Vec<u64> = recs.iter().filter_map(|r| r["packet"].as_u64()).collect();
    assert!(packets.windows(2).all(|w| w[0] <= w[1]), "{packets:?}");
}

#[test]
fn markers_both_ways_in_linux_cooked_big_endian_nanoseconds() {
    let (code, recs) = decode("tests/data/gen-markers-sll.pcap");
    assert_eq!(code, Some(0), "{recs:?}");
    assert_eq!(opcodes(&recs, "initiator"), ["rdma_read_request", "send"]);
    assert_eq!(
        opcodes(&recs, "responder"),
        ["rdma_read_response", "rdma_write", "send"]
    );
    let w = recs.iter().find(|r| r["opcode"] == "rdma_write").unwrap();
    assert_eq!(w["payload_len"], 1500);
    assert_eq!(w["crc"], "ok");
    // 1514 octets of ULPDU plus header, pad, CRC and three markers.
    assert_eq!(w["wire_len"], 1532);
}

#[test]
fn gap_is_reported_not_guessed() {
    let (code, recs) = decode("tests/data/gen-gap.pcap");
    assert_eq!(code, Some(1));
    assert_eq!(kinds(&recs, "responder"), ["mpa_reply", "error", "error"]);
    let gap = recs.iter().find(|r| r.get("gap").is_some()).unwrap();
    assert_eq!(gap["gap"], 1000);
    assert_eq!(gap["offset"], 1024);
    assert!(gap["message"].as_str().unwrap().contains("capture gap"));
    assert_eq!(kinds(&recs, "initiator"), ["mpa_request", "fpdu"]);
}

#[test]
fn bad_crc_and_rejection() {
    let (code, recs) = decode("tests/data/gen-bad-crc.pcap");
    assert_eq!(code, Some(1));
    let crcs: Vec<&str> = recs
        .iter()
        .filter(|r| r["kind"] == "fpdu")
        .map(|r| r["crc"].as_str().unwrap())
        .collect();
    assert_eq!(crcs, ["ok", "bad"], "nothing is decoded after an MPA error");
    let e = recs.iter().find(|r| r["kind"] == "error").unwrap();
    assert_eq!(e["mpa_code"], 2);

    let (code, recs) = decode("tests/data/gen-reject.pcap");
    assert_eq!(code, Some(0), "{recs:?}");
    let rep = recs.iter().find(|r| r["kind"] == "mpa_reply").unwrap();
    assert_eq!(rep["r"], true);
    assert!(recs.iter().any(|r| r["kind"] == "note"));
}

#[test]
fn unusable_input_and_option_conflicts() {
    let out = iwarp(&["decode", "--pcap", "tests/data/README.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pcap file"));
    let out = iwarp(&["decode", "--pcap", "tests/data/no-such.pcap"]);
    assert_eq!(out.status.code(), Some(2));
    let out = iwarp(&["decode", "--crc", "--pcap", "tests/data/gen-gap.pcap"]);
    assert_eq!(out.status.code(), Some(2), "--crc comes from the capture");
    // The readable listing names each connection and direction.
    let out = iwarp(&["decode", "--pcap", "tests/data/siw-rping-crc.pcap"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("== connection 0: 10.77.0.2:"));
    assert!(text.contains(" > 10.77.0.2:7174 initiator "));
    assert!(text.contains("crc=ok"));
}

#[test]
fn our_exchanges_with_siw() {
    // Captured in the guest during scripts/interop-siw.sh: our rping (10.77.0.3, DPDK
    // af_packet) against siw's rping (10.77.0.2), 20 validated pings each.
    for (file, ours_init, crc) in [
        ("tests/data/ours-client-siw-server-crc.pcap", true, "ok"),
        (
            "tests/data/ours-client-siw-server-nocrc.pcap",
            true,
            "unchecked",
        ),
        (
            "tests/data/ours-server-siw-client-default.pcap",
            false,
            "ok",
        ),
        (
            "tests/data/ours-server-siw-client-p2p-crc.pcap",
            false,
            "ok",
        ),
    ] {
        let (code, recs) = decode(file);
        assert_eq!(code, Some(0), "{file}");
        let req = recs.iter().find(|r| r["kind"] == "mpa_request").unwrap();
        assert_eq!(
            req["src"].as_str().unwrap().starts_with("10.77.0.3:"),
            ours_init,
            "{file}"
        );
        let writes = recs
            .iter()
            .filter(|r| r["opcode"] == "rdma_write" && r["payload_len"] == 64)
            .count();
        assert_eq!(writes, 20, "{file}");
        for r in recs.iter().filter(|r| r["kind"] == "fpdu") {
            assert_eq!(r["crc"], crc, "{file}: {r}");
        }
    }
    // The stall: siw acknowledged our Write RTR and first Send (one segment) and never
    // answered; the capture itself is clean.
    let (code, recs) = decode("tests/data/ours-client-siw-server-p2p-write-stall.pcap");
    assert_eq!(code, Some(0));
    assert_eq!(opcodes(&recs, "initiator"), ["rdma_write", "send"]);
    assert!(opcodes(&recs, "responder").is_empty());
}
