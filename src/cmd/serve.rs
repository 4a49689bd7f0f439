//! `iwarp serve --config FILE`: serves `iwarp bench` clients on a DPDK port, every
//! session verified, within the file's limits and budgets.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use control::verbs::{Core, ResponderConfig};
use iwarp::bench::server::{Budget, Server};
use iwarp::deploy::CoreSnapshot;
use iwarp::metrics::{Metrics, SessionCounters, Snapshot};
use iwarp::mpa;

/// How often the counters the exporter serves are refreshed.
const METRICS_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

use super::load_config;

/// `iwarp serve`'s arguments.
#[derive(Args)]
pub struct ServeArgs {
    /// The deployment file (TOML; see config/README.md).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The `[[ports]]` entry to serve on (default: the only port, or the listeners' port).
    #[arg(long, value_name = "NAME")]
    pub port_name: Option<String>,
    /// Exit after this many sessions (default: serve until killed).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// The listeners of the file on port `pname` (address `paddr`): TCP port and Responder
/// configuration (the file's `[mpa]` with the listener's overrides). The policy's `ird`
/// and `ord` are what this side offers: the most IRD and ORD its Replies grant (RFC 6581
/// 9.1; without them a Reply would grant up to 128). A listener's `private_data` is
/// refused: the bench session's Reply carries the session's buffer.
fn listeners_of(
    cfg: &appconfig::Config,
    pname: &str,
    paddr: Ipv4Addr,
) -> Result<Vec<(u16, ResponderConfig)>, String> {
    let mut out = Vec::new();
    for (i, l) in cfg.listeners.iter().enumerate() {
        if !(l.port_name.as_deref().is_none_or(|n| n == pname)
            && l.address.is_none_or(|ad| ad == paddr))
        {
            continue;
        }
        if l.private_data.is_some() {
            return Err(format!(
                "listeners[{i}].private_data: iwarp serve cannot send it: the MPA Reply of \
                 a bench session carries the session's buffer (remove the key)"
            ));
        }
        let policy = match &l.mpa {
            Some(ov) => cfg.mpa.with_overrides(ov),
            None => cfg.mpa.clone(),
        };
        let mut rc = mpa::responder(&policy);
        rc.max_ird = policy.ird;
        rc.max_ord = policy.ord;
        out.push((l.tcp_port, rc));
    }
    Ok(out)
}

/// Runs `iwarp serve`: true when every session verified without error.
pub fn run(a: ServeArgs) -> Result<bool, String> {
    let cfg = load_config(&a.config)?;
    let name = a
        .port_name
        .clone()
        .or_else(|| cfg.listeners.iter().find_map(|l| l.port_name.clone()));
    let port = iwarp::deploy::select_port(&cfg, name.as_deref(), None)
        .map_err(|e| format!("{}: {e}", a.config.display()))?;
    let pname = cfg.ports[port].name.clone();
    let paddr = cfg.ports[port].ipv4.addr;
    let listeners =
        listeners_of(&cfg, &pname, paddr).map_err(|e| format!("{}: {e}", a.config.display()))?;
    if listeners.is_empty() {
        return Err(format!(
            "{}: no [[listeners]] entry on port {pname:?}",
            a.config.display()
        ));
    }
    let count = a.count;
    let budget = Budget::from_limits(&cfg.limits);
    let metrics_addr = cfg.control.metrics;
    // Without --port-name: every other port that has listeners is served too (an
    // appliance of several ports).
    let mut ports = vec![port];
    if a.port_name.is_none() {
        for (i, p) in cfg.ports.iter().enumerate() {
            if i != port
                && p.driver != appconfig::Driver::Mem
                && !listeners_of(&cfg, &p.name, p.ipv4.addr)
                    .map_err(|e| format!("{}: {e}", a.config.display()))?
                    .is_empty()
            {
                ports.push(i);
            }
        }
    }
    if ports.len() > 1 || cfg.ports[port].rx_queues > 1 {
        let mut served = Vec::new();
        for &i in &ports {
            let p = &cfg.ports[i];
            let ls = listeners_of(&cfg, &p.name, p.ipv4.addr)
                .map_err(|e| format!("{}: {e}", a.config.display()))?;
            served.push(Served {
                name: p.name.clone(),
                addr: p.ipv4.addr,
                memif: p.driver == appconfig::Driver::Memif,
                listeners: ls,
            });
        }
        let nodes = iwarp::deploy::open_ports(&cfg, &ports).map_err(|e| e.to_string())?;
        return serve_nodes(nodes, served, count, budget, metrics_addr);
    }
    let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
    let memif = cfg.ports[port].driver == appconfig::Driver::Memif;
    node.run(move |dev, mut core| -> Result<bool, String> {
        // The exporter answers from snapshots this thread takes: a scrape never stalls
        // the core.
        let metrics = match metrics_addr {
            Some(addr) => {
                let m = Metrics::new(&pname);
                let (bound, _thread) = m
                    .serve(addr)
                    .map_err(|e| format!("control.metrics: cannot listen on {addr}: {e}"))?;
                println!("metrics on http://{bound}/metrics");
                Some(m)
            }
            None => None,
        };
        let mut published = Instant::now();
        let mut sessions = SessionCounters::default();
        // `kill -USR1 PID`: a status line now.
        let status = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, status.clone())
            .map_err(|e| format!("cannot catch SIGUSR1: {e}"))?;
        let mut ls = Vec::new();
        for (tcp_port, rc) in listeners {
            let l = dev
                .listen(tcp_port, rc)
                .map_err(|e| format!("listening on {paddr}:{tcp_port}: {e}"))?;
            println!("listening on {paddr}:{tcp_port} ({pname})");
            ls.push(l);
        }
        print_setup(
            core.checksum_offload(),
            core.tx_zero_copy(),
            core.tso_max_payload(),
            core.limits(),
            &pname,
            &budget,
        );
        let mut server = Server::new(dev, ls, budget);
        let mut ok = true;
        let mut n = 0u64;
        let mut rejected = 0u64;
        let snapshot = |core: &Core, server: &Server, sessions: &mut SessionCounters| {
            let (admitted, rejected) = server.admissions();
            sessions.admitted = admitted;
            sessions.rejected = rejected;
            sessions.active = server.active() as u64;
            sessions.memory_octets = server.memory_in_use();
            Snapshot::of(core, *sessions)
        };
        while count.is_none_or(|c| n < c) {
            core.poll();
            server.step();
            if status.swap(false, Ordering::Relaxed) {
                print_status(
                    &CoreSnapshot::of(std::slice::from_ref(&core)),
                    &server,
                    &sessions,
                );
            }
            if let Some(m) = &metrics {
                if published.elapsed() >= METRICS_EVERY {
                    m.publish(snapshot(&core, &server, &mut sessions));
                    published = Instant::now();
                }
            }
            while let Some((peer, why)) = server.last_rejections.pop_front() {
                rejected += 1;
                println!("rejected {peer}: {why}");
                let _ = std::io::stdout().flush();
            }
            let Some(s) = server.take_finished() else {
                continue;
            };
            n += 1;
            ok &= report_session(n, &s, &mut sessions);
            if memif && server.active() == 0 {
                // The client exits now: let DPDK's memif tear down unpolled.
                iwarp::deploy::quiesce_memif(&core, iwarp::deploy::MEMIF_QUIESCE);
            }
        }
        // What the last sessions and any attackers left ends within the limits: wait for
        // the table to empty (keeping the sessions' close handshakes going), then say what
        // the core saw.
        let lim = *core.limits();
        let until = Instant::now() + lim.startup_timeout + lim.linger * 2;
        while core.connections() > 0 && Instant::now() < until {
            core.poll();
            server.step();
        }
        print_end(std::slice::from_ref(&core), &server, &pname, rejected);
        if let Some(m) = &metrics {
            m.publish(snapshot(&core, &server, &mut sessions));
            m.stop();
        }
        Ok(ok)
    })
    .map_err(|e| e.to_string())?
}

