//! The client side of one `iwarp bench` run: connect with the hello, then per size wait
//! for the server's *ready*, run the test, and send *done*; at the end take the server's
//! result and close. One small function per kind of test.
//!
//! The client's receive queue holds only control receives ([`CTL_RECVS`] of them, 64
//! octets each, reposted as they are used), except in send-lat, where the server's pongs
//! are Sends too: there the client posts each receive in the order the server's Sends
//! come (the ready, the pong of each ping, the next ready or the result).

use dataplane::clock::Instant;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::Duration;

use control::verbs::{
    Access, Completion, ConnId, Core, Device, InitiatorConfig, Mr, RecvWr, SendOp, SendWr, Sge,
    WcOpcode, WcStatus,
};
use hdrhistogram::Histogram;

use super::session::{self, Hello, RemoteBuffer, ServerResult, CREDIT_LEN, RESULT_LEN};
use super::verify;
use super::{check_options, BenchError, BenchOptions, ClientOutcome, Length, Test, STALL};
use crate::driver::{DriverError, Endpoint};
use crate::report::{BwMeter, IntervalSample, LatMeter, Progress, ProgressTotal, Sample};

/// Control receives the client keeps posted (except in send-lat).
pub const CTL_RECVS: u64 = 64;
/// Octets per control receive.
const CTL_SLOT: u64 = 64;
/// `wr_id` bit of control receives (the rest is the slot).
const WR_CTL: u64 = 1 << 62;
/// `wr_id` of the client's control Sends (first message, done).
const WR_CONTROL_SEND: u64 = 1 << 61;

/// What a control receive carried.
enum Ctl {
    Ready,
    Credit(u64),
    Result(ServerResult),
}

/// The client's endpoint and its control state.
struct Client {
    ep: Endpoint,
    /// Where control Sends from the server land.
    ctl: Mr,
    /// Readies received and not yet taken.
    ready: u64,
    /// Credits granted and not yet used.
    credits: u64,
    /// The server's result, once it came.
    result: Option<ServerResult>,
    /// send-lat: control receives are posted one at a time, in turn.
    sequenced: bool,
    /// Octets checked here, and found wrong.
    verified: u64,
    errors: u64,
}

impl Client {
    /// Pumps once and takes the control receives among the completions; the other
    /// completions stay in `ep.done`.
    ///
    /// A failed completion is an error, except a flushed one once the server's result has
    /// come: the server closes after its result, which flushes the receives still posted
    /// here, possibly in the same poll as the result itself.
    fn step(&mut self) -> Result<usize, BenchError> {
        let n = self.ep.pump_any();
        // What is taken out keeps the rest in order: with completion moderation one
        // completion covers the unsignaled requests before it.
        let mut failed = None;
        let mut i = 0;
        while i < self.ep.done.len() {
            let c = self.ep.done[i];
            if c.status != WcStatus::Success {
                failed = failed.or(Some(c));
                self.ep.done.remove(i);
            } else if c.opcode == WcOpcode::Recv && c.wr_id & WR_CTL != 0 {
                self.ep.done.remove(i);
                let ctl = self.take_ctl(&c)?;
                match ctl {
                    Ctl::Ready => self.ready += 1,
                    Ctl::Credit(n) => self.credits = self.credits.saturating_add(n),
                    Ctl::Result(r) => self.result = Some(r),
                }
            } else {
                i += 1;
            }
        }
        match failed {
            Some(c) if !(c.status == WcStatus::Flushed && self.result.is_some()) => {
                Err(DriverError::Completion(c).into())
            }
            _ => Ok(n),
        }
    }

