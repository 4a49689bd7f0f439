//! Aggregate RDMA Write bandwidth of 8 QPs (`-q 8`, 64 KiB messages) on 1 and on 2 cores
//! per node, in one run, and the per-core efficiency: (aggregate / cores) as a ratio to
//! the one-core aggregate (1.0 is linear scaling).
//!
//! * The embedded default (both nodes in this process over the multi-queue in-memory
//!   wire, `--cores N`): each core on a thread that only polls, each QP's client and the
//!   server on threads of their own.
//! * With `--features dpdk`: two `iwarp` processes over `net_memif`, the port with N queue
//!   pairs polled by N lcores on each side (`iwarp serve` and `iwarp bench -q 8`).
//!
//! Each configuration runs `ROUNDS` times, alternating, and the median is reported. The
//! machine's CPUs bound what the ratio can show: 2 cores per node are 4 polling threads
//! (plus the consumers) in one process, or in two processes; on a 2-CPU machine they share
//! the CPUs, so the efficiency there measures the sharing, not the design (see the
//! closing note of issue 14 for what the design predicts with a CPU per core).
//!
//! `cargo bench --bench cores` (`--features dpdk` for memif); `BENCH_QUICK=1` for a smoke
//! run.

mod common;
use common::{median, quick};

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::Sample;

const QPS: usize = 8;

fn embedded(cores: usize, iters: u64) -> Result<f64, String> {
    let o = BenchOptions {
        test: Test::WriteBw,
        sizes: vec![65536],
        length: Length::Iterations(iters),
        qps: QPS,
        cores,
        ..BenchOptions::default()
    };
    let out = run_embedded(&o).map_err(|e| e.to_string())?;
    match out.report.samples[0] {
        Sample::Bw(b) => Ok(b.avg_mib_s),
        Sample::Lat(_) => Err("not a bandwidth sample".into()),
    }
}

fn report(what: &str, one: &[f64], two: &[f64]) {
    let (m1, m2) = (median(one.to_vec()), median(two.to_vec()));
    println!(
        "{what}: write-bw -q {QPS} -s 65536, median of {} runs",
        one.len()
    );
    println!("  1 core per node : {m1:10.1} MiB/s aggregate  (runs {one:.0?})");
    println!("  2 cores per node: {m2:10.1} MiB/s aggregate  (runs {two:.0?})");
    println!(
        "  2 cores / 1 core: {:.3}x; per-core efficiency {:.3}",
        m2 / m1,
        m2 / 2.0 / m1
    );
}

#[cfg(feature = "dpdk")]
mod memif {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    fn config(dir: &Path, role: &str, last: u8, queues: u16) -> PathBuf {
        let sock = dir.join("memif.sock");
        // One queue: the two processes' lcores on different CPUs (as memif_vs_mem); two:
        // lcores 0 and 1 on each side.
        let lcores = if queues == 1 {
            let (dp, ctl) = if role == "server" { (1, 0) } else { (0, 1) };
            format!("[[lcores]]\nid = {dp}\nports = [\"m0\"]\n\n[control]\nlcore = {ctl}\n")
        } else {
            (0..queues)
                .map(|i| format!("[[lcores]]\nid = {i}\nports = [\"m0\"]\n\n"))
                .collect()
        };
        let text = format!(
            "[[ports]]\nname = \"m0\"\ndriver = \"memif\"\nrole = \"{role}\"\nsocket = \"{}\"\n\
             id = 0\nmac = \"02:00:00:4e:00:0{last}\"\nipv4 = \"10.80.0.{last}/24\"\n\
             rx_queues = {queues}\ntx_queues = {queues}\n\n{lcores}\n\
             [[listeners]]\ntcp_port = 18515\nport_name = \"m0\"\n\n\
             [tcp]\nrto_min = \"5ms\"\nrto_initial = \"200ms\"\n",
            sock.display()
        );
        let p = dir.join(format!("{role}-{queues}.toml"));
        std::fs::write(&p, text).expect("config");
        p
    }

    /// One `write-bw -q QPS` run between two processes with `queues` queue pairs each.
    pub fn run(dir: &Path, queues: u16, iters: u64) -> Result<f64, String> {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_iwarp"));
        let server_cfg = config(dir, "server", 2, queues);
        let client_cfg = config(dir, "client", 1, queues);
        let mut server = Command::new(&bin)
            .args(["serve", "--config"])
            .arg(&server_cfg)
            .args(["--count", &super::QPS.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning the server: {e}"))?;
        std::thread::sleep(Duration::from_millis(1500));
        let out = Command::new(&bin)
            .args(["bench", "write-bw", "--config"])
            .arg(&client_cfg)
            .args(["--peer", "10.80.0.2", "--json", "-s", "65536", "-q"])
            .arg(super::QPS.to_string())
            .args(["-n", &iters.to_string()])
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running the client: {e}"));
        let _ = server.kill();
        let _ = server.wait();
        let out = out?;
        if !out.status.success() {
            return Err(format!(
                "client failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("client output: {e}"))?;
        json["samples"][0]["avg_mib_s"]
            .as_f64()
            .ok_or_else(|| "no bandwidth in the client's report".into())
    }
}

fn main() {
    let quick = quick();
    let rounds = if quick { 1 } else { 5 };
    let iters: u64 = if quick { 200 } else { 5_000 };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (cores, out) in [(1, &mut one), (2, &mut two)] {
            match embedded(cores, iters) {
                Ok(v) => out.push(v),
                Err(e) => {
                    eprintln!("embedded --cores {cores}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    report("embedded default", &one, &two);
    #[cfg(feature = "dpdk")]
    {
        let dir = std::env::temp_dir().join(format!("iwarp-cores-bench-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let iters = if quick { 100 } else { 1_000 };
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (queues, out) in [(1u16, &mut one), (2, &mut two)] {
                match memif::run(&dir, queues, iters) {
                    Ok(v) => out.push(v),
                    Err(e) => {
                        eprintln!("memif with {queues} queue pair(s): {e}");
                        let _ = std::fs::remove_dir_all(&dir);
                        std::process::exit(1);
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        report("two processes over memif", &one, &two);
    }
}