/// Prints a finished session and counts it; false when it failed or found wrong octets.
fn report_session(
    n: u64,
    s: &iwarp::bench::server::SessionOutcome,
    sessions: &mut SessionCounters,
) -> bool {
    sessions.finished += 1;
    let ok = match &s.result {
        Ok(r) => {
            println!(
                "session {n} from {}: {}, {} size(s), verified {} octets, {} wrong",
                s.peer,
                s.hello.test.name(),
                s.hello.sizes.len(),
                r.verified,
                r.errors
            );
            sessions.failed += u64::from(r.errors > 0);
            r.errors == 0
        }
        Err(e) => {
            println!("session {n} from {} failed: {e}", s.peer);
            sessions.failed += 1;
            false
        }
    };
    let _ = std::io::stdout().flush();
    ok
}

/// A port `iwarp serve` serves on, with its listeners.
struct Served {
    name: String,
    addr: Ipv4Addr,
    memif: bool,
    listeners: Vec<(u16, ResponderConfig)>,
}

/// `iwarp serve` on several ports, or a port of several queue pairs: every core polls
/// on its lcore and does nothing else (an lcore listed by several ports polls one queue
/// of each); this thread steps every session, whatever port and core its connection is
/// on, backing off when none has work. One budget covers every session.
fn serve_nodes(
    nodes: Vec<iwarp::deploy::Node>,
    served: Vec<Served>,
    count: Option<u64>,
    budget: Budget,
    metrics_addr: Option<std::net::SocketAddr>,
) -> Result<bool, String> {
    for n in &nodes {
        println!(
            "port {}: {} core(s) on lcores {:?} ({})",
            n.port_name,
            n.cores.len(),
            n.lcores,
            n.steering
        );
    }
    let label = served
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let names: Vec<String> = served.iter().map(|p| p.name.clone()).collect();
    let any_memif = served.iter().any(|p| p.memif);
    let (r, cores) = iwarp::deploy::run_nodes(
        nodes,
        move |devs, views| -> Result<(bool, Server, u64), String> {
            let metrics = match metrics_addr {
                Some(addr) => {
                    let m = Metrics::new(&label);
                    let (bound, _thread) = m
                        .serve(addr)
                        .map_err(|e| format!("control.metrics: cannot listen on {addr}: {e}"))?;
                    println!("metrics on http://{bound}/metrics");
                    Some(m)
                }
                None => None,
            };
            let status = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGUSR1, status.clone())
                .map_err(|e| format!("cannot catch SIGUSR1: {e}"))?;
            let mut ls = Vec::new();
            for ((dev, view), p) in devs.into_iter().zip(views).zip(served) {
                for (tcp_port, rc) in p.listeners {
                    let l = dev
                        .listen(tcp_port, rc)
                        .map_err(|e| format!("listening on {}:{tcp_port}: {e}", p.addr))?;
                    println!("listening on {}:{tcp_port} ({})", p.addr, p.name);
                    ls.push((dev.clone(), l));
                }
                print_setup(
                    view.checksum_offload(),
                    view.tx_zero_copy(),
                    view.tso_max_payload(),
                    view.limits(),
                    &p.name,
                    &budget,
                );
            }
            let mut server = Server::on_devices(ls, budget);
            let (mut ok, mut n, mut rejected) = (true, 0u64, 0u64);
            let mut sessions = SessionCounters::default();
            let mut published = Instant::now();
            let mut idle = 0u32;
            let snapshot = || {
                let mut all = CoreSnapshot::default();
                for v in views {
                    let s = v.snapshot();
                    all.add_counters(&s);
                    all.per_core.extend(s.per_core);
                }
                all
            };
            let counters = |server: &Server, sessions: &mut SessionCounters| {
                let (admitted, rejected) = server.admissions();
                sessions.admitted = admitted;
                sessions.rejected = rejected;
                sessions.active = server.active() as u64;
                sessions.memory_octets = server.memory_in_use();
                *sessions
            };
            while count.is_none_or(|c| n < c) {
                if server.step() > 0 {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                    if idle > iwarp::driver::IDLE_SLEEPS_AFTER {
                        std::thread::sleep(iwarp::driver::IDLE_SLEEP);
                    } else if idle > iwarp::driver::IDLE_SPINS {
                        std::thread::yield_now();
                    }
                }
                if status.swap(false, Ordering::Relaxed) {
                    print_status(&snapshot(), &server, &sessions);
                }
                if let Some(m) = &metrics {
                    if published.elapsed() >= METRICS_EVERY {
                        let c = counters(&server, &mut sessions);
                        m.publish(Snapshot::of_cores(&snapshot(), c));
                        published = Instant::now();
                    }
                }
                while let Some((peer, why)) = server.last_rejections.pop_front() {
                    rejected += 1;
                    println!("rejected {peer}: {why}");
                    let _ = std::io::stdout().flush();
                }
                let Some(s) = server.take_finished() else {
                    continue;
                };
                n += 1;
                ok &= report_session(n, &s, &mut sessions);
                if any_memif && server.active() == 0 {
                    // The client exits now: let DPDK's memif tear down unpolled.
                    for v in views {
                        v.quiesce_memif();
                    }
                }
            }
            // The sessions' close handshakes go on while the cores run: wait (by their
            // snapshots) for the tables to empty, within the limits.
            let lim = *views[0].limits();
            let until = Instant::now() + lim.startup_timeout + lim.linger * 2;
            while snapshot().gauges.connections > 0 && Instant::now() < until {
                server.step();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if let Some(m) = &metrics {
                let c = counters(&server, &mut sessions);
                m.publish(Snapshot::of_cores(&snapshot(), c));
                m.stop();
            }
            Ok((ok, server, rejected))
        },
    )
    .map_err(|e| e.to_string())?;
    let (ok, server, rejected): (bool, Server, u64) = r?;
    for (name, cores) in names.iter().zip(&cores) {
        print_end(cores, &server, name, rejected);
    }
    Ok(ok)
}