    /// Decodes a control receive and reposts it (not in send-lat, whose receives are
    /// posted in turn).
    fn take_ctl(&mut self, c: &Completion) -> Result<Ctl, BenchError> {
        let slot = c.wr_id & !WR_CTL;
        let off = slot * CTL_SLOT;
        let len = c.byte_len as usize;
        let mut b = [0u8; CTL_SLOT as usize];
        let b = &mut b[..len.min(CTL_SLOT as usize)];
        self.ctl
            .read(off as usize, b)
            .map_err(|e| BenchError::Thread(format!("reading a control receive: {e}")))?;
        let ctl = match len {
            0 => Ctl::Ready,
            CREDIT_LEN => Ctl::Credit(session::decode_count(b).unwrap_or(0)),
            RESULT_LEN => Ctl::Result(ServerResult::decode(b).ok_or_else(|| {
                BenchError::Protocol("the server's result message is malformed".into())
            })?),
            n => {
                return Err(BenchError::Protocol(format!(
                    "a control Send of {n} octets from the server"
                )))
            }
        };
        if !self.sequenced {
            self.ep.post_recv(RecvWr {
                wr_id: c.wr_id,
                local: self.ctl.sge(off, CTL_SLOT as u32),
            })?;
        }
        Ok(ctl)
    }

    fn post_ctl_recv(&mut self, slot: u64) -> Result<(), BenchError> {
        self.ep.post_recv(RecvWr {
            wr_id: WR_CTL | slot,
            local: self.ctl.sge(slot * CTL_SLOT, CTL_SLOT as u32),
        })?;
        Ok(())
    }

