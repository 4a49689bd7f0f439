//! The resident set of a process (`VmRSS` in `/proc/PID/status`), in octets; 0 when it
//! cannot be read. Shared by the tests and benchmarks that bound memory.

#![allow(dead_code)]

/// Resident octets of process `pid` (`None`: this one).
pub fn rss_of(pid: Option<u32>) -> u64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}
