//! Counters of a deployment in the Prometheus text exposition format (version 0.0.4),
//! served over HTTP on a management address (`[control] metrics` in the deployment file,
//! off by default): `GET /metrics`.
//!
//! The poll-mode core never blocks for this: the thread that drives it takes a
//! [`Snapshot`] now and then ([`Metrics::publish`]), and the exporter's own thread
//! ([`Metrics::serve`], a kernel socket) answers scrapes from the last one. A scraper costs
//! bounded time and memory: one connection at a time, a request of at most
//! [`MAX_REQUEST`] octets read within [`REQUEST_TIMEOUT`], then the connection is closed.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use control::verbs::{AlignmentStats, Core, CoreGauges, CoreStats, PortStats};

/// Longest request line and headers read from a scraper.
pub const MAX_REQUEST: usize = 8192;
/// Longest wait for a scraper's request (and for the answer to be taken).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// The port's.
    pub port: PortStats,
    /// The core's.
    pub core: CoreStats,
    /// How full the core is.
    pub gauges: CoreGauges,
    /// TCP segmentation and retransmission.
    pub tcp: AlignmentStats,
    /// Ethernet, ARP and IPv4.
    pub net: dataplane::net::NetStats,
    /// Sessions admitted, rejected, running now, and the memory they hold.
    pub sessions: SessionCounters,
}

/// What `iwarp serve` counts of its sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionCounters {
    /// Admitted since the start.
    pub admitted: u64,
    /// Rejected (budgets, bad hellos) since the start.
    pub rejected: u64,
    /// Finished since the start.
    pub finished: u64,
    /// Finished with an error or wrong octets.
    pub failed: u64,
    /// Running now.
    pub active: u64,
    /// Octets their registrations hold now.
    pub memory_octets: u64,
}

impl Snapshot {
    /// The core's counters now; `sessions` from the caller.
    pub fn of(core: &Core, sessions: SessionCounters) -> Snapshot {
        Snapshot::of_cores(&crate::deploy::CoreSnapshot::of_core(core), sessions)
    }

    /// The counters of a node's cores (summed) and its sessions.
    pub fn of_cores(c: &crate::deploy::CoreSnapshot, sessions: SessionCounters) -> Snapshot {
        Snapshot {
            port: c.port,
            core: c.stats,
            gauges: c.gauges,
            tcp: c.alignment,
            net: c.net,
            sessions,
        }
    }
}

