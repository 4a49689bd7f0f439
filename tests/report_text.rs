//! `iwarp::report` text and JSON: golden perftest 4.5 lines, JSON round trip, progress.

use dataplane::clock::Instant;
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::time::Duration;

use iwarp::report::{
    bw_columns, bw_header, bw_line, footer, lat_columns, lat_header, lat_line, to_json, to_text,
    Alignment, BwMeter, BwSample, LatSample, Progress, ProgressTotal, Report, ReportParams, Sample,
    Segments, REPORT_SCHEMA,
};

const DASHES: &str =
    "---------------------------------------------------------------------------------------\n";

fn params() -> ReportParams {
    ReportParams {
        size: 65536,
        iterations: 5000,
        duration_s: None,
        mpa: "rev1 markers=off crc=on".into(),
        faults: "none".into(),
        link: "memory".into(),
        report_gbits: false,
        tx_depth: 0,
        post_list: 0,
        cq_mod: 1,
        qps: 1,
        cores: 1,
        bidirectional: false,
    }
}

fn bw(bytes: u64, iterations: u64, peak: f64, avg: f64, rate: f64) -> BwSample {
    BwSample {
        bytes,
        iterations,
        peak_mib_s: peak,
        avg_mib_s: avg,
        msg_rate_mpps: rate,
        min_interval_mib_s: None,
        completions: None,
    }
}

fn lat(iterations: u64, v: [f64; 7]) -> LatSample {
    LatSample {
        bytes: 2,
        iterations,
        t_min: v[0],
        t_max: v[1],
        t_typical: v[2],
        t_avg: v[3],
        t_stdev: v[4],
        p99: v[5],
        p999: v[6],
    }
}

// The expected lines are what perftest 4.5 prints for the same figures, tabs expanded as
// a terminal shows them.

#[test]
fn bw_lines_golden() {
    assert_eq!(
        bw_columns(),
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
    );
    assert_eq!(
        bw_line(&bw(65536, 5000, 8609.87, 6595.36, 0.105526)),
        " 65536      5000             8609.87            6595.36              0.105526\n"
    );
    assert_eq!(
        bw_line(&bw(65536, 1000, 46567.34, 46557.03, 0.744912)),
        " 65536      1000             46567.34            46557.03                    0.744912\n"
    );
    assert_eq!(
        bw_line(&bw(8388608, 5000, 19044.44, 19044.43, 0.002381)),
        " 8388608    5000             19044.44            19044.43                    0.002381\n"
    );
    // Small values are padded to perftest's 7-wide fields; rounding as printf's.
    assert_eq!(
        bw_line(&bw(2, 12, 0.0, 1.005, 0.5)),
        " 2          12               0.00               1.00                 0.500000\n"
    );
}

#[test]
fn lat_lines_golden() {
    assert_eq!(
        lat_columns(),
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n"
    );
    assert_eq!(
        lat_line(&lat(1000, [1.42, 1.93, 1.47, 1.47, 0.0, 1.57, 1.93])),
        " 2       1000          1.42           1.93         1.47                1.47             0.00            1.57                    1.93\n"
    );
    assert_eq!(
        lat_line(&lat(1000, [4.70, 13.20, 4.83, 4.82, 0.0, 4.91, 13.20])),
        " 2       1000          4.70           13.20        4.83                4.82             0.00            4.91                    13.20\n"
    );
}

#[test]
fn columns_line_up_with_headers() {
    // The first two columns start exactly under their headers, as in perftest.
    let head = bw_columns();
    let line = bw_line(&bw(65536, 5000, 8609.87, 6595.36, 0.105526));
    assert_eq!(head.find("#iterations"), line.find("5000"));
    let head = lat_columns();
    let line = lat_line(&lat(1000, [1.42, 1.93, 1.47, 1.47, 0.0, 1.57, 1.93]));
    assert_eq!(head.find("t_min"), line.find("1.42"));
    assert_eq!(head.find("t_max"), line.find("1.93"));
    assert_eq!(head.find("t_typical"), line.find("1.47"));
}

#[test]
fn header_and_footer_blocks() {
    assert_eq!(footer(), DASHES);
    let h = bw_header("RDMA_Write", &params());
    let expected = format!(
        "{DASHES}                    RDMA_Write BW Test\n \
Message size    : 65536[B]\n \
Iterations      : 5000\n \
MPA mode        : rev1 markers=off crc=on\n \
Faults          : none\n \
Link            : memory\n\
{DASHES}{}",
        bw_columns()
    );
    assert_eq!(h, expected);
    let mut p = params();
    p.duration_s = Some(5.0);
    let h = lat_header("Send", &p);
    assert!(h.contains("                    Send Latency Test\n"));
    assert!(h.contains(" Duration        : 5[sec]\n"));
    assert!(h.ends_with(&lat_columns()));
    for l in h.lines() {
        assert_eq!(l, l.trim_end(), "no trailing white space");
        assert!(!l.contains('\t'));
    }
}