/// The port's offloads and the limits, before the first session.
fn print_setup(
    o: dataplane::port::ChecksumOffload,
    zero_copy: bool,
    tso_max: usize,
    l: &dataplane::limits::Limits,
    pname: &str,
    budget: &Budget,
) {
    let on = |b: bool| if b { "on" } else { "off" };
    println!(
        "port {pname}: checksum offload tx {}, rx {}; zero-copy tx {}; {}",
        on(o.tx_ipv4_tcp),
        on(o.rx_ipv4_tcp),
        on(zero_copy),
        if tso_max > 0 {
            format!("TSO on (frames of up to {tso_max} payload octets)")
        } else {
            "TSO off".to_string()
        }
    );
    println!(
        "limits: {} connections, SYN backlog {} per listener (then SYN cookies), \
         startup {:?} and {} octets, user timeout {:?}, linger {:?}, {} TIME-WAIT, \
         control queues {}, listener queue {}; sessions: {} at once ({} starting per \
         client), {} MiB each, {} MiB in all",
        l.max_connections,
        l.syn_backlog,
        l.startup_timeout,
        l.startup_octets,
        l.user_timeout,
        l.linger,
        l.time_wait,
        l.control_queue,
        l.listener_queue,
        budget.sessions,
        budget.pending_per_peer,
        budget.session >> 20,
        budget.total >> 20
    );
    let _ = std::io::stdout().flush();
}