/// The text exposition of `s`, every metric with its `# HELP` and `# TYPE`, labelled
/// with the port's name.
pub fn render(s: &Snapshot, port: &str) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(out, "# HELP iwarp_{name} {help}");
        let _ = writeln!(out, "# TYPE iwarp_{name} {kind}");
        let _ = writeln!(out, "iwarp_{name}{{port=\"{port}\"}} {v}");
    };
    let c = "counter";
    let g = "gauge";
    let p = &s.port;
    metric("port_rx_frames_total", c, "Frames received.", p.rx_frames);
    metric("port_rx_octets_total", c, "Octets received.", p.rx_octets);
    metric("port_tx_frames_total", c, "Frames sent.", p.tx_frames);
    metric("port_tx_octets_total", c, "Octets sent.", p.tx_octets);
    metric(
        "port_rx_dropped_total",
        c,
        "Frames dropped on receive.",
        p.rx_dropped,
    );
    metric(
        "port_tx_dropped_total",
        c,
        "Frames the port refused.",
        p.tx_dropped,
    );
    metric(
        "port_tx_checksum_offloaded_total",
        c,
        "Frames whose checksums the device computed.",
        p.tx_checksum_offloaded,
    );
    metric(
        "port_rx_checksum_good_total",
        c,
        "Frames the device found good.",
        p.rx_checksum_good,
    );
    metric(
        "port_rx_checksum_bad_total",
        c,
        "Frames the device found bad.",
        p.rx_checksum_bad,
    );
    metric(
        "port_tx_zero_copy_total",
        c,
        "Frames sent without copying their payload.",
        p.tx_zero_copy,
    );
    metric(
        "port_tx_tso_frames_total",
        c,
        "Frames handed to the device to segment (TCP segmentation offload).",
        p.tx_tso_frames,
    );
    metric(
        "port_tx_tso_segments_total",
        c,
        "TCP segments the device cut those frames into.",
        p.tx_tso_segments,
    );
    let k = &s.core;
    metric("core_polls_total", c, "Poll-mode core iterations.", k.polls);
    metric(
        "tcp_unmatched_segments_total",
        c,
        "TCP segments for no connection or listener.",
        k.unmatched_segments,
    );
    metric(
        "tcp_bad_segments_total",
        c,
        "TCP segments that failed to parse.",
        k.bad_segments,
    );
    metric(
        "mpa_fpdus_received_total",
        c,
        "FPDUs delivered to queue pairs.",
        k.fpdus_received,
    );
    metric(
        "mpa_fpdus_placed_early_total",
        c,
        "Read Response FPDUs of out-of-order segments placed before the gap filled.",
        k.fpdus_placed_early,
    );
    metric(
        "mpa_fpdus_sent_total",
        c,
        "FPDUs queued to TCP.",
        k.fpdus_sent,
    );
    metric(
        "mpa_records_sent_total",
        c,
        "TCP records the FPDUs were queued in (small FPDUs share one).",
        k.records_sent,
    );
    metric(
        "tcp_tx_failures_total",
        c,
        "Segments the port or ARP could not take.",
        k.tx_failures,
    );
    metric(
        "tcp_accepted_total",
        c,
        "Passive opens that reached ESTABLISHED.",
        k.accepted,
    );
    metric(
        "tcp_connected_total",
        c,
        "Active opens started.",
        k.connected,
    );
    metric(
        "tcp_syn_cookies_sent_total",
        c,
        "SYN cookies sent.",
        k.syn_cookies_sent,
    );
    metric(
        "tcp_syn_cookies_accepted_total",
        c,
        "Connections made from SYN cookies.",
        k.syn_cookies_accepted,
    );
    metric(
        "tcp_refused_total",
        c,
        "SYNs and connects refused for want of room.",
        k.refused,
    );
    metric(
        "mpa_startup_timeouts_total",
        c,
        "MPA startups reset at the startup timeout.",
        k.startup_timeouts,
    );
    metric(
        "mpa_startup_overflows_total",
        c,
        "MPA startups reset for too many octets.",
        k.startup_overflows,
    );
    metric(
        "tcp_linger_resets_total",
        c,
        "Graceful closes reset at the linger time.",
        k.linger_resets,
    );
    metric(
        "tcp_time_wait_evicted_total",
        c,
        "TIME-WAIT entries forgotten early.",
        k.time_wait_evicted,
    );
    metric(
        "core_events_deferred_total",
        c,
        "Events held back by a full control channel.",
        k.events_deferred,
    );
    metric(
        "core_recovery_bursts_total",
        c,
        "Receive steps (of 4 frames, each followed by transmissions) while a connection recovered from loss.",
        k.recovery_bursts,
    );
    metric(
        "core_window_steps_total",
        c,
        "Receive steps (each followed by transmissions) of polls whose burst could hold more than a quarter of a receive window (jumbo frames, small buffers).",
        k.window_steps,
    );
    let n = &s.net;
    metric(
        "net_arp_requests_sent_total",
        c,
        "ARP requests sent.",
        n.arp_requests_sent,
    );
    metric(
        "net_arp_replies_sent_total",
        c,
        "ARP replies sent.",
        n.arp_replies_sent,
    );
    metric(
        "net_echo_replies_sent_total",
        c,
        "ICMP echo replies sent.",
        n.echo_replies_sent,
    );
    metric(
        "net_tx_unresolved_total",
        c,
        "TCP segments whose next hop's MAC was not known yet (held for the ARP reply).",
        n.tx_unresolved,
    );
    metric(
        "net_held_sent_total",
        c,
        "Held TCP segments sent once their next hop was resolved.",
        n.held_sent,
    );
    metric(
        "net_held_dropped_total",
        c,
        "Held TCP segments dropped (replaced, too old, or no room).",
        n.held_dropped,
    );
    metric(
        "net_rx_dropped_total",
        c,
        "Received frames dropped (malformed, not for us, bad checksum, fragment, \
         unsupported, bad source, or no room to answer).",
        n.rx_dropped(),
    );
    let t = &s.tcp;
    metric(
        "tcp_segments_new_whole_total",
        c,
        "New-data segments holding whole FPDUs.",
        t.new_whole,
    );
    metric(
        "tcp_segments_new_split_total",
        c,
        "New-data segments splitting an FPDU.",
        t.new_split,
    );
    metric(
        "tcp_segments_rtx_whole_total",
        c,
        "Retransmitted segments holding whole FPDUs.",
        t.rtx_whole,
    );
    metric(
        "tcp_segments_rtx_split_total",
        c,
        "Retransmitted segments splitting an FPDU.",
        t.rtx_split,
    );
    metric(
        "tcp_retransmitted_octets_total",
        c,
        "Payload octets retransmitted.",
        t.retransmitted_octets,
    );
    metric(
        "tcp_timeouts_total",
        c,
        "Retransmission timeouts.",
        t.timeouts,
    );
    metric(
        "tcp_fast_retransmits_total",
        c,
        "Fast retransmits.",
        t.fast_retransmits,
    );
    metric(
        "tcp_spurious_timeouts_total",
        c,
        "Retransmission timeouts found spurious (Eifel detection, RFC 3522) and undone.",
        t.spurious_timeouts,
    );
    metric(
        "tcp_dsack_octets_total",
        c,
        "Octets the peer reported receiving twice (D-SACK, RFC 2883).",
        t.dsack_octets,
    );
    metric(
        "tcp_tail_loss_probes_total",
        c,
        "Tail loss probes (RFC 8985).",
        t.tail_loss_probes,
    );
    metric(
        "tcp_tail_loss_probe_repairs_total",
        c,
        "Tail loss probes that repaired a loss nothing else saw (RFC 8985 section 7.4).",
        t.tail_loss_probe_repairs,
    );
    metric(
        "tcp_lost_retransmissions_total",
        c,
        "Retransmissions found lost in SACK recovery and sent again before the RTO.",
        t.lost_retransmissions,
    );
    metric(
        "tcp_recovery_microseconds_total",
        c,
        "Time the connections spent in loss recovery (fast or SACK recovery).",
        t.recovery_us,
    );
    metric(
        "tcp_rtt_samples_total",
        c,
        "RTT measurements taken (RFC 6298).",
        t.rtt_samples,
    );
    metric(
        "tcp_rtt_microseconds_total",
        c,
        "Sum of the RTT measurements (divided by tcp_rtt_samples_total: the mean RTT).",
        t.rtt_sum_us,
    );
    metric(
        "core_longest_poll_gap_microseconds",
        g,
        "The longest time between two polls of the core (a thread that did not run).",
        t.longest_poll_gap_us,
    );
    let q = &s.gauges;
    metric(
        "connections",
        g,
        "Connections in the table.",
        q.connections as u64,
    );
    metric(
        "connections_half_open",
        g,
        "Connections in SYN-RECEIVED.",
        q.half_open as u64,
    );
    metric(
        "connections_startup",
        g,
        "Connections in the MPA startup.",
        q.startup as u64,
    );
    metric(
        "connections_time_wait",
        g,
        "Connections in TIME-WAIT.",
        q.time_wait as u64,
    );
    metric(
        "core_outbox",
        g,
        "Events waiting for the control thread.",
        q.outbox as u64,
    );
    metric("core_timers", g, "Timers armed.", q.timers as u64);
    let e = &s.sessions;
    metric(
        "sessions_admitted_total",
        c,
        "Bench sessions admitted.",
        e.admitted,
    );
    metric(
        "sessions_rejected_total",
        c,
        "Bench sessions rejected.",
        e.rejected,
    );
    metric(
        "sessions_finished_total",
        c,
        "Bench sessions finished.",
        e.finished,
    );
    metric(
        "sessions_failed_total",
        c,
        "Bench sessions that failed or found wrong octets.",
        e.failed,
    );
    metric("sessions_active", g, "Bench sessions running.", e.active);
    metric(
        "sessions_memory_octets",
        g,
        "Octets the sessions' registrations hold.",
        e.memory_octets,
    );
    out
}