    /// Sends a control message and waits for its completion.
    fn control_send(&mut self, local: Sge, what: &'static str) -> Result<(), BenchError> {
        self.ep.post_send(SendWr {
            wr_id: WR_CONTROL_SEND,
            op: SendOp::Send,
            local,
            signaled: true,
        })?;
        let until = Instant::now() + STALL;
        loop {
            self.step()?;
            if let Some(i) = self
                .ep
                .done
                .iter()
                .position(|c| c.wr_id == WR_CONTROL_SEND && c.opcode == WcOpcode::Send)
            {
                self.ep.done.remove(i);
                return Ok(());
            }
            if Instant::now() > until {
                return Err(BenchError::Stalled(what));
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), BenchError> {
        let until = Instant::now() + STALL;
        while self.ready == 0 {
            self.step()?;
            if Instant::now() > until {
                return Err(BenchError::Stalled("waiting for the server to be ready"));
            }
        }
        self.ready -= 1;
        Ok(())
    }
}

/// The messages each client QP of a run keeps timestamps of: a share of
/// [`crate::report::METER_MESSAGES`] (64 MiB of timestamps), so that a run's memory for
/// them stays within that however many QPs (`-q`) and directions (`-b`) it has.
fn meter_share(o: &BenchOptions) -> usize {
    let meters = o.qps.max(1) * if o.bidirectional { 2 } else { 1 };
    (crate::report::METER_MESSAGES / meters).max(1)
}

fn reg(ep: &Endpoint, len: usize, access: Access) -> Result<Mr, BenchError> {
    ep.pd
        .reg_mr(len.max(1), access)
        .map_err(|e| BenchError::Thread(format!("registering {len} octets: {e}")))
}

/// Reads in flight for read-bw: the depth, at most the ORD asked for (RFC 6581 IRD/ORD
/// negotiation may lower it further; never raise it).
fn read_depth(o: &BenchOptions, ord: u16) -> usize {
    o.tx_depth.min(usize::from(ord).max(1))
}

/// Depth of the client's work queues for `o`.
fn depth(o: &BenchOptions, ord: u16) -> usize {
    o.tx_depth.max(usize::from(ord))
}

/// Runs the client (see [`super::run_client`]): driving `core` between its steps, or
/// with `None` leaving the core to another thread.
pub(super) fn run(
    dev: &Device,
    core: Option<Core>,
    o: &BenchOptions,
    server: SocketAddrV4,
    mpa: InitiatorConfig,
) -> (Option<Core>, Result<ClientOutcome, BenchError>) {
    if let Err(e) = check_options(o) {
        return (core, Err(e));
    }
    let d = depth(o, mpa.ord);
    let (sq, rq) = (d + 16, d + CTL_RECVS as usize + 16);
    let mut ep = match core {
        Some(core) => Endpoint::with_core(dev, core, sq, rq),
        None => {
            let mut ep = Endpoint::new(dev, sq, rq);
            ep.back_off_when_idle();
            ep
        }
    };
    ep.stall = STALL;
    let ctl = match reg(&ep, (CTL_RECVS * CTL_SLOT) as usize, Access::LOCAL_WRITE) {
        Ok(m) => m,
        Err(e) => return (ep.into_core(), Err(e)),
    };
    let mut c = Client {
        ep,
        ctl,
        ready: 0,
        credits: 0,
        result: None,
        sequenced: o.test == Test::SendLat,
        verified: 0,
        errors: 0,
    };
    let r = main(&mut c, dev, o, server, mpa);
    if let Ok((_, conn)) = &r {
        c.ep.disconnect(dev, *conn);
    }
    (c.ep.into_core(), r.map(|(out, _)| out))
}

fn main(
    c: &mut Client,
    dev: &Device,
    o: &BenchOptions,
    server: SocketAddrV4,
    mut mpa: InitiatorConfig,
) -> Result<(ClientOutcome, ConnId), BenchError> {
    let max = o.sizes.iter().copied().max().unwrap_or(1).max(1);
    // The latency tests' sink (write-lat: the server's answers land here, so the server
    // learns it from the hello; send-lat: the pongs' receive buffer).
    let sink = reg(&c.ep, max, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let hello = Hello {
        test: o.test,
        sizes: o.sizes.clone(),
        length: o.length,
        // Read-bw keeps at most ORD Reads in flight: the server's region is sized on it.
        tx_depth: if o.test == Test::ReadBw {
            read_depth(o, mpa.ord)
        } else {
            o.tx_depth
        },
        verify: o.verify,
        client_sink: (o.test == Test::WriteLat).then(|| RemoteBuffer {
            stag: sink.key(),
            to: sink.base_to(),
        }),
    };
    if c.sequenced {
        c.post_ctl_recv(0)?;
    } else {
        for i in 0..CTL_RECVS {
            c.post_ctl_recv(i)?;
        }
    }
    mpa.private_data = hello
        .encode()
        .map_err(|e| BenchError::Options(e.to_string()))?;
    let asked_ord = mpa.ord;
    let p = dev.connect_from(o.core, &c.ep.qp, server, mpa);
    let info = c.ep.wait(&p, "connecting")?;
    let remote = session::decode_buffer(info.peer_private_data())
        .map_err(|e| BenchError::Protocol(e.to_string()))?;
    if !info.established.peer_to_peer {
        // Client-server model: the Initiator speaks first (RFC 5044 7.1.2 rule 4). A
        // zero-length Send, which the server has a receive posted for.
        c.control_send(empty(), "sending the first message")?;
    }
    // send-bw: the server posted a receive per message in flight for the whole run, and
    // grants the ones beyond them (a grant the first message's wait may have taken
    // already: added to, not overwritten).
    if o.test == Test::SendBw {
        c.credits = c.credits.saturating_add(o.tx_depth as u64);
    }
    let ord = usize::from(info.ord).max(1).min(read_depth(o, asked_ord));
    let done_mr = reg(&c.ep, session::DONE_LEN, Access::LOCAL_WRITE)?;
    let mut samples = Vec::new();
    let mut spans = Vec::new();
    let mut histograms = Vec::new();
    let mut intervals = Vec::new();
    let mut expected = 0u64;
    for (k, &size) in o.sizes.iter().enumerate() {
        c.wait_ready()?;
        let last = k + 1 == o.sizes.len();
        let began = std::time::Instant::now();
        let (sample, h, messages) = match o.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => {
                let (s, n) = bw(c, o, size, remote, ord, &mut intervals)?;
                (s, None, n)
            }
            Test::WriteLat => write_lat(c, o, size, remote, &sink)?,
            Test::ReadLat => read_lat(c, o, size, remote)?,
            Test::SendLat => send_lat(c, o, size, &sink, last)?,
        };
        if o.verify {
            // Every octet of every message, by the end that receives it (both ends for the
            // ping-pong tests).
            let both = matches!(o.test, Test::WriteLat | Test::SendLat);
            expected += messages * size as u64 * if both { 2 } else { 1 };
        }
        samples.push(sample);
        spans.push((began, std::time::Instant::now()));
        if let Some(h) = h {
            histograms.push((size, h));
        }
        // Tell the server this size is over: with the count for tests where it cannot
        // count the messages itself.
        let done = if o.test.is_send() {
            empty()
        } else {
            let _ = done_mr.write(0, &session::encode_count(messages));
            done_mr.sge(0, session::DONE_LEN as u32)
        };
        c.control_send(done, "finishing a size")?;
    }
    let until = Instant::now() + STALL;
    let server = loop {
        if let Some(r) = c.result {
            break r;
        }
        c.step()?;
        if Instant::now() > until {
            return Err(BenchError::Stalled("waiting for the server's result"));
        }
    };
    if o.verify {
        let verified = server.verified + c.verified;
        let errors = server.errors + c.errors;
        if errors > 0 {
            return Err(BenchError::Verify(format!(
                "{errors} of {verified} octets checked were wrong (server {}, client {})",
                server.errors, c.errors
            )));
        }
        if verified != expected {
            return Err(BenchError::Verify(format!(
                "{verified} octets checked of the {expected} the run moved (server {}, client {})",
                server.verified, c.verified
            )));
        }
    }
    Ok((
        ClientOutcome {
            samples,
            spans,
            conn: info.conn,
            histograms,
            intervals,
            server,
            client_verified: c.verified,
            client_errors: c.errors,
            expected_verified: expected,
        },
        info.conn,
    ))
}

fn empty() -> Sge {
    Sge {
        stag: 0,
        to: 0,
        len: 0,
    }
}

fn progress(o: &BenchOptions) -> Option<Progress> {
    o.progress.then(|| {
        Progress::new(match o.length {
            Length::Iterations(n) => ProgressTotal::Iterations(n),
            Length::Duration(d) => ProgressTotal::Duration(d),
        })
    })
}

/// Whether another message may start at `now`: the count is not reached, or the time not
/// up. A run measured in time (or until stopped) that moderates completions (`group`
/// requests per signaled one) ends at the end of a group, so that its last request is a
/// signaled one.
fn more(
    o: &BenchOptions,
    deadline: Option<Instant>,
    posted: u64,
    now: Instant,
    group: u64,
) -> bool {
    let open_group = !posted.is_multiple_of(group);
    if let Some(stop) = o.intervals.as_ref().and_then(|i| i.stop.as_ref()) {
        return open_group || !stop.load(Ordering::Relaxed);
    }
    match (o.length, deadline) {
        (Length::Iterations(n), _) => posted < n,
        (_, Some(d)) => open_group || now < d,
        _ => false,
    }
}

/// A bandwidth test: write-bw, read-bw or send-bw. Returns the sample and the number of
/// messages.
fn bw(
    c: &mut Client,
    o: &BenchOptions,
    size: usize,
    r: RemoteBuffer,
    ord: usize,
    intervals: &mut Vec<IntervalSample>,
) -> Result<(Sample, u64), BenchError> {
    let depth = match o.test {
        Test::ReadBw => o.tx_depth.min(ord).max(1),
        _ => o.tx_depth,
    };
    // With --verify every message in flight has a slot of its own (source, or sink for
    // Reads); without, they share one (as perftest).
    let slots = if o.verify { depth } else { 1 };
    let access = if o.test == Test::ReadBw {
        Access::LOCAL_WRITE
    } else {
        Access::empty()
    };
    let buf = reg(&c.ep, size * slots, access | Access::LOCAL_WRITE)?;
    // Write-bw --verify: the server hands each slot back when it has checked it.
    let credited = o.test == Test::SendBw || (o.test == Test::WriteBw && o.verify);
    if o.test == Test::WriteBw && o.verify {
        c.credits = depth as u64;
    }
    // One more region slot than Reads in flight (at most what the server sized it for).
    let region_slots = verify::region_slots(false, depth);
    // Completion moderation: every `group`-th request is signaled (and the last of a
    // counted run); at most the depth, or the queue would fill before a signaled one.
    let group = o.cq_mod.clamp(1, depth) as u64;
    let mut cqes = 0u64;
    let total = match o.length {
        Length::Iterations(n) => n,
        Length::Duration(_) => 0,
    };
    let deadline = match o.length {
        Length::Duration(d) => Some(Instant::now() + d),
        Length::Iterations(_) => None,
    };
    let mut prog = progress(o).filter(|_| o.intervals.is_none());
    // Room for the timestamps is taken before the clock starts: a timed run does not grow
    // (copy) its arrays while it is measured.
    let share = meter_share(o);
    let room = if total == 0 { share } else { total as usize };
    let mut meter = BwMeter::with_limit(size as u64, room, share);
    let start = Instant::now();
    // Per-interval figures: where the current interval started, the messages completed
    // before it, the lowest interval bandwidth so far.
    let mut interval = (Duration::ZERO, 0u64);
    let mut min_interval: Option<f64> = None;
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut stage = vec![0u8; if o.verify { size } else { 0 }];
    let mut last_progress = Instant::now();
    let mut batch: Vec<SendWr> = Vec::with_capacity(o.post_list);
    let mut quiet_rounds = 0u64;
    // At most two clock readings per round: before posting (the posts' time, and the deadline)
    // and after the core ran (the completions' time). A reading costs about 12 to 20 ns, as
    // much as a small message's share of the core's time, so a round that read the clock
    // for its completions lends that reading to the next round's posts when it did
    // nothing else but count them (no data checked, no interval line, no progress
    // shown): those posts follow within nanoseconds.
    let lendable = !(o.verify && o.test == Test::ReadBw) && o.intervals.is_none() && prog.is_none();
    let mut fresh: Option<Instant> = None;
    loop {
        let posting = fresh.take().unwrap_or_else(Instant::now);
        let going = more(o, deadline, posted, posting, group);
        if !going && completed == posted {
            break;
        }
        // Post lists (`-l`): up to `post_list` requests per doorbell; as perftest does,
        // lists are posted until the send queue is full, then completions are polled.
        loop {
            batch.clear();
            while more(o, deadline, posted + batch.len() as u64, posting, group)
                && posted + (batch.len() as u64) - completed < depth as u64
                && (!credited || c.credits > batch.len() as u64)
            {
                let i = posted + batch.len() as u64;
                let slot = (i % slots as u64) as usize;
                let off = (slot * size) as u64;
                let op = match o.test {
                    Test::WriteBw => {
                        if o.verify {
                            verify::fill_lap(&mut stage, i, slots);
                            write(&buf, off as usize, &stage)?;
                        }
                        SendOp::Write {
                            remote_stag: r.stag,
                            remote_to: r.to + off,
                        }
                    }
                    Test::ReadBw => {
                        let from = if o.verify {
                            let from = verify::read_offset(i, size, region_slots);
                            verify::poison_region(&mut stage, from);
                            write(&buf, off as usize, &stage)?;
                            from
                        } else {
                            0
                        };
                        SendOp::Read {
                            remote_stag: r.stag,
                            remote_to: r.to + from,
                        }
                    }
                    _ => {
                        if o.verify {
                            verify::fill(&mut stage, i);
                            write(&buf, off as usize, &stage)?;
                        }
                        SendOp::Send
                    }
                };
                batch.push(SendWr {
                    wr_id: i,
                    op,
                    local: buf.sge(off, size as u32),
                    signaled: (i + 1).is_multiple_of(group) || i + 1 == total,
                });
                if batch.len() == o.post_list {
                    break;
                }
            }
            if batch.is_empty() {
                break;
            }
            c.ep.post_send_list(&batch)?;
            meter.post_n(posting - start, batch.len());
            posted += batch.len() as u64;
            if credited {
                c.credits -= batch.len() as u64;
            }
        }
        let n = c.step()?;
        // With nothing completed the posting time serves (the stall check, progress and
        // intervals look at the clock every 64 such rounds).
        quiet_rounds = if c.ep.done.is_empty() {
            quiet_rounds + 1
        } else {
            0
        };
        let stepped = if quiet_rounds == 0 || quiet_rounds.is_multiple_of(64) {
            let t = Instant::now();
            fresh = lendable.then_some(t);
            t
        } else {
            posting
        };
        let now = stepped - start;
        for k in 0..c.ep.done.len() {
            let d = c.ep.done[k];
            if d.opcode == WcOpcode::Recv {
                return Err(BenchError::Protocol(format!(
                    "an unexpected Send of {} octets from the server",
                    d.byte_len
                )));
            }
            // A completion covers its request and the unsignaled ones before it.
            if d.wr_id < completed || d.wr_id >= posted {
                return Err(BenchError::Protocol(format!(
                    "a completion for request {} with {completed} of {posted} completed",
                    d.wr_id
                )));
            }
            let covered = d.wr_id + 1 - completed;
            if o.verify && o.test == Test::ReadBw {
                for i in completed..=d.wr_id {
                    let off = (i % slots as u64) as usize * size;
                    let from = verify::read_offset(i, size, region_slots);
                    let got = read(&buf, off, size)?;
                    c.errors += verify::mismatches_region(&got, from);
                    c.verified += size as u64;
                }
            }
            completed = d.wr_id + 1;
            cqes += 1;
            meter.complete_n(now, covered as usize);
        }
        if n > 0 {
            last_progress = stepped;
        } else if stepped - last_progress > STALL {
            return Err(BenchError::Stalled(if credited && c.credits == 0 {
                "waiting for credits from the server"
            } else {
                "waiting for completions"
            }));
        }
        if let Some(iv) = &o.intervals {
            if now >= interval.0 + iv.every {
                let s =
                    IntervalSample::new(size as u64, completed - interval.1, now - interval.0, now);
                min_interval = Some(min_interval.map_or(s.avg_mib_s, |m| m.min(s.avg_mib_s)));
                (iv.report)(&s);
                if intervals.len() < super::MAX_INTERVALS {
                    intervals.push(s);
                }
                interval = (now, completed);
            }
        }
        if let Some(p) = prog.as_mut() {
            let core = c.ep.core();
            p.update_with_at(completed, stepped, || {
                let secs = now.as_secs_f64().max(1e-9);
                let mib = completed as f64 * size as f64 / secs / crate::report::MIB;
                let rtx = core.map_or(0, |k| k.alignment().retransmitted_octets);
                format!("{mib:.2} MiB/s  {rtx} octets retransmitted")
            });
        }
    }
    if let Some(p) = prog.as_mut() {
        p.finish();
    }
    // The peak's search takes milliseconds over millions of messages: the core this
    // thread drives keeps running meanwhile (its connections' ACKs and timers).
    let drives_core = c.ep.core().is_some();
    let mut sample = meter.sample_with(|| {
        if drives_core {
            c.ep.poll_core();
        }
    });
    sample.min_interval_mib_s = min_interval;
    sample.completions = Some(cqes);
    Ok((Sample::Bw(sample), posted))
}

fn write(mr: &Mr, off: usize, data: &[u8]) -> Result<(), BenchError> {
    mr.write(off, data)
        .map_err(|e| BenchError::Thread(format!("writing a buffer: {e}")))
}

fn read(mr: &Mr, off: usize, len: usize) -> Result<Vec<u8>, BenchError> {
    let mut v = vec![0u8; len];
    mr.read(off, &mut v)
        .map_err(|e| BenchError::Thread(format!("reading a buffer: {e}")))?;
    Ok(v)
}

/// The counter byte of ping `i` (1..=255, never 0, differs from ping `i - 1`).
fn counter(i: u64) -> u8 {
    (i % 255 + 1) as u8
}

struct LatRun {
    iters: u64,
    deadline: Option<Instant>,
    meter: LatMeter,
    prog: Option<Progress>,
}

impl LatRun {
    fn new(o: &BenchOptions, size: usize) -> LatRun {
        LatRun {
            iters: match o.length {
                Length::Iterations(n) => n,
                Length::Duration(_) => u64::MAX,
            },
            deadline: match o.length {
                Length::Duration(d) => Some(Instant::now() + d),
                Length::Iterations(_) => None,
            },
            meter: LatMeter::new(size as u64),
            prog: progress(o),
        }
    }

    fn more(&self, i: u64) -> bool {
        i < self.iters && self.deadline.is_none_or(|d| Instant::now() < d)
    }

    /// One round trip's latency; `core` shows the retransmissions on the progress line.
    fn record(&mut self, i: u64, latency: Duration, core: Option<&Core>) {
        self.meter.record(latency);
        let meter = &self.meter;
        if let Some(p) = self.prog.as_mut() {
            p.update_with(i, || {
                let rtx = core.map_or(0, |k| k.alignment().retransmitted_octets);
                format!(
                    "median {:.2} us  {rtx} octets retransmitted",
                    meter.sample().t_typical
                )
            });
        }
    }

    fn finish(mut self, n: u64) -> (Sample, Option<Histogram<u64>>, u64) {
        if let Some(p) = self.prog.as_mut() {
            p.finish();
        }
        let h = self.meter.histogram().clone();
        (Sample::Lat(self.meter.sample()), Some(h), n)
    }
}

/// Pumps until `done` says the answer is there.
fn wait_answer(
    c: &mut Client,
    what: &'static str,
    mut done: impl FnMut(&Client) -> bool,
) -> Result<(), BenchError> {
    let until = Instant::now() + STALL;
    loop {
        c.step()?;
        if done(c) {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(BenchError::Stalled(what));
        }
    }
}

fn write_lat(
    c: &mut Client,
    o: &BenchOptions,
    size: usize,
    r: RemoteBuffer,
    sink: &Mr,
) -> Result<(Sample, Option<Histogram<u64>>, u64), BenchError> {
    let src = reg(&c.ep, size, Access::empty())?;
    // The pongs' counters start over: clear the last octet of the last size's.
    write(sink, size - 1, &[0])?;
    let mut run = LatRun::new(o, size);
    let mut stage = vec![0u8; size];
    let mut i = 0u64;
    while run.more(i) {
        let k = counter(i);
        if o.verify {
            verify::fill(&mut stage, i);
            stage[size - 1] = k;
            write(&src, 0, &stage)?;
        } else {
            write(&src, size - 1, &[k])?;
        }
        let t0 = Instant::now();
        c.ep.post_send(SendWr {
            wr_id: i,
            op: SendOp::Write {
                remote_stag: r.stag,
                remote_to: r.to,
            },
            local: src.sge(0, size as u32),
            signaled: false,
        })?;
        wait_answer(c, "waiting for the pong", |_| {
            sink.load_u8_acquire(size - 1) == Some(k)
        })?;
        run.record(i + 1, t0.elapsed() / 2, c.ep.core());
        if o.verify {
            let got = read(sink, 0, size - 1)?;
            c.errors += verify::mismatches(&got, verify::pong(i));
            c.verified += size as u64;
        }
        i += 1;
    }
    Ok(run.finish(i))
}

fn read_lat(
    c: &mut Client,
    o: &BenchOptions,
    size: usize,
    r: RemoteBuffer,
) -> Result<(Sample, Option<Histogram<u64>>, u64), BenchError> {
    let sink = reg(&c.ep, size, Access::LOCAL_WRITE)?;
    let region_slots = verify::region_slots(true, 1);
    let mut run = LatRun::new(o, size);
    let mut stage = vec![0u8; if o.verify { size } else { 0 }];
    let mut i = 0u64;
    while run.more(i) {
        let from = if o.verify {
            let from = verify::read_offset(i, size, region_slots);
            verify::poison_region(&mut stage, from);
            write(&sink, 0, &stage)?;
            from
        } else {
            0
        };
        let t0 = Instant::now();
        c.ep.post_send(SendWr {
            wr_id: i,
            op: SendOp::Read {
                remote_stag: r.stag,
                remote_to: r.to + from,
            },
            local: sink.sge(0, size as u32),
            signaled: true,
        })?;
        let mut got = false;
        wait_answer(c, "waiting for the Read Response", |c| {
            got |=
                c.ep.done
                    .iter()
                    .any(|d| d.wr_id == i && d.opcode == WcOpcode::Read);
            got
        })?;
        run.record(i + 1, t0.elapsed(), c.ep.core());
        if o.verify {
            let b = read(&sink, 0, size)?;
            c.errors += verify::mismatches_region(&b, from);
            c.verified += size as u64;
        }
        i += 1;
    }
    Ok(run.finish(i))
}

fn send_lat(
    c: &mut Client,
    o: &BenchOptions,
    size: usize,
    sink: &Mr,
    last_size: bool,
) -> Result<(Sample, Option<Histogram<u64>>, u64), BenchError> {
    let src = reg(&c.ep, size, Access::empty())?;
    let mut run = LatRun::new(o, size);
    let mut stage = vec![0u8; if o.verify { size } else { 0 }];
    let mut i = 0u64;
    // The receive for the first pong; each pong's receive is posted before its ping.
    while run.more(i) {
        c.ep.post_recv(RecvWr {
            wr_id: i,
            local: sink.sge(0, size as u32),
        })?;
        if o.verify {
            verify::fill(&mut stage, i);
            write(&src, 0, &stage)?;
        }
        let t0 = Instant::now();
        c.ep.post_send(SendWr {
            wr_id: i,
            op: SendOp::Send,
            local: src.sge(0, size as u32),
            signaled: false,
        })?;
        let mut pong = None;
        wait_answer(c, "waiting for the pong", |c| {
            if pong.is_none() {
                pong =
                    c.ep.done
                        .iter()
                        .find(|d| d.opcode == WcOpcode::Recv && d.wr_id == i)
                        .copied();
            }
            pong.is_some()
        })?;
        run.record(i + 1, t0.elapsed() / 2, c.ep.core());
        if o.verify {
            let p = pong.expect("found above");
            if p.byte_len as usize != size {
                c.errors += size as u64;
            } else {
                let got = read(sink, 0, size)?;
                c.errors += verify::mismatches(&got, verify::pong(i));
            }
            c.verified += size as u64;
        }
        i += 1;
    }
    // Next from the server: the ready of the next size, or the result.
    let _ = last_size;
    c.post_ctl_recv(0)?;
    Ok(run.finish(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::METER_MESSAGES;

    /// The timestamps of a run stay within 64 MiB in all: each client QP keeps its share.
    #[test]
    fn meters_share_one_cap() {
        let mut o = BenchOptions::default();
        assert_eq!(meter_share(&o), METER_MESSAGES);
        o.qps = 4;
        assert_eq!(meter_share(&o) * 4, METER_MESSAGES);
        o.bidirectional = true;
        assert_eq!(meter_share(&o) * 8, METER_MESSAGES);
        o.qps = super::super::MAX_QPS;
        assert!(meter_share(&o) * 2 * o.qps <= METER_MESSAGES);
        assert!(meter_share(&o) >= 1);
    }
}