#[test]
fn whole_report_text() {
    let r = Report {
        test: "RDMA_Write".into(),
        params: params(),
        samples: vec![
            Sample::Bw(bw(65536, 5000, 8609.87, 6595.36, 0.105526)),
            Sample::Bw(bw(65536, 1000, 46567.34, 46557.03, 0.744912)),
        ],
        verify: None,
        alignment: None,
        thresholds: None,
        intervals: Vec::new(),
        per_qp: Vec::new(),
        schema: REPORT_SCHEMA,
    };
    let t = to_text(&r);
    assert!(t.starts_with(&bw_header("RDMA_Write", &params())));
    assert!(t.ends_with(&format!(
        "{}{}{DASHES}",
        bw_line(&bw(65536, 5000, 8609.87, 6595.36, 0.105526)),
        bw_line(&bw(65536, 1000, 46567.34, 46557.03, 0.744912))
    )));
    let empty = Report {
        samples: vec![],
        ..r
    };
    assert_eq!(to_text(&empty), "");
}

/// Asserts that the text report of `r` holds `want`.
#[track_caller]
fn assert_text_has(r: &Report, want: &str) {
    let t = to_text(r);
    assert!(t.contains(want), "want {want:?} in:\n{t}");
}

/// A one-sample write-bw report whose alignment line shows `client`'s segments.
fn report_with_client(client: Segments) -> Report {
    Report {
        test: "RDMA_Write".into(),
        params: params(),
        samples: vec![Sample::Bw(bw(65536, 1000, 62.5, 62.5, 0.001))],
        verify: None,
        alignment: Some(Alignment {
            client,
            server: None,
        }),
        thresholds: None,
        intervals: Vec::new(),
        per_qp: Vec::new(),
        schema: REPORT_SCHEMA,
    }
}

/// The segment line says how many retransmitted octets the server reported receiving
/// twice (D-SACK), and only when it reported any; with retransmissions, the longest gap
/// between polls of each core (what explains them on a lossless link).
#[test]
fn segment_line_tells_needless_retransmissions() {
    let mut r = report_with_client(Segments {
        new_whole: 100,
        new_whole_ratio: 1.0,
        rtx_whole: 2,
        rtx_whole_ratio: 1.0,
        retransmitted_octets: 2856,
        dsack_octets: 1428,
        longest_poll_gap_us: 4200,
        ..Segments::default()
    });
    assert_text_has(
        &r,
        " FPDU-aligned segments: client new 1.0000 rtx 1.0000 (2856 retransmitted octets, \
         1428 reported received twice; longest gap between polls: client 4200 us)\n",
    );
    r.alignment.as_mut().unwrap().client.dsack_octets = 0;
    r.alignment.as_mut().unwrap().server = Some(Segments {
        new_whole_ratio: 1.0,
        rtx_whole_ratio: 1.0,
        longest_poll_gap_us: 310,
        ..Segments::default()
    });
    assert_text_has(
        &r,
        "(2856 retransmitted octets; longest gap between polls: client 4200 us, server 310 \
         us), server new 1.0000\n",
    );
    // The server's retransmissions (read-bw's data) show the gaps too.
    let al = r.alignment.as_mut().unwrap();
    al.client.retransmitted_octets = 0;
    al.server.as_mut().unwrap().retransmitted_octets = 1448;
    assert_text_has(
        &r,
        "(0 retransmitted octets, server 1448; longest gap between polls: client 4200 us, \
         server 310 us), server new",
    );
    // Without retransmissions the gaps explain nothing: not on the line (in the JSON).
    r.alignment
        .as_mut()
        .unwrap()
        .server
        .as_mut()
        .unwrap()
        .retransmitted_octets = 0;
    assert_text_has(&r, "(0 retransmitted octets), server new");
    // Nor from a report written before they were measured (0).
    let al = r.alignment.as_mut().unwrap();
    al.client.retransmitted_octets = 2856;
    al.client.longest_poll_gap_us = 0;
    al.server.as_mut().unwrap().longest_poll_gap_us = 0;
    assert_text_has(&r, "(2856 retransmitted octets), server new");
}

/// The alignment line tells what loss cost each sender: its recoveries, the time in them,
/// and its mean RTT (the server's only when it had recoveries: read-bw's data).
#[test]
fn segment_line_tells_loss_recoveries_and_rtt() {
    let mut r = report_with_client(Segments {
        new_whole: 100,
        new_whole_ratio: 1.0,
        rtx_whole_ratio: 1.0,
        mean_rtt_us: Some(42.04),
        ..Segments::default()
    });
    assert_text_has(&r, "(0 retransmitted octets; mean RTT 42.0 us)\n");
    let c = &mut r.alignment.as_mut().unwrap().client;
    c.retransmitted_octets = 2896;
    c.fast_retransmits = 1;
    c.recovery_us = 240;
    assert_text_has(
        &r,
        "(2896 retransmitted octets; 1 loss recovery, 0.2 ms in it; mean RTT 42.0 us)\n",
    );
    let c = &mut r.alignment.as_mut().unwrap().client;
    c.fast_retransmits = 3;
    c.recovery_us = 1500;
    r.alignment.as_mut().unwrap().server = Some(Segments {
        new_whole_ratio: 1.0,
        rtx_whole_ratio: 1.0,
        mean_rtt_us: Some(7.5),
        ..Segments::default()
    });
    assert_text_has(
        &r,
        "(2896 retransmitted octets; 3 loss recoveries, 1.5 ms in them; mean RTT 42.0 \
         us), server new 1.0000\n",
    );
    let s = r.alignment.as_mut().unwrap().server.as_mut().unwrap();
    s.fast_retransmits = 2;
    s.recovery_us = 40_000;
    assert_text_has(
        &r,
        "mean RTT 42.0 us; server 2 loss recoveries, 40.0 ms in them, its mean RTT 7.5 \
         us), server new",
    );
    // A report from before they were measured: nothing.
    let al = r.alignment.as_mut().unwrap();
    al.client = Segments {
        retransmitted_octets: 2896,
        ..Segments::default()
    };
    al.server = None;
    assert_text_has(&r, "(2896 retransmitted octets)\n");
}