/// The exporter: the last [`Snapshot`] and the thread that serves it.
#[derive(Debug, Clone)]
pub struct Metrics {
    last: Arc<Mutex<Snapshot>>,
    port: Arc<str>,
    stop: Arc<AtomicBool>,
}

impl Metrics {
    /// An exporter for the port named `port`, with empty counters.
    pub fn new(port: &str) -> Metrics {
        Metrics {
            last: Arc::new(Mutex::new(Snapshot::default())),
            port: port.into(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes `s` what scrapes see.
    pub fn publish(&self, s: Snapshot) {
        if let Ok(mut last) = self.last.lock() {
            *last = s;
        }
    }

    /// The text a scrape gets now.
    pub fn text(&self) -> String {
        let s = self.last.lock().map(|g| *g).unwrap_or_default();
        render(&s, &self.port)
    }

    /// Binds `addr` (a kernel socket) and answers `GET /metrics` there on a thread of its
    /// own until [`Metrics::stop`]. Returns the address bound (`addr` with port 0 picks
    /// one) and the thread.
    pub fn serve(&self, addr: SocketAddr) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let bound = listener.local_addr()?;
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || me.accept_loop(&listener))?;
        Ok((bound, h))
    }

    /// Ends the exporter's thread (within a tenth of a second).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn accept_loop(&self, listener: &TcpListener) {
        while !self.stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => self.answer(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// One scrape: the request (bounded in size and time), the answer, the close.
    fn answer(&self, mut stream: TcpStream) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
        let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
        let mut req = Vec::with_capacity(512);
        let mut buf = [0u8; 1024];
        while req.len() < MAX_REQUEST && !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n.min(MAX_REQUEST - req.len())]),
            }
        }
        let line = req.split(|&b| b == b'\r').next().unwrap_or(&[]);
        let (status, body, kind) = if line.starts_with(b"GET /metrics ") {
            ("200 OK", self.text(), "text/plain; version=0.0.4")
        } else {
            ("404 Not Found", "GET /metrics\n".to_string(), "text/plain")
        };
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn scrapes_see_the_last_snapshot() {
        let m = Metrics::new("p0");
        let (addr, h) = m.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut s = Snapshot::default();
        s.port.rx_frames = 42;
        s.core.syn_cookies_sent = 7;
        s.gauges.connections = 3;
        s.sessions.admitted = 2;
        s.net.held_sent = 5;
        s.core.recovery_bursts = 9;
        s.core.window_steps = 11;
        s.tcp.longest_poll_gap_us = 1234;
        s.tcp.recovery_us = 56;
        s.tcp.rtt_samples = 4;
        s.tcp.rtt_sum_us = 78;
        m.publish(s);
        let r = scrape(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        let body = r.split("\r\n\r\n").nth(1).unwrap();
        // Every sample line is `name{port="p0"} value`, each with its HELP and TYPE.
        let mut samples = std::collections::HashMap::new();
        for l in body.lines() {
            if l.starts_with('#') {
                continue;
            }
            let (name, v) = l.split_once(' ').unwrap();
            let name = name.strip_suffix("{port=\"p0\"}").unwrap();
            assert!(body.contains(&format!("# TYPE {name} ")), "{name}");
            samples.insert(name.to_string(), v.parse::<u64>().unwrap());
        }
        assert_eq!(samples["iwarp_port_rx_frames_total"], 42);
        assert_eq!(samples["iwarp_tcp_syn_cookies_sent_total"], 7);
        assert_eq!(samples["iwarp_connections"], 3);
        assert_eq!(samples["iwarp_sessions_admitted_total"], 2);
        assert_eq!(samples["iwarp_net_held_sent_total"], 5);
        assert_eq!(samples["iwarp_core_recovery_bursts_total"], 9);
        assert_eq!(samples["iwarp_core_window_steps_total"], 11);
        assert_eq!(samples["iwarp_core_longest_poll_gap_microseconds"], 1234);
        assert_eq!(samples["iwarp_tcp_recovery_microseconds_total"], 56);
        assert_eq!(samples["iwarp_tcp_rtt_samples_total"], 4);
        assert_eq!(samples["iwarp_tcp_rtt_microseconds_total"], 78);
        assert!(body.contains("# TYPE iwarp_core_longest_poll_gap_microseconds gauge"));
        assert!(samples.len() > 40);
        let r = scrape(addr, "GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        // A scraper that never finishes its request costs at most the timeout.
        let idle = TcpStream::connect(addr).unwrap();
        let t = std::time::Instant::now();
        let r = scrape(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(t.elapsed() < REQUEST_TIMEOUT + Duration::from_secs(1));
        drop(idle);
        m.stop();
        h.join().unwrap();
    }
}
