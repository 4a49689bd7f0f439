//! Result reporting for `iwarp bench`, following perftest 4.5's conventions.
//!
//! The benchmark runner measures; this module turns the measurements into figures and
//! output:
//!
//! * [`BwMeter`] → [`BwSample`]: bandwidth (`ib_write_bw`-style) from per-message post and
//!   completion timestamps.
//! * [`LatMeter`] → [`LatSample`]: latency (`ib_write_lat`-style) from an
//!   [`hdrhistogram::Histogram`] of nanoseconds.
//! * Text: [`bw_header`], [`bw_line`], [`lat_header`], [`lat_line`], [`footer`] (and
//!   [`to_text`] for a whole [`Report`]), laid out as perftest prints them.
//! * JSON: [`to_json`] of a [`Report`]; every type here is `Serialize + Deserialize`.
//! * `--hgrm FILE`: [`write_hgrm`], HdrHistogram's percentile distribution text.
//! * [`Progress`]: a one-line progress indicator on a terminal's stderr.
//!
//! # Units
//!
//! * Bandwidth is in **MiB/sec**: 2^20 octets per second, as perftest's default report
//!   (`format_factor = 0x100000`; perftest 4.5 labels the columns `[MiB/sec]`; older
//!   releases said `[MB/sec]` for the same 2^20 unit).
//! * Message rate is in **Mpps**: 10^6 messages per second.
//! * Latency is in **µs** (`usec`), as `f64`.
//!
//! # Bandwidth: perftest's definitions, as implemented here
//!
//! perftest records `tposted[i]` when work request *i* is posted and `tcompleted[j]` when
//! the completion of *j* is polled (`print_report_bw` in `perftest_parameters.c`).
//!
//! * **Average** = `size × n / (tcompleted[n−1] − tposted[0])`: all octets over the time
//!   from the first post to the last completion. **MsgRate** = `n / (same time)`.
//! * **Peak** = `size / Δ`, where `Δ = min over i ≤ j of (tcompleted[j] − tposted[i]) /
//!   (j − i + 1)`: the best per-message time over any run of consecutive messages.
//!   perftest scans every pair (O(n²)); [`BwMeter`] finds the same minimum exactly in
//!   O(n log n) (a tangent to the upper convex hull of the post times), so it stays cheap
//!   for millions of iterations. perftest does the division in integer cycles; we keep
//!   nanoseconds in exact integer arithmetic and divide once, in `f64`.
//! * With completion moderation (one completion for several messages) the runner calls
//!   [`BwMeter::complete_n`], which gives every covered message the completion's time;
//!   that cannot lower Δ below what perftest's signalled-only scan finds.
//! * Duration-mode runs (perftest `-D`) have no peak: perftest prints `0.00`; so does
//!   [`BwSample::from_elapsed`].
//!
//! # Latency: perftest's definitions, as implemented here
//!
//! perftest's `print_report_lat` sorts the samples and reports min, max, median
//! (`t_typical`), mean, population standard deviation and the 99 % and 99.9 % points.
//! For ping-pong tests (write-lat, send-lat) each sample is **half a round trip**
//! (`rtt_factor = 2`); for read-lat it is the whole read. **[`LatMeter::record`] takes
//! already-halved values**: the runner divides a write/send round trip by two before
//! recording it.
//!
//! Differences, all deliberate and small:
//! * Figures come from the histogram (3 significant digits), not from the sorted array:
//!   percentiles are the histogram's `value_at_quantile` (the highest value equivalent to
//!   the sample at that rank), mean and stdev are the histogram's.
//! * perftest drops the two largest samples (`LAT_MEASURE_TAIL`) before computing the
//!   figures, so its `t_max` is the third-largest sample; we report every sample, and
//!   `t_max` is the true maximum.
//! * `#iterations` is the number of samples recorded (perftest prints the configured
//!   iteration count, one more than its sample count).
//!
//! # Text layout
//!
//! Lines are perftest 4.5's `REPORT_FMT` / `REPORT_FMT_LAT` layouts. perftest's format
//! strings contain tab characters; we expand them at 8-column tab stops (as a terminal
//! shows them), so the text is aligned the same everywhere, and we strip trailing
//! spaces. A parser that splits perftest's output on white space reads ours the same way.
//! Every text function returns whole lines, each ending in `\n` (print with `print!`).
//!
//! ```text
//! ---------------------------------------------------------------------------------------
//!  #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
//!  65536      1000             62.50              62.50                0.001000
//! ---------------------------------------------------------------------------------------
//! ```

use dataplane::clock::Instant;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Octets in one MiB: perftest's bandwidth unit is MiB/sec (`format_factor = 0x100000`).
pub const MIB: f64 = 1_048_576.0;

/// Width of perftest's dashed separator line (`RESULT_LINE`).
pub const RESULT_LINE_WIDTH: usize = 87;

/// The column header of a bandwidth report (perftest 4.5 `RESULT_FMT`, MiB/sec).
pub const BW_COLUMNS: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";

/// The column header of a bandwidth report in Gb/sec (perftest's `RESULT_FMT_G`).
pub const BW_COLUMNS_GBITS: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// The column header of a latency report (perftest 4.5 `RESULT_FMT_LAT`).
pub const LAT_COLUMNS: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";

// ------------------------------------------------------------------------------------------
// Samples
// ------------------------------------------------------------------------------------------

/// One bandwidth result: one line of a perftest `*_bw` report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwSample {
    /// Message size in octets (`#bytes`).
    pub bytes: u64,
    /// Messages completed (`#iterations`).
    pub iterations: u64,
    /// Peak bandwidth, MiB/sec (2^20 octets/s); 0.0 when not measured (duration mode).
    pub peak_mib_s: f64,
    /// Average bandwidth, MiB/sec: all octets over first post to last completion.
    pub avg_mib_s: f64,
    /// Average message rate, millions of messages per second.
    pub msg_rate_mpps: f64,
    /// The lowest per-interval bandwidth, MiB/sec, when the run was measured in intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_interval_mib_s: Option<f64>,
    /// Send completions the client polled (fewer than `iterations` with completion
    /// moderation, `-Q`), when it counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<u64>,
}

