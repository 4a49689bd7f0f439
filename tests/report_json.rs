//! The JSON report carries every figure of the text report: each number the text shows
//! (to its precision) is a number of the JSON, or part of one of its strings, for every
//! test, over several sizes, with `--verify`.

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::{to_json, to_text, REPORT_SCHEMA};
use serde_json::Value;

/// The numeric tokens of `s`: runs of digits with at most one inner dot.
fn tokens(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .filter(|t| !t.is_empty() && t.chars().any(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// Every number of a JSON value, and every numeric token of its strings.
fn json_numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.extend(n.as_f64()),
        Value::String(s) => out.extend(tokens(s).iter().filter_map(|t| t.parse::<f64>().ok())),
        Value::Array(a) => a.iter().for_each(|x| json_numbers(x, out)),
        Value::Object(o) => o.values().for_each(|x| json_numbers(x, out)),
        _ => {}
    }
}

/// `token` as the text shows it is some JSON number shown to the same precision.
fn shown(token: &str, numbers: &[f64]) -> bool {
    let decimals = token.split_once('.').map_or(0, |(_, d)| d.len());
    numbers.iter().any(|n| format!("{n:.decimals$}") == token)
}

#[test]
fn every_text_figure_is_in_the_json() {
    for test in [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ] {
        let o = BenchOptions {
            test,
            sizes: vec![64, 4096],
            length: Length::Iterations(if test.is_latency() { 50 } else { 200 }),
            tx_depth: 16,
            verify: true,
            ..BenchOptions::default()
        };
        let out = run_embedded(&o).unwrap_or_else(|e| panic!("{test:?}: {e}"));
        let text = to_text(&out.report);
        let json: Value = serde_json::from_str(&to_json(&out.report)).expect("valid JSON");
        assert_eq!(json["schema"], REPORT_SCHEMA, "{json}");
        assert_eq!(json["samples"].as_array().map(Vec::len), Some(2));
        assert!(
            json["alignment"]["client"]["new_whole_ratio"].is_number(),
            "{json}"
        );
        assert!(json["alignment"]["server"]["retransmitted_octets"].is_number());
        assert!(json["alignment"]["client"]["tail_loss_probe_repairs"].is_number());
        assert_eq!(json["verify"]["wrong_octets"], 0);
        let mut numbers = Vec::new();
        json_numbers(&json, &mut numbers);
        // Column headers are labels ("99%", "99.9%"), not figures.
        let figures: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("#bytes"))
            .collect::<Vec<_>>()
            .join("\n");
        let missing: Vec<String> = tokens(&figures)
            .into_iter()
            .filter(|t| !shown(t, &numbers))
            .collect();
        assert!(
            missing.is_empty(),
            "{test:?}: figures of the text not in the JSON: {missing:?}\n{text}\n{json:#}"
        );
        // Each size has its latency histogram (latency tests).
        let want = if test.is_latency() { 2 } else { 0 };
        assert_eq!(out.histograms.len(), want, "{test:?}");
    }
}
