//! Helpers of the tests that run `iwarp` processes on DPDK ports in network namespaces:
//! root checks (a failure under `CI=true`), namespaces and temporary directories removed
//! when dropped, child processes with their output.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const IWARP: &str = env!("CARGO_BIN_EXE_iwarp");

pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Whether the test can run here; under CI it must.
pub fn can_run() -> bool {
    let why = if !running_as_root() {
        "not root"
    } else if Command::new("ip").arg("-V").output().is_err() {
        "the `ip` command (iproute2) is not installed"
    } else {
        return true;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("DPDK process tests cannot run under CI: {why}");
    }
    eprintln!("skipped: {why} (the DPDK process tests need root and iproute2)");
    false
}

pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A network namespace, deleted (with its devices) when dropped.
pub struct Netns(pub String);

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("iwarp-2p-{tag}-{}", std::process::id());
        run("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn ip(&self, args: &[&str]) {
        let mut a = vec!["-n", &self.0];
        a.extend_from_slice(args);
        run("ip", &a);
    }

    /// A bridge `br` with one end of each veth pair `(a, b)` on it (`b`), all quiet and up:
    /// the DPDK processes take the `a` ends.
    pub fn bridge_with_veths(&self, br: &str, pairs: &[(&str, &str)]) {
        self.ip(&["link", "add", br, "type", "bridge"]);
        self.quiet(br);
        for &(a, b) in pairs {
            self.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
            self.quiet(a);
            self.quiet(b);
            self.ip(&["link", "set", b, "master", br]);
        }
        self.ip(&["link", "set", br, "up"]);
        for &(a, b) in pairs {
            self.ip(&["link", "set", a, "up"]);
            self.ip(&["link", "set", b, "up"]);
        }
    }

    /// Turns IPv6 off for `dev`, so the kernel sends no router solicitations or DAD probes
    /// into the link the DPDK processes own.
    pub fn quiet(&self, dev: &str) {
        let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
        let _ = Command::new("ip")
            .args(["netns", "exec", &self.0, "sysctl", "-q", "-w", &key])
            .output();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// A temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("iwarp-2p-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed when dropped.
pub struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    all: Vec<String>,
}

impl Proc {
    pub fn spawn(ns: Option<&Netns>, args: &[&str]) -> Proc {
        Proc::spawn_program(ns, IWARP, args)
    }

    /// Runs `program` (in `ns`, if given) with `args`.
    pub fn spawn_program(ns: Option<&Netns>, program: &str, args: &[&str]) -> Proc {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.0, program]);
                c
            }
            None => Command::new(program),
        };
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
        let (tx, rx) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Proc {
            child,
            lines: rx,
            all: Vec::new(),
        }
    }

    /// The process id (of `ip netns exec`, which execs the program: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has ended.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for a line containing `what`.
    pub fn expect_line(&mut self, what: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.all.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!(
                        "process ended before printing {what:?}:\n{}",
                        self.all.join("\n")
                    )
                }
            }
        }
        panic!("no {what:?} within {timeout:?}:\n{}", self.all.join("\n"));
    }

    /// Waits for the exit (at most `timeout`) and returns (success, all output).
    pub fn finish(mut self, timeout: Duration) -> (bool, String) {
        let end = Instant::now() + timeout;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break Some(s);
            }
            if Instant::now() > end {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Collect what the reader threads still have.
        std::thread::sleep(Duration::from_millis(50));
        while let Ok(l) = self.lines.try_recv() {
            self.all.push(l);
        }
        let out = self.all.join("\n");
        match status {
            Some(s) if s.success() => (true, out),
            Some(s) => {
                use std::os::unix::process::ExitStatusExt;
                let how = match (s.code(), s.signal()) {
                    (Some(c), _) => format!("exit status {c}"),
                    (None, Some(sig)) => format!("killed by signal {sig}"),
                    _ => format!("{s}"),
                };
                (false, format!("{out}\n({how})"))
            }
            None => (false, format!("{out}\n(timed out after {timeout:?})")),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