impl BwSample {
    /// A sample from totals alone: `iterations` messages of `bytes` octets in `elapsed`.
    ///
    /// There is no peak (0.0), as in perftest's duration mode. A zero `elapsed` gives
    /// all-zero rates rather than infinities.
    pub fn from_elapsed(bytes: u64, iterations: u64, elapsed: Duration) -> BwSample {
        let (avg_mib_s, msg_rate_mpps) = rates(bytes, iterations, elapsed.as_nanos());
        BwSample {
            bytes,
            iterations,
            peak_mib_s: 0.0,
            avg_mib_s,
            msg_rate_mpps,
            min_interval_mib_s: None,
            completions: None,
        }
    }
}

/// Average MiB/s and Mpps of `iterations` messages of `bytes` in `nanos` nanoseconds.
fn rates(bytes: u64, iterations: u64, nanos: u128) -> (f64, f64) {
    if nanos == 0 {
        return (0.0, 0.0);
    }
    let secs = nanos as f64 / 1e9;
    let avg = bytes as f64 * iterations as f64 / secs / MIB;
    let rate = iterations as f64 / secs / 1e6;
    (avg, rate)
}

/// The figures of one interval of a bandwidth run (`--interval`, `--run-infinitely`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    /// Message size in octets.
    pub bytes: u64,
    /// Seconds from the start of the size's run to the end of the interval.
    pub end_s: f64,
    /// Messages completed in the interval.
    pub iterations: u64,
    /// Average bandwidth over the interval, MiB/sec.
    pub avg_mib_s: f64,
    /// Message rate over the interval, millions per second.
    pub msg_rate_mpps: f64,
}

impl IntervalSample {
    /// The figures of `iterations` messages of `bytes` completed in `length`, ending
    /// `end` after the start.
    pub fn new(bytes: u64, iterations: u64, length: Duration, end: Duration) -> IntervalSample {
        let (avg_mib_s, msg_rate_mpps) = rates(bytes, iterations, length.as_nanos());
        IntervalSample {
            bytes,
            end_s: end.as_secs_f64(),
            iterations,
            avg_mib_s,
            msg_rate_mpps,
        }
    }
}

/// One latency result: one line of a perftest `*_lat` report. All times in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatSample {
    /// Message size in octets (`#bytes`).
    pub bytes: u64,
    /// Samples recorded (`#iterations`).
    pub iterations: u64,
    /// Smallest sample, µs.
    pub t_min: f64,
    /// Largest sample, µs.
    pub t_max: f64,
    /// Median (perftest's `t_typical`), µs.
    pub t_typical: f64,
    /// Mean, µs.
    pub t_avg: f64,
    /// Population standard deviation, µs.
    pub t_stdev: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
}

impl LatSample {
    /// The figures of a histogram of **nanoseconds** (see the module docs for the
    /// definitions). An empty histogram gives all-zero figures.
    pub fn from_histogram(bytes: u64, hist: &Histogram<u64>) -> LatSample {
        if hist.is_empty() {
            return LatSample {
                bytes,
                iterations: 0,
                t_min: 0.0,
                t_max: 0.0,
                t_typical: 0.0,
                t_avg: 0.0,
                t_stdev: 0.0,
                p99: 0.0,
                p999: 0.0,
            };
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatSample {
            bytes,
            iterations: hist.len(),
            t_min: us(hist.min()),
            t_max: us(hist.max()),
            t_typical: us(hist.value_at_quantile(0.5)),
            t_avg: hist.mean() / 1000.0,
            t_stdev: hist.stdev() / 1000.0,
            p99: us(hist.value_at_quantile(0.99)),
            p999: us(hist.value_at_quantile(0.999)),
        }
    }
}

// ------------------------------------------------------------------------------------------
// Meters
// ------------------------------------------------------------------------------------------

/// Most messages a [`BwMeter`] keeps timestamps of (16 octets each: 64 MiB); the peak is
/// computed over them, the averages over every message. A bench run's client QPs share
/// this many between them.
pub const METER_MESSAGES: usize = 1 << 22;

/// Bandwidth meter: collects per-message post and completion timestamps and computes a
/// [`BwSample`] with perftest's definitions (see the module docs).
///
/// Timestamps are [`Duration`]s since any fixed origin the caller chooses (for example an
/// `Instant` taken before the first post); the meter never reads a clock. Message *k*'s
/// completion is the *k*-th completion recorded: RDMA completes a queue pair's work
/// requests in order. Memory: 16 octets per message, as perftest's two cycle arrays, for
/// the first [`METER_MESSAGES`] messages; past them a long run (`-D`, `--run-infinitely`)
/// only counts (64-bit counters), and its peak is that of those first messages.
#[derive(Debug, Clone)]
pub struct BwMeter {
    bytes: u64,
    posted: Vec<u64>,
    completed: Vec<u64>,
    cap: usize,
    n_posted: u64,
    n_completed: u64,
    first_post: Option<u64>,
    last_complete: u64,
}

fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

impl BwMeter {
    /// A meter for messages of `bytes` octets.
    pub fn new(bytes: u64) -> BwMeter {
        BwMeter::with_capacity(bytes, 0)
    }

    /// A meter for messages of `bytes` octets with room for `iterations` messages.
    pub fn with_capacity(bytes: u64, iterations: usize) -> BwMeter {
        BwMeter::with_limit(bytes, iterations, METER_MESSAGES)
    }

    /// Like [`BwMeter::with_capacity`], keeping the timestamps of the first `cap`
    /// messages only.
    pub fn with_limit(bytes: u64, iterations: usize, cap: usize) -> BwMeter {
        let room = iterations.min(cap);
        BwMeter {
            bytes,
            posted: Vec::with_capacity(room),
            completed: Vec::with_capacity(room),
            cap,
            n_posted: 0,
            n_completed: 0,
            first_post: None,
            last_complete: 0,
        }
    }

    /// Message size in octets.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Record that the next message was posted at `at`.
    pub fn post(&mut self, at: Duration) {
        self.post_n(at, 1);
    }

    /// Record that `n` more messages were posted at `at` (a post list).
    pub fn post_n(&mut self, at: Duration, n: usize) {
        let t = nanos(at);
        self.first_post.get_or_insert(t);
        self.n_posted += n as u64;
        let room = self.cap.saturating_sub(self.posted.len()).min(n);
        self.posted.extend(std::iter::repeat_n(t, room));
    }

    /// Record that the next message's completion was seen at `at`.
    pub fn complete(&mut self, at: Duration) {
        self.complete_n(at, 1);
    }

