//! The fused kernels against memcpy, crc-fast's CRC32c alone, and "memcpy, then crc-fast,
//! then a plain sum" (what the fused pass replaces), at a 1500-MTU TCP payload with MPA
//! framing (1454), a 9000-MTU one (8954) and a 64 KiB segment (64768).
//!
//! `cargo bench -p fastpath --bench kernels` (optionally `-- <rounds> [<name filter>
//! [<destination offset>]]`; the source starts at a page, the destination at the given
//! offset into a page, 0 by default).
//! Each figure is the best of the rounds, in GiB/s of the run's length; a round runs each
//! case in turn, enough calls to take about a millisecond, so that every case sees the same
//! machine (a shared VM's speed drifts). Source and destination stay in cache.

use std::hint::black_box;
use std::time::{Duration, Instant};

use fastpath::kernels::{self, Kernel};

const SIZES: [usize; 3] = [1454, 8954, 64768];

/// Calls of `f` that take about a millisecond.
fn calibrate(f: &mut dyn FnMut()) -> u64 {
    let mut iters = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        if t.elapsed() > Duration::from_micros(1000) {
            return iters;
        }
        iters *= 2;
    }
}

/// Seconds per call of `iters` calls.
fn time(iters: u64, f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_secs_f64() / iters as f64
}

fn crc_fast(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

type Case<'a> = (String, Box<dyn FnMut(&mut [u8], &[u8]) + 'a>);

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let filter = args.next().unwrap_or_default();
    let shift: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let max = *SIZES.iter().max().unwrap();
    // One buffer: the source at a page boundary, the destination `shift` octets past a
    // later one (how the two relate modulo 4096 matters to the loads after stores).
    let page = 4096;
    let mut buf = vec![0u8; 2 * max + 4 * page];
    let base = buf.as_ptr().align_offset(page);
    let dst_at = base + max.next_multiple_of(page) + page + shift % page;
    let (head, tail) = buf.split_at_mut(dst_at);
    let src = &mut head[base..base + max];
    for (i, b) in src.iter_mut().enumerate() {
        *b = ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    }
    let src = &*src;
    let dst = &mut tail[..max];
    let mut out = Vec::new();

    let mut cases: Vec<Case> = vec![
        ("memcpy".into(), Box::new(|d, s| d.copy_from_slice(s))),
        (
            "crc-fast CRC".into(),
            Box::new(|_, s| {
                black_box(crc_fast(s));
            }),
        ),
        (
            "memcpy + crc-fast + plain sum".into(),
            Box::new(|d, s| {
                d.copy_from_slice(s);
                black_box(crc_fast(d));
                black_box(kernels::sum_scalar(d));
            }),
        ),
    ];
    for k in Kernel::all_available() {
        cases.push((
            format!("{} crc32c_append", k.name()),
            Box::new(move |_, s| {
                black_box(k.crc32c_append(0, s));
            }),
        ));
        cases.push((
            format!("{} crc32c_sum", k.name()),
            Box::new(move |_, s| {
                black_box(k.crc32c_sum(0, s));
            }),
        ));
        cases.push((
            format!("{} copy_crc32c_sum", k.name()),
            Box::new(move |d, s| {
                black_box(k.copy_crc32c_sum(d, s, 0));
            }),
        ));
    }
    cases.push((
        "append_crc32c_sum (reused Vec)".into(),
        Box::new(|_, s| {
            out.clear();
            black_box(kernels::append_crc32c_sum(&mut out, s, 0));
        }),
    ));
    cases.retain(|c| c.0.contains(&filter));

    println!(
        "fastpath kernels: GiB/s, best of {rounds} rounds (the cases in turn each round); \
         destination {shift} octets past a page; best kernel: {}",
        Kernel::best().name()
    );
    print!("{:<36}", "");
    for n in SIZES {
        print!("{n:>10}");
    }
    println!();
    // results[case][size]
    let mut results = vec![vec![0f64; SIZES.len()]; cases.len()];
    for (j, &n) in SIZES.iter().enumerate() {
        let (s, d) = (&src[..n], &mut dst[..n]);
        let iters: Vec<u64> = cases
            .iter_mut()
            .map(|c| calibrate(&mut || (c.1)(black_box(&mut *d), black_box(s))))
            .collect();
        let mut best = vec![f64::MAX; cases.len()];
        for _ in 0..rounds {
            for (i, c) in cases.iter_mut().enumerate() {
                let t = time(iters[i], &mut || (c.1)(black_box(&mut *d), black_box(s)));
                best[i] = best[i].min(t);
            }
        }
        for (i, b) in best.iter().enumerate() {
            results[i][j] = n as f64 / b / (1u64 << 30) as f64;
        }
    }
    for (c, r) in cases.iter().zip(&results) {
        print!("{:<36}", c.0);
        for x in r {
            print!("{x:>10.2}");
        }
        println!();
    }

    let get = |name: &str| cases.iter().position(|c| c.0 == name).map(|i| &results[i]);
    let fused = get(&format!("{} copy_crc32c_sum", Kernel::best().name()));
    for (what, other) in [
        ("crc-fast CRC", get("crc-fast CRC")),
        ("reference", get("memcpy + crc-fast + plain sum")),
    ] {
        if let (Some(a), Some(b)) = (fused, other) {
            print!("{:<36}", format!("best copy_crc32c_sum / {what}"));
            for (a, b) in a.iter().zip(b) {
                print!("{:>10.2}", a / b);
            }
            println!();
        }
    }
}
