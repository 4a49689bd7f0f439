//! `iwarp report compare A.json B.json [--plot FILE.svg]`: two runs of `iwarp bench
//! --json` side by side, size by size, with B's figures as ratios to A's.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use iwarp::report::{Report, Sample, REPORT_SCHEMA};

/// `iwarp report`'s arguments.
#[derive(Args)]
pub struct ReportArgs {
    #[command(subcommand)]
    command: ReportCommand,
}

#[derive(Subcommand)]
enum ReportCommand {
    /// Compare two reports of `iwarp bench --json` (the same kind of test): each size's
    /// figures, and B's as ratios to A's.
    Compare(CompareArgs),
}

#[derive(Args)]
struct CompareArgs {
    /// The reference run (`iwarp bench ... --json > A.json`).
    a: PathBuf,
    /// The run compared with it.
    b: PathBuf,
    /// Also draw both runs into FILE (SVG): bandwidth and message rate by size, or median
    /// and 99th percentile latency by size.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// Runs `iwarp report`.
pub fn run(a: ReportArgs) -> Result<bool, String> {
    match a.command {
        ReportCommand::Compare(c) => {
            let (ra, rb) = (load(&c.a)?, load(&c.b)?);
            print!("{}", compare(&ra, &rb)?);
            if let Some(p) = &c.plot {
                plot(p, &ra, &rb).map_err(|e| format!("{}: {e}", p.display()))?;
            }
            Ok(true)
        }
    }
}

fn load(path: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let r: Report = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not an `iwarp bench --json` report: {e}",
            path.display()
        )
    })?;
    if r.schema > REPORT_SCHEMA {
        return Err(format!(
            "{}: report schema {} is newer than this iwarp's ({REPORT_SCHEMA})",
            path.display(),
            r.schema
        ));
    }
    Ok(r)
}

/// The figures compared for each kind of sample: (name, unit, value).
fn figures(s: &Sample) -> Vec<(&'static str, f64)> {
    match s {
        Sample::Bw(b) => vec![
            ("BW average[MiB/sec]", b.avg_mib_s),
            ("BW peak[MiB/sec]", b.peak_mib_s),
            ("MsgRate[Mpps]", b.msg_rate_mpps),
        ],
        Sample::Lat(l) => vec![
            ("t_typical[usec]", l.t_typical),
            ("t_avg[usec]", l.t_avg),
            ("99%[usec]", l.p99),
            ("99.9%[usec]", l.p999),
        ],
    }
}

fn bytes(s: &Sample) -> u64 {
    match s {
        Sample::Bw(b) => b.bytes,
        Sample::Lat(l) => l.bytes,
    }
}

/// The comparison as text: a line per size and figure present in both, with B/A.
pub fn compare(a: &Report, b: &Report) -> Result<String, String> {
    let kind = |r: &Report| r.samples.first().map(|s| matches!(s, Sample::Bw(_)));
    if kind(a) != kind(b) || kind(a).is_none() {
        return Err(format!(
            "the reports are not of the same kind of test ({} and {}): compare bandwidth \
             with bandwidth, latency with latency",
            a.test, b.test
        ));
    }
    let mut out = format!(
        " A: {} {} ({}; {})\n B: {} {} ({}; {})\n",
        a.test,
        a.params.mpa,
        a.params.link,
        a.params.faults,
        b.test,
        b.params.mpa,
        b.params.link,
        b.params.faults
    );
    out.push_str(&format!(
        " {:<10} {:<22} {:>14} {:>14} {:>8}\n",
        "#bytes", "figure", "A", "B", "B/A"
    ));
    let mut matched = 0;
    for sa in &a.samples {
        let Some(sb) = b.samples.iter().find(|s| bytes(s) == bytes(sa)) else {
            continue;
        };
        matched += 1;
        for ((name, va), (_, vb)) in figures(sa).into_iter().zip(figures(sb)) {
            let ratio = if va > 0.0 {
                format!("{:.3}", vb / va)
            } else {
                "-".into()
            };
            out.push_str(&format!(
                " {:<10} {:<22} {:>14.3} {:>14.3} {:>8}\n",
                bytes(sa),
                name,
                va,
                vb,
                ratio
            ));
        }
    }
    if matched == 0 {
        return Err("the reports have no message size in common".into());
    }
    Ok(out)
}

fn plot(path: &Path, a: &Report, b: &Report) -> Result<(), String> {
    let series = |pick: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(String, Vec<(u64, f64)>)> {
        [("A", a), ("B", b)]
            .iter()
            .map(|(n, r)| {
                let pts = r
                    .samples
                    .iter()
                    .filter_map(|s| pick(s).map(|v| (bytes(s), v)))
                    .collect();
                (format!("{n}: {} {}", r.params.mpa, r.params.link), pts)
            })
            .collect()
    };
    let title = format!("{} A vs B", a.test);
    let (one, two) = match a.samples.first() {
        Some(Sample::Bw(_)) => (
            (
                "average bandwidth [MiB/sec]",
                series(&|s| match s {
                    Sample::Bw(x) => Some(x.avg_mib_s),
                    _ => None,
                }),
            ),
            (
                "message rate [Mpps]",
                series(&|s| match s {
                    Sample::Bw(x) => Some(x.msg_rate_mpps),
                    _ => None,
                }),
            ),
        ),
        _ => (
            (
                "median latency [usec]",
                series(&|s| match s {
                    Sample::Lat(x) => Some(x.t_typical),
                    _ => None,
                }),
            ),
            (
                "99% latency [usec]",
                series(&|s| match s {
                    Sample::Lat(x) => Some(x.p99),
                    _ => None,
                }),
            ),
        ),
    };
    iwarp::plot::by_size(
        path,
        &[
            iwarp::plot::Panel {
                title: &title,
                y_desc: one.0,
                series: &one.1,
            },
            iwarp::plot::Panel {
                title: "",
                y_desc: two.0,
                series: &two.1,
            },
        ],
    )
}