    /// Record that one completion seen at `at` covers `n` more messages (completion
    /// moderation).
    pub fn complete_n(&mut self, at: Duration, n: usize) {
        let t = nanos(at);
        self.n_completed += n as u64;
        self.last_complete = self.last_complete.max(t);
        let room = self.cap.saturating_sub(self.completed.len()).min(n);
        self.completed.extend(std::iter::repeat_n(t, room));
    }

    /// Messages posted so far.
    pub fn posted(&self) -> u64 {
        self.n_posted
    }

    /// Messages completed so far.
    pub fn completed(&self) -> u64 {
        self.n_completed
    }

    /// The figures so far, over the messages both posted and completed.
    ///
    /// No message gives all zeros. Timestamps out of order (a completion before its post)
    /// are bad input: they never panic, and a non-positive best time gives a peak of 0.0.
    pub fn sample(&self) -> BwSample {
        self.sample_with(|| {})
    }

    /// [`BwMeter::sample`], calling `tick` every [`TICK_EVERY`] messages of the peak's
    /// search (a few milliseconds over millions of messages): a consumer that drives its
    /// own core polls it there, so that its connections are served meanwhile.
    pub fn sample_with(&self, mut tick: impl FnMut()) -> BwSample {
        let n = self.n_posted.min(self.n_completed);
        let kept = self.posted.len().min(self.completed.len());
        if n == 0 || kept == 0 {
            return BwSample {
                bytes: self.bytes,
                iterations: 0,
                peak_mib_s: 0.0,
                avg_mib_s: 0.0,
                msg_rate_mpps: 0.0,
                min_interval_mib_s: None,
                completions: None,
            };
        }
        let end = if n as usize == kept {
            self.completed[kept - 1]
        } else {
            self.last_complete
        };
        let span = end.saturating_sub(self.first_post.unwrap_or(0));
        let (avg_mib_s, msg_rate_mpps) = rates(self.bytes, n, u128::from(span));
        let peak_mib_s =
            match best_per_message_with(&self.posted[..kept], &self.completed[..kept], &mut tick) {
                Some((num, den)) if num > 0 => {
                    // size / (num/den ns) in MiB/s.
                    self.bytes as f64 * den as f64 * 1e9 / num as f64 / MIB
                }
                _ => 0.0,
            };
        BwSample {
            bytes: self.bytes,
            iterations: n,
            peak_mib_s,
            avg_mib_s,
            msg_rate_mpps,
            min_interval_mib_s: None,
            completions: None,
        }
    }
}

/// [`best_per_message_with`] without a tick.
#[cfg(test)]
fn best_per_message(posted: &[u64], completed: &[u64]) -> Option<(i128, i128)> {
    best_per_message_with(posted, completed, &mut || {})
}

/// Messages between two calls of [`BwMeter::sample_with`]'s `tick`.
pub const TICK_EVERY: usize = 1 << 14;

/// `min over i ≤ j of (completed[j] − posted[i]) / (j − i + 1)` as an exact fraction
/// `(numerator ns, denominator messages)`, or `None` for empty input.
///
/// Points `B_i = (i, posted[i])` and `A_j = (j + 1, completed[j])`: the ratio is the slope
/// from `B_i` to `A_j`. For each `j` the smallest slope from any `B_i` (i ≤ j, all left of
/// `A_j`) is the tangent from `A_j` to the upper convex hull of those points, found by
/// binary search (slopes to `A_j` along the hull fall, then rise).
///
/// Calls `tick` every [`TICK_EVERY`] messages.
fn best_per_message_with(
    posted: &[u64],
    completed: &[u64],
    tick: &mut impl FnMut(),
) -> Option<(i128, i128)> {
    let n = posted.len().min(completed.len());
    let mut hull: Vec<(i128, i128)> = Vec::new();
    let mut best: Option<(i128, i128)> = None;
    // cross((o→a) × (o→b)) ≥ 0: b is on or left of o→a (a not strictly above o–b).
    let cross = |o: (i128, i128), a: (i128, i128), b: (i128, i128)| {
        (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0)
    };
    for j in 0..n {
        if j % TICK_EVERY == TICK_EVERY - 1 {
            tick();
        }
        let p = (j as i128, i128::from(posted[j]));
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) >= 0 {
            hull.pop();
        }
        hull.push(p);
        let a = (j as i128 + 1, i128::from(completed[j]));
        // slope(h, a) as a fraction with a positive denominator.
        let slope = |h: (i128, i128)| (a.1 - h.1, a.0 - h.0);
        // le(x, y): x ≤ y for fractions with positive denominators.
        let le = |x: (i128, i128), y: (i128, i128)| x.0 * y.1 <= y.0 * x.1;
        // First k whose successor is not better: slopes fall then rise along the hull.
        let (mut lo, mut hi) = (0usize, hull.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if le(slope(hull[mid + 1]), slope(hull[mid])) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let cand = slope(hull[lo]);
        best = match best {
            Some(b) if le(b, cand) => Some(b),
            _ => Some(cand),
        };
    }
    best
}

/// Latency meter: a histogram of nanoseconds (3 significant digits, auto-resizing).
///
/// **Record already-halved values** for ping-pong tests (write-lat, send-lat): perftest's
/// latency is half the round trip. Read-lat records the whole read.
#[derive(Debug, Clone)]
pub struct LatMeter {
    bytes: u64,
    hist: Histogram<u64>,
}

impl LatMeter {
    /// A meter for messages of `bytes` octets.
    pub fn new(bytes: u64) -> LatMeter {
        // 1 ns .. 1 s to start, 3 significant digits; grows as needed.
        let mut hist = Histogram::new_with_bounds(1, 1_000_000_000, 3)
            .expect("constant histogram bounds are valid");
        hist.auto(true);
        LatMeter { bytes, hist }
    }

