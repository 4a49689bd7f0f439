//! CRC32c, FPDU framing and FPDU deframing throughput, each reported as a ratio to memcpy
//! of the same bytes measured in the same run.
//!
//! `cargo bench --bench crc_framing` (add `-- --quick` for a short run). Each figure is the
//! best of several timed rounds, so that another process on the machine inflates none of
//! them; the ratio is what to compare across machines.

use std::hint::black_box;
use std::time::{Duration, Instant};

use wire::crc::crc32c;
use wire::mpa::deframe::Deframer;
use wire::mpa::fpdu::{mulpdu, FpduMode, Framer};

/// Bytes moved per timed round.
const ROUND_BYTES: usize = 64 << 20;

struct Bench {
    rounds: usize,
}

impl Bench {
    /// Best throughput in GiB/s of `f`, which processes `bytes` octets per call.
    fn gibps(&self, bytes: usize, mut f: impl FnMut()) -> f64 {
        let calls = (ROUND_BYTES / bytes).max(1);
        // Warm up caches and the branch predictor.
        for _ in 0..calls.min(64) {
            f();
        }
        let mut best = Duration::MAX;
        for _ in 0..self.rounds {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            best = best.min(t.elapsed());
        }
        (calls * bytes) as f64 / best.as_secs_f64() / (1u64 << 30) as f64
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let bench = Bench {
        rounds: if quick { 3 } else { 10 },
    };
    println!(
        "{:<34} {:>8} {:>10} {:>10} {:>8}",
        "case", "bytes", "GiB/s", "memcpy", "ratio"
    );
    let row = |name: &str, bytes: usize, gibps: f64, memcpy: f64| {
        println!(
            "{name:<34} {bytes:>8} {gibps:>10.2} {memcpy:>10.2} {:>8.3}",
            gibps / memcpy
        );
    };

    for &size in &[64usize, 1454, 8954, 65536] {
        let src: Vec<u8> = (0..size).map(|i| (i * 131 + 7) as u8).collect();
        let mut dst = vec![0u8; size];
        let memcpy = bench.gibps(size, || {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        });
        row("memcpy", size, memcpy, memcpy);
        let crc = bench.gibps(size, || {
            black_box(crc32c(black_box(&src)));
        });
        row("crc32c", size, crc, memcpy);
    }

    // Framing and deframing: ULPDUs of MULPDU for a 1500 and a 9000 MTU, and the largest.
    for &(label, emss) in &[("mtu1500", 1460usize), ("mtu9000", 8960), ("max", 65535)] {
        for mode in [
            FpduMode {
                markers: false,
                crc: true,
            },
            FpduMode {
                markers: true,
                crc: true,
            },
            FpduMode {
                markers: false,
                crc: false,
            },
        ] {
            let len = mulpdu(emss, mode.markers);
            let ulpdu: Vec<u8> = (0..len).map(|i| (i * 17 + 3) as u8).collect();
            let mut dst = vec![0u8; len];
            let memcpy = bench.gibps(len, || {
                dst.copy_from_slice(black_box(&ulpdu));
                black_box(&mut dst);
            });
            let tag = format!(
                "{label} {}{}",
                if mode.crc { "crc" } else { "nocrc" },
                if mode.markers { "+markers" } else { "" }
            );

            let mut framer = Framer::new(mode);
            let mut out = Vec::with_capacity(len + 1024);
            let frame = bench.gibps(len, || {
                out.clear();
                framer.frame(black_box(&ulpdu), &mut out).unwrap();
                black_box(&out);
            });
            row(&format!("frame {tag}"), len, frame, memcpy);

            // A stream of 64 FPDUs, deframed into a copy of each ULPDU (as DDP placement
            // would copy), fed in MSS-sized chunks as TCP would hand them over.
            let mut framer = Framer::new(mode);
            let mut stream = Vec::new();
            for _ in 0..64 {
                framer.frame(&ulpdu, &mut stream).unwrap();
            }
            let chunk = emss.min(stream.len());
            let mut sink = vec![0u8; len];
            let deframe = bench.gibps(len * 64, || {
                let mut d = Deframer::new(mode);
                for c in stream.chunks(chunk) {
                    d.push(c, |f| sink[..f.ulpdu.len()].copy_from_slice(f.ulpdu))
                        .unwrap();
                }
                black_box(&sink);
            });
            row(&format!("deframe+copy {tag}"), len, deframe, memcpy);
        }
    }
}
