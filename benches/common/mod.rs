//! What the benchmarks share: the `BENCH_QUICK` switch and the median of their rounds.

#![allow(dead_code)] // each benchmark uses what it needs

/// Whether `BENCH_QUICK` asks for a smoke run: set, and neither empty nor `0`.
pub fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The median of `v`: the middle value, the mean of the middle two for an even count,
/// NaN for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