    /// Message size in octets.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Record one latency (already halved for round-trip tests).
    pub fn record(&mut self, latency: Duration) {
        // Clamp to what an auto-resizing histogram can hold (about 292 years).
        let ns = nanos(latency).min(i64::MAX as u64 / 2);
        self.hist.saturating_record(ns);
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The histogram of nanoseconds (for [`write_hgrm`] with `unit_ratio` 1000.0).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The figures so far.
    pub fn sample(&self) -> LatSample {
        LatSample::from_histogram(self.bytes, &self.hist)
    }
}

// ------------------------------------------------------------------------------------------
// Report and JSON
// ------------------------------------------------------------------------------------------

/// MiB/sec in Gb/sec (10^9 bits per second), perftest's `--report_gbits` unit.
pub fn gbits(mib_s: f64) -> f64 {
    mib_s * MIB * 8.0 / 1e9
}

/// Pass/fail limits on a run's figures (`--min-bw`, `--max-lat-p99`) and what they found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Lowest average bandwidth each size must reach, MiB/sec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bw_mib_s: Option<f64>,
    /// Highest 99th percentile latency each size may have, usec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lat_p99_us: Option<f64>,
    /// One line per size that missed a limit.
    pub failures: Vec<String>,
    /// No size missed a limit.
    pub passed: bool,
}

impl Thresholds {
    /// Checks `samples` against the limits, filling `failures` and `passed`.
    pub fn check(mut self, samples: &[Sample]) -> Thresholds {
        self.failures.clear();
        for s in samples {
            match s {
                Sample::Bw(b) => {
                    if let Some(min) = self.min_bw_mib_s {
                        if b.avg_mib_s < min {
                            self.failures.push(format!(
                                "size {}: average bandwidth {:.2} MiB/sec below {min:.2}",
                                b.bytes, b.avg_mib_s
                            ));
                        }
                    }
                }
                Sample::Lat(l) => {
                    if let Some(max) = self.max_lat_p99_us {
                        if l.p99 > max {
                            self.failures.push(format!(
                                "size {}: 99% latency {:.2} usec above {max:.2}",
                                l.bytes, l.p99
                            ));
                        }
                    }
                }
            }
        }
        self.passed = self.failures.is_empty();
        self
    }
}

/// The run's parameters, shown in the text banner and carried in the JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportParams {
    /// Message size in octets.
    pub size: u64,
    /// Iterations asked for (0 in duration mode).
    pub iterations: u64,
    /// Run length asked for, seconds, in duration mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// MPA mode, e.g. `"rev1 markers=off crc=on"`.
    pub mpa: String,
    /// Injected faults, e.g. `"none"` or `"drop=0.01"`.
    pub faults: String,
    /// The link, e.g. `"memory"` (in-process link) or `"dpdk 0000:01:00.0"`.
    pub link: String,
    /// The text shows bandwidth in Gb/sec (`--report-gbits`); the JSON has both units.
    #[serde(default)]
    pub report_gbits: bool,
    /// Messages kept in flight by a bandwidth test (`-t`; 1 for latency tests).
    #[serde(default)]
    pub tx_depth: u64,
    /// Work requests per doorbell (`-l`).
    #[serde(default)]
    pub post_list: u64,
    /// Send work requests per signaled completion (`-Q`); 1: every one signaled.
    #[serde(default = "one")]
    pub cq_mod: u64,
    /// QPs per direction (`-q`); the samples are their aggregate when above 1.
    #[serde(default = "one")]
    pub qps: u64,
    /// Poll-mode cores per node (`--cores`, or the deployment's).
    #[serde(default = "one")]
    pub cores: u64,
    /// Both directions at once (`-b`).
    #[serde(default)]
    pub bidirectional: bool,
}

fn one() -> u64 {
    1
}

/// One result line: bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sample {
    /// A bandwidth line.
    Bw(BwSample),
    /// A latency line.
    Lat(LatSample),
}

/// What `--verify` checked, over both ends of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// Octets checked.
    pub verified_octets: u64,
    /// Octets found wrong.
    pub wrong_octets: u64,
    /// Octets the run moved that had to be checked (every octet of every message).
    pub expected_octets: u64,
}

/// The version of the JSON report's layout (`docs/bench-json.md`): raised whenever a
/// field changes meaning or goes; new fields may come without it.
pub const REPORT_SCHEMA: u32 = 1;

fn report_schema() -> u32 {
    REPORT_SCHEMA
}

/// How one end's TCP cut the FPDU stream into segments (RFC 5044 section 5.3: every new
/// segment starts with an FPDU and holds whole FPDUs), and what it retransmitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Segments {
    /// New-data segments that started with an FPDU and held whole FPDUs.
    pub new_whole: u64,
    /// New-data segments that split an FPDU.
    pub new_split: u64,
    /// Share of new-data segments that held whole FPDUs (1 when there were none).
    pub new_whole_ratio: f64,
    /// Retransmitted segments holding whole FPDUs.
    pub rtx_whole: u64,
    /// Retransmitted segments that split an FPDU.
    pub rtx_split: u64,
    /// Share of retransmitted segments that held whole FPDUs (1 when there were none).
    pub rtx_whole_ratio: f64,
    /// Payload octets retransmitted.
    pub retransmitted_octets: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Of those, timeouts found spurious (an original transmission arrived: the peer was
    /// late, nothing was lost; Eifel detection, RFC 3522); absent from reports written
    /// before they were counted.
    #[serde(default)]
    pub spurious_timeouts: u64,
    /// Octets the peer reported receiving twice (D-SACK, RFC 2883): retransmissions that
    /// were not needed, or duplicates the link made; absent from reports written before
    /// they were counted.
    #[serde(default)]
    pub dsack_octets: u64,
    /// Fast retransmits.
    pub fast_retransmits: u64,
    /// Tail loss probes (RFC 8985 section 7); absent from reports written before they were
    /// counted.
    #[serde(default)]
    pub tail_loss_probes: u64,
    /// Of those, probes that repaired a loss nothing else saw: answered by an ACK beyond
    /// them with no D-SACK saying their octets had arrived (RFC 8985 section 7.4); cwnd
    /// was cut for each. Absent from reports written before they were counted.
    #[serde(default)]
    pub tail_loss_probe_repairs: u64,
    /// Retransmissions found lost in SACK recovery (records sent after them were SACKed)
    /// and sent again before the RTO; absent from reports written before they were.
    #[serde(default)]
    pub lost_retransmissions: u64,
    /// Microseconds this end's TCP spent in loss recovery (fast or SACK recovery, from the
    /// loss found to the ACK reaching the recovery point, a timeout or the close); absent
    /// from reports written before it was measured.
    #[serde(default)]
    pub recovery_us: u64,
    /// The mean round trip this end's TCP measured (RFC 6298 samples, queueing in its
    /// own window included), microseconds; absent when it took no measurement, and from
    /// reports written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_rtt_us: Option<f64>,
    /// Frames of several segments handed to a device that cut them (transmit
    /// segmentation offload); absent from reports written before TSO.
    #[serde(default)]
    pub tso_frames: u64,
    /// Segments those frames were cut into.
    #[serde(default)]
    pub tso_segments: u64,
    /// The longest time between two polls of this end's core, microseconds (a thread
    /// descheduled for longer than the peer's RTO explains a retransmission on a lossless
    /// link); absent from reports written before it was measured.
    #[serde(default)]
    pub longest_poll_gap_us: u64,
}