/// One line on demand (SIGUSR1): sessions and connections now.
fn print_status(c: &CoreSnapshot, server: &Server, s: &SessionCounters) {
    let g = &c.gauges;
    let (admitted, rejected) = server.admissions();
    let p = &c.port;
    println!(
        "status: {} sessions running ({} MiB), {} finished ({} failed), {admitted} admitted, \
         {rejected} rejected; {} connections ({} half-open, {} starting, {} in TIME-WAIT); \
         rx {} frames, tx {} frames",
        server.active(),
        server.memory_in_use() >> 20,
        s.finished,
        s.failed,
        g.connections,
        g.half_open,
        g.startup,
        g.time_wait,
        p.rx_frames,
        p.tx_frames
    );
    let _ = std::io::stdout().flush();
}

/// What the cores and the port saw, at the end.
fn print_end(cores: &[Core], server: &Server, pname: &str, rejected: u64) {
    let c = CoreSnapshot::of(cores);
    let g = &c.gauges;
    let st = &c.stats;
    let (admitted, refused_sessions) = server.admissions();
    println!(
        "core: {} connections left ({} half-open, {} in TIME-WAIT); {} accepted, \
         {} SYN cookies sent ({} completed), {} refused, {} startup timeouts, {} \
         startup overflows, {} linger resets; sessions: {admitted} admitted, \
         {refused_sessions} rejected ({rejected} printed)",
        g.connections,
        g.half_open,
        g.time_wait,
        st.accepted,
        st.syn_cookies_sent,
        st.syn_cookies_accepted,
        st.refused,
        st.startup_timeouts,
        st.startup_overflows,
        st.linger_resets
    );
    if cores.len() > 1 {
        let each: Vec<String> = cores
            .iter()
            .map(|k| {
                let s = k.stats();
                format!(
                    "core {}: {} accepted, {} frames handed to other cores, {} handed in",
                    k.index(),
                    s.accepted,
                    s.handed_off,
                    s.handed_in
                )
            })
            .collect();
        println!("cores: {}", each.join("; "));
    }
    let s = &c.port;
    println!(
        "port {pname}: rx {} frames ({} dropped; device checksums {} good, {} bad), \
         tx {} frames ({} dropped; {} checksum offloaded, {} zero-copy, {} TSO of {} segments)",
        s.rx_frames,
        s.rx_dropped,
        s.rx_checksum_good,
        s.rx_checksum_bad,
        s.tx_frames,
        s.tx_dropped,
        s.tx_checksum_offloaded,
        s.tx_zero_copy,
        s.tx_tso_frames,
        s.tx_tso_segments
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployment with two listeners; `extra` goes into the first.
    fn file(extra: &str) -> String {
        format!(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"veth0\"\n\
             ipv4 = \"10.9.0.1/24\"\n\n[[lcores]]\nid = 1\nports = [\"p0\"]\n\n\
             [mpa]\nird = 4\nord = 2\n\n\
             [[listeners]]\ntcp_port = 7000\nport_name = \"p0\"\n{extra}\n\
             [[listeners]]\ntcp_port = 7001\nport_name = \"p0\"\n\
             [listeners.mpa]\nird = 32\nord = 0\n"
        )
    }

    /// `[mpa]` ird/ord, and a listener's overrides, cap what its Replies grant.
    #[test]
    fn responder_ird_ord_come_from_the_file() {
        let cfg = appconfig::from_str(&file(""), "t.toml").unwrap();
        let l = listeners_of(&cfg, "p0", Ipv4Addr::new(10, 9, 0, 1)).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].0, l[0].1.max_ird, l[0].1.max_ord), (7000, 4, 2));
        assert_eq!((l[1].0, l[1].1.max_ird, l[1].1.max_ord), (7001, 32, 0));
        // What the responder machine then grants: a Request asking ORD 16 gets IRD 4.
        // (The bench server accepts with the default parameters: IRD 0 and ORD u16::MAX
        // asked, so the Request and the limits decide.)
        let d = control::verbs::AcceptParams::default();
        let rc = &l[0].1;
        let got = proto::ird_ord::responder_ird_ord(
            16, 16, d.ird, d.ord, rc.max_ird, rc.max_ord, false, None,
        );
        assert_eq!((got.reply_ird, got.reply_ord), (4, 2), "{got:?}");
    }

    #[test]
    fn listener_private_data_is_refused() {
        let cfg = appconfig::from_str(&file("private_data = \"c0ffee\""), "t.toml").unwrap();
        let e = listeners_of(&cfg, "p0", Ipv4Addr::new(10, 9, 0, 1)).unwrap_err();
        assert!(e.starts_with("listeners[0].private_data:"), "{e}");
    }
}
