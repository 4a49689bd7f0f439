//! `iwarp::report::write_hgrm`: HdrHistogram's percentile distribution text.

use hdrhistogram::Histogram;
use iwarp::report::{write_hgrm, LatMeter};
use std::time::Duration;

struct Parsed {
    rows: Vec<(f64, f64, u64, Option<f64>)>,
    mean: f64,
    max: f64,
    total: u64,
    buckets: u64,
    sub_buckets: u64,
}

fn footer_field(line: &str, key: &str) -> String {
    let at = line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len();
    let rest = line[at..].trim_start().trim_start_matches('=').trim_start();
    rest.split([',', ']']).next().unwrap().trim().to_string()
}

fn parse(text: &str) -> Parsed {
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "       Value     Percentile TotalCount 1/(1-Percentile)"
    );
    assert_eq!(lines.next().unwrap(), "");
    let mut rows = Vec::new();
    let mut footer = Vec::new();
    for l in lines {
        if l.starts_with("#[") {
            footer.push(l);
            continue;
        }
        assert!(footer.is_empty(), "rows after the footer");
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(f.len() == 4 || f.len() == 3, "{l}");
        rows.push((
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f.get(3).map(|x| x.parse().unwrap()),
        ));
    }
    assert_eq!(footer.len(), 3, "{footer:?}");
    assert!(footer[0].starts_with("#[Mean    = "));
    assert!(footer[1].starts_with("#[Max     = "));
    assert!(footer[2].starts_with("#[Buckets = "));
    Parsed {
        rows,
        mean: footer_field(footer[0], "Mean").parse().unwrap(),
        max: footer_field(footer[1], "Max").parse().unwrap(),
        total: footer_field(footer[1], "Total count").parse().unwrap(),
        buckets: footer_field(footer[2], "Buckets").parse().unwrap(),
        sub_buckets: footer_field(footer[2], "SubBuckets").parse().unwrap(),
    }
}

fn render(h: &Histogram<u64>, ratio: f64) -> String {
    let mut out = Vec::new();
    write_hgrm(h, &mut out, ratio).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn hgrm_parses_back_consistently() {
    let mut m = LatMeter::new(2);
    for i in 0..10_000u64 {
        // A skewed distribution: mostly ~2 µs, a long tail.
        let ns = 2_000 + (i * 7919 % 1000) + if i % 97 == 0 { 50_000 + i * 10 } else { 0 };
        m.record(Duration::from_nanos(ns));
    }
    let h = m.histogram();
    let text = render(h, 1000.0);
    let p = parse(&text);
    assert!(p.rows.len() > 20);
    for w in p.rows.windows(2) {
        assert!(w[0].0 <= w[1].0, "values nondecreasing: {w:?}");
        assert!(w[0].1 <= w[1].1, "percentiles nondecreasing: {w:?}");
        assert!(w[0].2 <= w[1].2, "counts cumulative: {w:?}");
    }
    let last = p.rows.last().unwrap();
    assert_eq!(last.1, 1.0, "last percentile is 1.0");
    assert_eq!(last.3, None, "the last line has no 1/(1-Percentile)");
    assert!(p.rows[..p.rows.len() - 1].iter().all(|r| r.3.is_some()));
    assert_eq!(last.2, h.len(), "counts sum to the total");
    assert_eq!(p.total, h.len());
    // Values are in µs with 3 decimals.
    assert!((last.0 - h.max() as f64 / 1000.0).abs() < 1e-3);
    assert!((p.max - h.max() as f64 / 1000.0).abs() < 1e-3);
    assert!((p.mean - h.mean() / 1000.0).abs() < 1e-3);
    assert_eq!(p.sub_buckets, 2048, "3 significant digits");
    assert_eq!(p.buckets, u64::from(h.buckets()));
    // 1/(1-p) agrees with the percentile column.
    for r in &p.rows[..p.rows.len() - 1] {
        let inv = r.3.unwrap();
        assert!(
            (inv - 1.0 / (1.0 - r.1)).abs() <= 0.006 * inv.max(1.0),
            "{r:?}"
        );
    }
    // 5 ticks per half distance: the first ticks are 0, 0.1, 0.2, ... while values allow.
    let p50 = p.rows.iter().find(|r| r.1 >= 0.5).unwrap();
    assert!((p50.1 - 0.5).abs() < 1e-9, "a tick lands on 0.5: {p50:?}");
}

#[test]
fn hgrm_golden_small() {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for v in [1000u64, 2000, 3000, 4000] {
        h.record(v).unwrap();
    }
    let text = render(&h, 1000.0);
    // The ticks are hdrhistogram's `iter_quantiles(5)`; it steps in f64 quantiles, so its
    // 0.75 tick lands just past 3/4 and reports the next value (Java steps in percent).
    // Means use each bucket's median-equivalent value, as Java's getMean.
    let expected = "       Value     Percentile TotalCount 1/(1-Percentile)

       1.000 0.000000000000          1           1.00
       1.000 0.100000000000          1           1.11
       1.000 0.200000000000          1           1.25
       2.000 0.300000000000          2           1.43
       2.000 0.400000000000          2           1.67
       2.000 0.500000000000          2           2.00
       3.001 0.550000000000          3           2.22
       3.001 0.600000000000          3           2.50
       3.001 0.650000000000          3           2.86
       3.001 0.700000000000          3           3.33
       4.001 0.750000000000          4           4.00
       4.001 1.000000000000          4
#[Mean    =        2.501, StdDeviation   =        1.118]
#[Max     =        4.001, Total count    =            4]
#[Buckets =           22, SubBuckets     =         2048]
";
    assert_eq!(text, expected, "\n{text}");
}

#[test]
fn hgrm_empty_and_bad_ratio() {
    let h = Histogram::<u64>::new(3).unwrap();
    let text = render(&h, 1.0);
    let p = parse(&text);
    assert!(p.rows.is_empty());
    assert_eq!(p.total, 0);
    let mut out = Vec::new();
    let err = write_hgrm(&h, &mut out, 0.0).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(write_hgrm(&h, &mut out, f64::NAN).is_err());
}