/// [`Segments`] of the client, and of the server when it ran in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Alignment {
    /// The client's (this process's) TCP.
    pub client: Segments,
    /// The server's TCP (in-process runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Segments>,
}

/// A whole benchmark report: what [`to_json`] and [`to_text`] render.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The layout's version, [`REPORT_SCHEMA`].
    #[serde(default = "report_schema")]
    pub schema: u32,
    /// perftest's verb name for the test: `"RDMA_Write"`, `"RDMA_Read"` or `"Send"`.
    pub test: String,
    /// The run's parameters.
    pub params: ReportParams,
    /// The result lines, in order (one per message size).
    pub samples: Vec<Sample>,
    /// What `--verify` checked (absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verification>,
    /// How the FPDUs were cut into segments (absent where nobody counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment: Option<Alignment>,
    /// The pass/fail limits and what they found (absent without any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Thresholds>,
    /// Per-interval figures of the bandwidth tests (`--interval`, `--run-infinitely`),
    /// in order; the text shows them as the run goes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalSample>,
    /// The figures of each QP of a multi-QP run (`-q`, `-b`); `samples` is then their
    /// aggregate: every QP's octets over the time from the first QP's start to the last
    /// one's end, per size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_qp: Vec<QpSamples>,
}

/// One QP's figures in a multi-QP run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QpSamples {
    /// Its index (0-based, per direction).
    pub qp: u64,
    /// The client's node: `"A"` (A to B) or `"B"` (B to A, with `-b`).
    pub direction: String,
    /// The index of the client core its connection ran on.
    pub core: u64,
    /// One line per size.
    pub samples: Vec<Sample>,
}

/// The report as one JSON object (pretty-printed, ending in a newline). The figures are
/// the same as the text's, unrounded.
///
/// ```text
/// {"test": "RDMA_Write", "params": {"size": 65536, ...},
///  "samples": [{"kind": "bw", "bytes": 65536, "iterations": 1000, "peak_mib_s": ..., ...}]}
/// ```
pub fn to_json(report: &Report) -> String {
    // These plain types cannot fail to serialize (serde_json writes a non-finite float as
    // null); should that ever change, still answer with valid JSON naming the error.
    let mut v = serde_json::to_value(report)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
    // Bandwidth in both units, whichever the text shows.
    if let Some(samples) = v.get_mut("samples").and_then(|s| s.as_array_mut()) {
        for s in samples {
            if let (Some(peak), Some(avg)) = (
                s.get("peak_mib_s").and_then(|x| x.as_f64()),
                s.get("avg_mib_s").and_then(|x| x.as_f64()),
            ) {
                s["peak_gbit_s"] = serde_json::json!(gbits(peak));
                s["avg_gbit_s"] = serde_json::json!(gbits(avg));
            }
        }
    }
    let mut s = serde_json::to_string_pretty(&v)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
    s.push('\n');
    s
}

// ------------------------------------------------------------------------------------------
// Text
// ------------------------------------------------------------------------------------------

/// Expand tabs at 8-column stops and strip trailing white space; append `\n`.
fn expand_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    let mut col = 0usize;
    for c in s.chars() {
        if c == '\t' {
            let next = (col / 8 + 1) * 8;
            out.extend(std::iter::repeat_n(' ', next - col));
            col = next;
        } else {
            out.push(c);
            col += 1;
        }
    }
    let mut out = out.trim_end().to_string();
    out.push('\n');
    out
}

/// perftest's dashed separator line (87 dashes), with its newline.
pub fn footer() -> String {
    let mut s = "-".repeat(RESULT_LINE_WIDTH);
    s.push('\n');
    s
}

/// perftest-style banner: separator, centred-ish title, one ` key : value` line per
/// parameter, separator.
fn banner(title: &str, params: &ReportParams) -> String {
    let mut s = footer();
    let _ = writeln!(s, "{:20}{title}", "");
    let mut kv = |k: &str, v: &str| {
        let _ = writeln!(s, " {k:<16}: {v}");
    };
    kv("Message size", &format!("{}[B]", params.size));
    match params.duration_s {
        Some(d) => kv("Duration", &format!("{d}[sec]")),
        None => kv("Iterations", &params.iterations.to_string()),
    }
    if params.tx_depth > 0 {
        kv("TX depth", &params.tx_depth.to_string());
    }
    if params.post_list > 1 {
        kv("Post list", &params.post_list.to_string());
    }
    if params.cq_mod > 1 {
        kv("CQ Moderation", &params.cq_mod.to_string());
    }
    kv("MPA mode", &params.mpa);
    kv("Faults", &params.faults);
    kv("Link", &params.link);
    s.push_str(&footer());
    s
}

/// The head of a bandwidth report: the banner (`"{test} BW Test"` and the parameters),
/// then perftest's column header. `test` is perftest's verb name (`"RDMA_Write"`, ...).
pub fn bw_header(test: &str, params: &ReportParams) -> String {
    let mut s = banner(&format!("{test} BW Test"), params);
    s.push_str(&bw_columns_in(params.report_gbits));
    s
}

/// Just the column header of a bandwidth report, with its newline.
pub fn bw_columns() -> String {
    expand_line(BW_COLUMNS)
}

/// The column header in MiB/sec or, with `gbits`, in Gb/sec.
pub fn bw_columns_in(gbits: bool) -> String {
    expand_line(if gbits { BW_COLUMNS_GBITS } else { BW_COLUMNS })
}

/// [`bw_line`], with the bandwidths in Gb/sec when `gbits` says so.
pub fn bw_line_in(s: &BwSample, gbits: bool) -> String {
    if !gbits {
        return bw_line(s);
    }
    bw_line(&BwSample {
        peak_mib_s: self::gbits(s.peak_mib_s),
        avg_mib_s: self::gbits(s.avg_mib_s),
        ..*s
    })
}