#[test]
fn json_round_trip() {
    let r = Report {
        test: "RDMA_Write".into(),
        params: params(),
        samples: vec![
            Sample::Bw(bw(65536, 1000, 62.5, 62.5, 0.001)),
            Sample::Lat(lat(999, [1.5, 20.25, 2.0, 2.125, 0.5, 4.0, 20.25])),
        ],
        verify: None,
        alignment: None,
        thresholds: None,
        intervals: Vec::new(),
        per_qp: Vec::new(),
        schema: REPORT_SCHEMA,
    };
    let j = to_json(&r);
    let back: Report = serde_json::from_str(&j).expect("parses back");
    assert_eq!(back, r);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["test"], "RDMA_Write");
    assert_eq!(v["params"]["size"], 65536);
    assert_eq!(v["params"]["mpa"], "rev1 markers=off crc=on");
    assert!(v["params"].get("duration_s").is_none());
    assert_eq!(v["samples"][0]["kind"], "bw");
    assert_eq!(v["samples"][0]["avg_mib_s"], 62.5);
    assert_eq!(v["samples"][1]["kind"], "lat");
    assert_eq!(v["samples"][1]["p999"], 20.25);
}

#[test]
fn json_and_text_show_the_same_figures() {
    let mut m = BwMeter::new(4096);
    for i in 0..777u64 {
        m.post(Duration::from_nanos(i * 1_300));
        m.complete(Duration::from_nanos(i * 1_300 + 2_900 + (i % 7) * 100));
    }
    let s = m.sample();
    let r = Report {
        test: "Send".into(),
        params: params(),
        samples: vec![Sample::Bw(s)],
        verify: None,
        alignment: None,
        thresholds: None,
        intervals: Vec::new(),
        per_qp: Vec::new(),
        schema: REPORT_SCHEMA,
    };
    let v: serde_json::Value = serde_json::from_str(&to_json(&r)).unwrap();
    let j = &v["samples"][0];
    let line = bw_line(&s);
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[0], j["bytes"].to_string());
    assert_eq!(cols[1], j["iterations"].to_string());
    assert_eq!(cols[2], format!("{:.2}", j["peak_mib_s"].as_f64().unwrap()));
    assert_eq!(cols[3], format!("{:.2}", j["avg_mib_s"].as_f64().unwrap()));
    assert_eq!(
        cols[4],
        format!("{:.6}", j["msg_rate_mpps"].as_f64().unwrap())
    );
}

#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.borrow_mut())).unwrap()
    }
}

#[test]
fn progress_draws_late_and_rarely_then_clears() {
    let out = Shared::default();
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut p = Progress::with_writer(ProgressTotal::Iterations(1000), t0, Box::new(out.clone()));
    assert!(p.is_enabled());
    p.update_at(10, ms(500));
    p.update_at(100, ms(1999));
    assert_eq!(out.take(), "", "nothing in the first 2 s");
    p.update_at(200, ms(2000));
    assert_eq!(
        out.take(),
        "\r 20.0%  2.0 s  200 msgs  100 msg/s  ETA 8s\x1b[K"
    );
    p.update_at(210, ms(2100));
    p.update_at(240, ms(2249));
    assert_eq!(out.take(), "", "at most 4 draws a second");
    p.update_at(250, ms(2250));
    assert!(out.take().starts_with("\r 25.0%  2.2 s  250 msgs"));
    p.update_with_at(300, ms(2500), || "12.50 MiB/s  0 retransmitted".into());
    assert_eq!(
        out.take(),
        "\r 30.0%  2.5 s  300 msgs  120 msg/s  ETA 6s  12.50 MiB/s  0 retransmitted\x1b[K"
    );
    p.finish();
    assert_eq!(out.take(), "\r\x1b[K");
    p.finish();
    drop(p);
    assert_eq!(out.take(), "", "cleared once only");
}

#[test]
fn progress_short_run_prints_nothing() {
    let out = Shared::default();
    let t0 = Instant::now();
    let mut p = Progress::with_writer(
        ProgressTotal::Duration(Duration::from_secs(1)),
        t0,
        Box::new(out.clone()),
    );
    for i in 0..100 {
        p.update_at(i, t0 + Duration::from_millis(i * 10));
    }
    p.finish();
    assert_eq!(out.take(), "");
}