/// One bandwidth line in perftest 4.5's layout (`REPORT_FMT`): size, iterations, peak
/// and average to 2 decimals, message rate to 6.
pub fn bw_line(s: &BwSample) -> String {
    expand_line(&format!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}",
        s.bytes, s.iterations, s.peak_mib_s, s.avg_mib_s, s.msg_rate_mpps
    ))
}

/// The head of a latency report: the banner (`"{test} Latency Test"` and the
/// parameters), then perftest's column header.
pub fn lat_header(test: &str, params: &ReportParams) -> String {
    let mut s = banner(&format!("{test} Latency Test"), params);
    s.push_str(&lat_columns());
    s
}

/// Just the column header of a latency report, with its newline.
pub fn lat_columns() -> String {
    expand_line(LAT_COLUMNS)
}

/// One latency line in perftest 4.5's layout (`REPORT_FMT_LAT`), every time to 2
/// decimals.
pub fn lat_line(s: &LatSample) -> String {
    expand_line(&format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        s.bytes, s.iterations, s.t_min, s.t_max, s.t_typical, s.t_avg, s.t_stdev, s.p99, s.p999
    ))
}

/// "; N loss recoveries, X ms in them" for one end with recoveries (nothing without).
fn write_recoveries(out: &mut String, who: &str, s: &Segments) {
    let n = s.fast_retransmits;
    if n > 0 {
        let (noun, them) = if n == 1 {
            ("recovery", "it")
        } else {
            ("recoveries", "them")
        };
        let ms = s.recovery_us as f64 / 1000.0;
        let _ = write!(out, "; {who}{n} loss {noun}, {ms:.1} ms in {them}");
    }
}

/// The whole report as text: for each run of same-kind samples, its header (banner and
/// columns; the banner only once), its lines and a closing separator.
pub fn to_text(report: &Report) -> String {
    let mut out = String::new();
    let mut current: Option<bool> = None; // Some(true) = bw block open.
    for sample in &report.samples {
        let is_bw = matches!(sample, Sample::Bw(_));
        if current != Some(is_bw) {
            if current.is_some() {
                out.push_str(&footer());
            }
            match (current.is_none(), is_bw) {
                (true, true) => out.push_str(&bw_header(&report.test, &report.params)),
                (true, false) => out.push_str(&lat_header(&report.test, &report.params)),
                (false, true) => out.push_str(&bw_columns_in(report.params.report_gbits)),
                (false, false) => out.push_str(&lat_columns()),
            }
            current = Some(is_bw);
        }
        match sample {
            Sample::Bw(b) => out.push_str(&bw_line_in(b, report.params.report_gbits)),
            Sample::Lat(l) => out.push_str(&lat_line(l)),
        }
    }
    if current.is_some() {
        out.push_str(&footer());
    }
    for s in &report.samples {
        if let Sample::Bw(BwSample {
            bytes,
            min_interval_mib_s: Some(m),
            ..
        }) = s
        {
            let (v, unit) = if report.params.report_gbits {
                (gbits(*m), "Gb/sec")
            } else {
                (*m, "MiB/sec")
            };
            let _ = writeln!(
                out,
                " size {bytes}: lowest interval bandwidth {v:.2} {unit}"
            );
        }
    }
    if !report.per_qp.is_empty() {
        let _ = writeln!(
            out,
            " aggregate of {} QPs ({} per direction{}) on {} core(s) per node; per QP:",
            report.per_qp.len(),
            report.params.qps,
            if report.params.bidirectional {
                ", both directions"
            } else {
                ""
            },
            report.params.cores
        );
        for q in &report.per_qp {
            for s in &q.samples {
                match s {
                    Sample::Bw(b) => {
                        let (v, unit) = if report.params.report_gbits {
                            (gbits(b.avg_mib_s), "Gb/sec")
                        } else {
                            (b.avg_mib_s, "MiB/sec")
                        };
                        let _ = writeln!(
                            out,
                            "  QP {}{} (core {}): {} octets x {}: {v:.2} {unit}, {:.6} Mpps",
                            q.direction, q.qp, q.core, b.bytes, b.iterations, b.msg_rate_mpps
                        );
                    }
                    Sample::Lat(l) => {
                        let _ = writeln!(
                            out,
                            "  QP {}{} (core {}): {} octets x {}: t_typical {:.2} usec, \
                             99% {:.2} usec",
                            q.direction, q.qp, q.core, l.bytes, l.iterations, l.t_typical, l.p99
                        );
                    }
                }
            }
        }
    }
    if let Some(a) = &report.alignment {
        let c = &a.client;
        let _ = write!(
            out,
            " FPDU-aligned segments: client new {:.4} rtx {:.4} ({} retransmitted octets",
            c.new_whole_ratio, c.rtx_whole_ratio, c.retransmitted_octets,
        );
        if c.dsack_octets > 0 {
            // D-SACK: the server said it had these already (needless retransmissions, or
            // duplicates the link made).
            let _ = write!(out, ", {} reported received twice", c.dsack_octets);
        }
        // What may explain retransmissions (either end's) on a lossless link: a core that
        // was not running. (0: a report from before the gaps were measured.)
        let server_gap = a.server.as_ref().map_or(0, |s| s.longest_poll_gap_us);
        let retransmitted = c.retransmitted_octets > 0
            || a.server
                .as_ref()
                .is_some_and(|s| s.retransmitted_octets > 0);
        if let Some(s) = a.server.as_ref().filter(|s| s.retransmitted_octets > 0) {
            let _ = write!(out, ", server {}", s.retransmitted_octets);
        }
        // What loss cost each sender: its recoveries and the time in them, and the round
        // trip it measured (the server's when it had recoveries: read-bw's data).
        write_recoveries(&mut out, "", c);
        if let Some(rtt) = c.mean_rtt_us {
            let _ = write!(out, "; mean RTT {rtt:.1} us");
        }
        if let Some(s) = a.server.as_ref().filter(|s| s.fast_retransmits > 0) {
            write_recoveries(&mut out, "server ", s);
            if let Some(rtt) = s.mean_rtt_us {
                let _ = write!(out, ", its mean RTT {rtt:.1} us");
            }
        }
        if retransmitted && (c.longest_poll_gap_us > 0 || server_gap > 0) {
            let _ = write!(
                out,
                "; longest gap between polls: client {} us",
                c.longest_poll_gap_us
            );
            if server_gap > 0 {
                let _ = write!(out, ", server {server_gap} us");
            }
        }
        out.push(')');
        match &a.server {
            Some(s) => {
                let _ = writeln!(out, ", server new {:.4}", s.new_whole_ratio);
            }
            None => out.push('\n'),
        }
    }
    if let Some(v) = &report.verify {
        let _ = writeln!(
            out,
            " verified {} octets of {} moved, {} wrong",
            v.verified_octets, v.expected_octets, v.wrong_octets
        );
    }
    if let Some(t) = &report.thresholds {
        if t.passed {
            out.push_str(" thresholds: passed\n");
        }
        for f in &t.failures {
            let _ = writeln!(out, " threshold missed: {f}");
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// HdrHistogram percentile distribution (.hgrm)
// ------------------------------------------------------------------------------------------

/// Percentile ticks per half distance in [`write_hgrm`] (HdrHistogram's default).
pub const HGRM_TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Write `hist` in HdrHistogram's percentile distribution format (the text of Java's
/// `outputPercentileDistribution` and C's `hdr_percentiles_print`, the `.hgrm` files
/// that HdrHistogram's plotter reads), with 5 percentile ticks per half distance.
///
/// Values are divided by `unit_ratio`: for a histogram of nanoseconds, 1000.0 gives
/// microseconds. Layout: a `Value Percentile TotalCount 1/(1-Percentile)` header and a
/// blank line; one line per tick (`%12.Nf %2.12f %10d %14.2f`, N = the histogram's
/// significant digits; the last line, at percentile 1.0, has no inverse column); then
/// the `#[Mean ...]`, `#[Max ...]` and `#[Buckets ...]` footer lines.
///
/// The ticks are `hdrhistogram`'s `iter_quantiles(5)`. It steps in `f64` quantiles where
/// Java steps in percent, so a tick can land one ulp past a count boundary and report
/// the next value (see the golden test in `tests/report_hgrm.rs`); the layout is Java's.
///
/// A `unit_ratio` that is not a positive finite number is an error
/// ([`io::ErrorKind::InvalidInput`]), not a panic.
pub fn write_hgrm(hist: &Histogram<u64>, out: &mut impl Write, unit_ratio: f64) -> io::Result<()> {
    if !(unit_ratio.is_finite() && unit_ratio > 0.0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("hgrm unit ratio must be a positive number, not {unit_ratio}"),
        ));
    }
    let digits = usize::from(hist.sigfig());
    writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total: u64 = 0;
    if !hist.is_empty() {
        for v in hist.iter_quantiles(HGRM_TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / unit_ratio;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                writeln!(
                    out,
                    "{value:12.digits$} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                )?;
            } else {
                writeln!(out, "{value:12.digits$} {q:2.12} {total:10}")?;
            }
        }
    }
    let (mean, stdev, max) = if hist.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            hist.mean() / unit_ratio,
            hist.stdev() / unit_ratio,
            hist.max() as f64 / unit_ratio,
        )
    };
    writeln!(
        out,
        "#[Mean    = {mean:12.digits$}, StdDeviation   = {stdev:12.digits$}]"
    )?;
    writeln!(
        out,
        "#[Max     = {max:12.digits$}, Total count    = {:12}]",
        hist.len()
    )?;
    // counts array length = (buckets + 1) × sub_bucket_count / 2.
    let buckets = usize::from(hist.buckets());
    let sub_buckets = 2 * hist.distinct_values() / (buckets + 1);
    writeln!(
        out,
        "#[Buckets = {buckets:12}, SubBuckets     = {sub_buckets:12}]"
    )?;
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Progress
// ------------------------------------------------------------------------------------------

/// What a run is measured against: a number of iterations or a length of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressTotal {
    /// The run ends after this many iterations.
    Iterations(u64),
    /// The run ends after this long.
    Duration(Duration),
}

/// Runs shorter than this never show a progress line.
pub const PROGRESS_DELAY: Duration = Duration::from_secs(2);

/// At most one redraw per this interval (4 per second).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// A one-line progress indicator (percent, rate, ETA) for long runs, no threads.
///
/// Call [`Progress::update`] as often as convenient (it is cheap: it only looks at the
/// clock); it draws at most 4 times a second, and only once the run has lasted
/// [`PROGRESS_DELAY`] (so short runs print nothing). [`Progress::new`] draws on stderr
/// only when stderr is a terminal. [`Progress::finish`] clears the line.
pub struct Progress {
    total: ProgressTotal,
    start: Instant,
    last_draw: Option<Instant>,
    out: Option<Box<dyn Write>>,
    drawn: bool,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("total", &self.total)
            .field("start", &self.start)
            .field("enabled", &self.out.is_some())
            .field("drawn", &self.drawn)
            .finish()
    }
}

impl Progress {
    /// A progress line on stderr, starting now; silent unless stderr is a terminal.
    pub fn new(total: ProgressTotal) -> Progress {
        let out: Option<Box<dyn Write>> = if io::stderr().is_terminal() {
            Some(Box::new(io::stderr()))
        } else {
            None
        };
        Progress::with_output(total, Instant::now(), out)
    }

    /// A progress line on `out` (always enabled), started at `start`: for tests and for
    /// callers that choose their own stream.
    pub fn with_writer(total: ProgressTotal, start: Instant, out: Box<dyn Write>) -> Progress {
        Progress::with_output(total, start, Some(out))
    }

    fn with_output(total: ProgressTotal, start: Instant, out: Option<Box<dyn Write>>) -> Progress {
        Progress {
            total,
            start,
            last_draw: None,
            out,
            drawn: false,
        }
    }

    /// Whether this indicator will ever draw (stderr is a terminal, or a writer was given).
    pub fn is_enabled(&self) -> bool {
        self.out.is_some()
    }

    /// `done` iterations are complete; redraw if due.
    pub fn update(&mut self, done: u64) {
        self.update_at(done, Instant::now());
    }

    /// As [`Progress::update`], with the caller's clock reading.
    pub fn update_at(&mut self, done: u64, now: Instant) {
        self.update_with_at(done, now, String::new);
    }

    /// As [`Progress::update`], with `detail` (the current bandwidth or latency, the
    /// retransmissions) after the count; `detail` is asked for only when the line is drawn.
    pub fn update_with(&mut self, done: u64, detail: impl FnOnce() -> String) {
        self.update_with_at(done, Instant::now(), detail);
    }

    /// As [`Progress::update_with`], with the caller's clock reading.
    pub fn update_with_at(&mut self, done: u64, now: Instant, detail: impl FnOnce() -> String) {
        if self.out.is_none() {
            return;
        }
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed < PROGRESS_DELAY {
            return;
        }
        if let Some(last) = self.last_draw {
            if now.saturating_duration_since(last) < PROGRESS_INTERVAL {
                return;
            }
        }
        self.last_draw = Some(now);
        let mut line = progress_line(self.total, done, elapsed);
        let detail = detail();
        if !detail.is_empty() {
            line.push_str("  ");
            line.push_str(&detail);
        }
        if let Some(out) = self.out.as_mut() {
            // A failing stderr is not worth failing a benchmark for.
            let _ = write!(out, "\r{line}\x1b[K");
            let _ = out.flush();
            self.drawn = true;
        }
    }

    /// Clear the progress line (if one was drawn). Safe to call more than once.
    pub fn finish(&mut self) {
        if self.drawn {
            if let Some(out) = self.out.as_mut() {
                let _ = write!(out, "\r\x1b[K");
                let _ = out.flush();
            }
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The text of one progress line (no `\r`, no newline): percent, elapsed seconds, count,
/// rate, ETA.
pub fn progress_line(total: ProgressTotal, done: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let (fraction, eta) = match total {
        ProgressTotal::Iterations(n) => {
            let f = if n == 0 { 1.0 } else { done as f64 / n as f64 };
            let left = n.saturating_sub(done) as f64;
            let eta = if rate > 0.0 { Some(left / rate) } else { None };
            (f, eta)
        }
        ProgressTotal::Duration(d) => {
            let total = d.as_secs_f64();
            let f = if total > 0.0 { secs / total } else { 1.0 };
            (f, Some((total - secs).max(0.0)))
        }
    };
    let pct = (fraction * 100.0).clamp(0.0, 100.0);
    let eta = match eta {
        Some(e) => format_eta(e),
        None => "?".to_string(),
    };
    format!(
        "{pct:5.1}%  {:.1} s  {done} msgs  {}  ETA {eta}",
        secs,
        format_rate(rate)
    )
}

fn format_rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2} Mmsg/s", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.1} kmsg/s", per_s / 1e3)
    } else {
        format!("{per_s:.0} msg/s")
    }
}

fn format_eta(secs: f64) -> String {
    let s = secs.ceil() as u64;
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(posted: &[u64], completed: &[u64]) -> Option<(i128, i128)> {
        let n = posted.len().min(completed.len());
        let mut best: Option<(i128, i128)> = None;
        for (i, &p) in posted[..n].iter().enumerate() {
            for (j, &c) in completed[..n].iter().enumerate().skip(i) {
                let c = (i128::from(c) - i128::from(p), (j - i + 1) as i128);
                best = match best {
                    Some(b) if b.0 * c.1 <= c.0 * b.1 => Some(b),
                    _ => Some(c),
                };
            }
        }
        best
    }

    fn same(a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> bool {
        match (a, b) {
            (Some(x), Some(y)) => x.0 * y.1 == y.0 * x.1,
            (None, None) => true,
            _ => false,
        }
    }

    #[test]
    fn hull_peak_matches_brute_force() {
        // A small deterministic LCG: no extra dependency.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for round in 0..300 {
            let n = 1 + (next() % 60) as usize;
            let mut posted = Vec::with_capacity(n);
            let mut completed = Vec::with_capacity(n);
            let (mut tp, mut tc) = (0u64, 0u64);
            for _ in 0..n {
                tp += next() % 50;
                posted.push(tp);
                tc = tc.max(tp) + next() % (if round % 2 == 0 { 500 } else { 20 });
                completed.push(tc);
            }
            assert!(
                same(
                    best_per_message(&posted, &completed),
                    brute(&posted, &completed)
                ),
                "round {round}: {posted:?} {completed:?}"
            );
        }
    }

    /// `sample_with` calls its tick every `TICK_EVERY` messages of the peak's search (a
    /// consumer polls its core there) and finds what `sample` finds.
    #[test]
    fn sample_with_ticks_along_the_search() {
        let mut m = BwMeter::with_capacity(64, 100_000);
        for i in 0..100_000u64 {
            m.post(Duration::from_nanos(i * 100));
            m.complete(Duration::from_nanos(i * 100 + 250 + i % 7));
        }
        let mut ticks = 0;
        let s = m.sample_with(|| ticks += 1);
        assert_eq!(ticks, 100_000 / TICK_EVERY);
        assert_eq!(s, m.sample());
        assert!(s.peak_mib_s > 0.0);
    }

    proptest::proptest! {
        #[test]
        fn hull_peak_matches_brute_force_prop(
            steps in proptest::collection::vec((0u64..1000, 0u64..5000), 1..80)
        ) {
            let (mut tp, mut tc) = (0u64, 0u64);
            let mut posted = Vec::new();
            let mut completed = Vec::new();
            for (dp, dc) in steps {
                tp += dp;
                posted.push(tp);
                tc = tc.max(tp) + dc;
                completed.push(tc);
            }
            proptest::prop_assert!(same(
                best_per_message(&posted, &completed),
                brute(&posted, &completed)
            ));
        }
    }

    #[test]
    fn expand_tabs_at_eight_columns() {
        assert_eq!(expand_line("ab\tc"), "ab      c\n");
        assert_eq!(expand_line("abcdefgh\tc  "), "abcdefgh        c\n");
    }

    #[test]
    fn progress_line_text() {
        let l = progress_line(ProgressTotal::Iterations(1000), 250, Duration::from_secs(5));
        assert_eq!(l, " 25.0%  5.0 s  250 msgs  50 msg/s  ETA 15s");
        let l = progress_line(
            ProgressTotal::Duration(Duration::from_secs(100)),
            50_000_000,
            Duration::from_secs(10),
        );
        assert_eq!(l, " 10.0%  10.0 s  50000000 msgs  5.00 Mmsg/s  ETA 1m30s");
        let l = progress_line(ProgressTotal::Iterations(10), 0, Duration::ZERO);
        assert_eq!(l, "  0.0%  0.0 s  0 msgs  0 msg/s  ETA ?");
    }
}
