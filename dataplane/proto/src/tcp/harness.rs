//! Test harness: two engines back to back over a simulated link with deterministic
//! (seeded) loss, duplication and reordering, and a virtual clock.

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr};

use super::*;

/// splitmix64: small, deterministic.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What the log keeps of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seg {
    pub from: Side,
    pub at: u64,
    pub seq: u32,
    pub ack: Option<u32>,
    pub ctl: TcpControl,
    pub len: usize,
    pub wnd: u16,
    pub sack: bool,
    /// The SACK blocks, as sent.
    pub blocks: [Option<(u32, u32)>; 3],
    pub ts: bool,
    pub tsval: Option<u32>,
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack_perm: bool,
    pub dropped: bool,
}

/// Random link faults, per mille.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    pub drop: u32,
    pub dup: u32,
    pub reorder: u32,
    /// Extra delay (µs, random below this) of a reordered segment.
    pub reorder_delay: u64,
}

struct Wire {
    at: u64,
    n: u64,
    to: Side,
    bytes: Vec<u8>,
}

pub(crate) type Filter = Box<dyn FnMut(&Seg) -> bool>;

pub(crate) const ADDR_A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
pub(crate) const ADDR_B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
pub(crate) const PORT_A: u16 = 40000;
pub(crate) const PORT_B: u16 = 4791;

pub(crate) fn tuple_a() -> FourTuple {
    FourTuple {
        local_addr: ADDR_A,
        local_port: PORT_A,
        remote_addr: ADDR_B,
        remote_port: PORT_B,
    }
}

pub(crate) fn tuple_b() -> FourTuple {
    tuple_a().reversed()
}

/// A test config: small timers for the in-memory link.
pub(crate) fn fast_config() -> Config {
    Config {
        rto_initial: Duration::from_millis(10),
        rto_min: Duration::from_millis(1),
        rto_max: Duration::from_millis(500),
        msl: Duration::from_millis(50),
        delayed_ack: Duration::from_micros(100),
        ..Config::default()
    }
}

/// A copy of `r` without its payload.
pub(crate) fn strip(r: &TcpRepr) -> TcpRepr<'static> {
    TcpRepr {
        src_port: r.src_port,
        dst_port: r.dst_port,
        control: r.control,
        seq_number: r.seq_number,
        ack_number: r.ack_number,
        window_len: r.window_len,
        window_scale: r.window_scale,
        max_seg_size: r.max_seg_size,
        sack_permitted: r.sack_permitted,
        sack_ranges: r.sack_ranges,
        timestamp: r.timestamp,
        payload: &[],
    }
}

/// Two endpoints and a link.
pub(crate) struct Pair {
    pub a: Option<Connection>,
    pub b: Option<Connection>,
    /// B's listener; a SYN arriving while `b` is None goes here.
    pub listener: Option<Listener>,
    /// How B's listener answers SYNs.
    pub syn_policy: SynPolicy,
    pub now: u64,
    /// One-way delay, µs.
    pub delay: u64,
    pub faults: Faults,
    pub rng: Rng,
    wires: Vec<Wire>,
    n: u64,
    pub log: Vec<Seg>,
    /// Return false to drop a segment (after logging).
    pub filter: Option<Filter>,
    /// Segments this returns true for are put on the link twice (beside `faults.dup`).
    pub duplicate: Option<Filter>,
    /// Drain received data into `rx_a`/`rx_b` automatically.
    pub auto_recv: bool,
    /// B takes in-order data straight from each segment (`on_segment_deliver`) into
    /// `rx_b`, checking that it comes in stream order; `direct_b_octets` counts it.
    pub direct_b: bool,
    pub direct_b_octets: u64,
    pub rx_a: Vec<u8>,
    pub rx_b: Vec<u8>,
    pub ev_a: Vec<Event>,
    pub ev_b: Vec<Event>,
    /// Segments for which no connection existed, answered by a RST.
    pub unmatched: usize,
}

impl Pair {
    pub fn new(seed: u64) -> Self {
        Pair {
            a: None,
            b: None,
            listener: None,
            syn_policy: SynPolicy::Accept,
            now: 1_000_000,
            delay: 10,
            faults: Faults::default(),
            rng: Rng::new(seed),
            wires: Vec::new(),
            n: 0,
            log: Vec::new(),
            filter: None,
            duplicate: None,
            auto_recv: true,
            direct_b: false,
            direct_b_octets: 0,
            rx_a: Vec::new(),
            rx_b: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            unmatched: 0,
        }
    }

    /// A connects to B's listener, both with `cfg`.
    pub fn active_passive(seed: u64, cfg_a: Config, cfg_b: Config) -> Self {
        let mut p = Pair::new(seed);
        let now = p.instant();
        p.a = Some(Connection::connect(
            cfg_a,
            tuple_a(),
            &IsnGenerator::with_key([1; 16]),
            now,
        ));
        p.listener = Some(Listener::new(
            cfg_b,
            IsnGenerator::with_key([2; 16]),
            ADDR_B,
            PORT_B,
        ));
        p
    }

    pub fn instant(&self) -> Instant {
        Instant::from_micros(self.now as i64)
    }

    pub fn a(&mut self) -> &mut Connection {
        self.a.as_mut().expect("A exists")
    }

    pub fn b(&mut self) -> &mut Connection {
        self.b.as_mut().expect("B exists")
    }

    pub fn conn(&mut self, s: Side) -> Option<&mut Connection> {
        match s {
            Side::A => self.a.as_mut(),
            Side::B => self.b.as_mut(),
        }
    }

    fn tuple_of(s: Side) -> FourTuple {
        match s {
            Side::A => tuple_a(),
            Side::B => tuple_b(),
        }
    }

    /// Puts a segment from `from` on the link (logging, filter, faults).
    pub fn send_from(&mut self, from: Side, repr: &TcpRepr) {
        let mut seg = Seg {
            from,
            at: self.now,
            seq: repr.seq_number.0 as u32,
            ack: repr.ack_number.map(|a| a.0 as u32),
            ctl: repr.control,
            len: repr.payload.len(),
            wnd: repr.window_len,
            sack: repr.sack_ranges[0].is_some(),
            blocks: repr.sack_ranges,
            ts: repr.timestamp.is_some(),
            tsval: repr.timestamp.map(|t| t.tsval),
            mss: repr.max_seg_size,
            ws: repr.window_scale,
            sack_perm: repr.sack_permitted,
            dropped: false,
        };
        let mut keep = match self.filter.as_mut() {
            Some(f) => f(&seg),
            None => true,
        };
        if keep && self.faults.drop > 0 && self.rng.chance(self.faults.drop) {
            keep = false;
        }
        seg.dropped = !keep;
        let doubled = keep && self.duplicate.as_mut().is_some_and(|f| f(&seg));
        self.log.push(seg);
        if !keep {
            return;
        }
        let mut bytes = Vec::new();
        wire::tcp::segment_to_bytes(&Self::tuple_of(from), repr, &mut bytes);
        let copies = if doubled || self.faults.dup > 0 && self.rng.chance(self.faults.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = self.now + self.delay;
            if self.faults.reorder > 0 && self.rng.chance(self.faults.reorder) {
                at += 1 + self.rng.below(self.faults.reorder_delay.max(1));
            }
            self.n += 1;
            self.wires.push(Wire {
                at,
                n: self.n,
                to: from.other(),
                bytes: bytes.clone(),
            });
        }
    }

    /// Lets both ends transmit at the current time.
    pub fn transmit(&mut self) {
        for side in [Side::A, Side::B] {
            let now = self.instant();
            let mut out: Vec<(TcpRepr<'static>, Vec<u8>)> = Vec::new();
            if let Some(c) = self.conn(side) {
                c.poll_transmit(now, |repr, payload| {
                    out.push((strip(repr), payload.to_vec()));
                });
            }
            for (mut r, p) in out {
                r.payload = &p;
                self.send_from(side, &r);
            }
        }
        self.collect();
    }

    fn collect(&mut self) {
        let auto = self.auto_recv;
        if let Some(a) = self.a.as_mut() {
            if auto {
                a.recv(|_, d| self.rx_a.extend_from_slice(d));
            }
            while let Some(e) = a.poll_event() {
                self.ev_a.push(e);
            }
        }
        if let Some(b) = self.b.as_mut() {
            if auto {
                b.recv(|_, d| self.rx_b.extend_from_slice(d));
            }
            while let Some(e) = b.poll_event() {
                self.ev_b.push(e);
            }
        }
    }

    /// Delivers one wire image to its destination.
    fn deliver(&mut self, w: Wire) {
        let (src, dst) = match w.to {
            Side::A => (ADDR_B, ADDR_A),
            Side::B => (ADDR_A, ADDR_B),
        };
        let repr =
            wire::tcp::segment_from_bytes(src, dst, &w.bytes).expect("harness segments parse");
        let now = self.instant();
        match w.to {
            Side::A => match self.a.as_mut() {
                Some(a) => a.on_segment(now, &repr),
                None => self.unmatched += 1,
            },
            Side::B => {
                if let Some(b) = self.b.as_mut() {
                    if self.direct_b {
                        let (rx, n) = (&mut self.rx_b, &mut self.direct_b_octets);
                        b.on_segment_deliver(now, &repr, &mut |off, d| {
                            assert_eq!(off, rx.len() as u64, "direct delivery out of order");
                            rx.extend_from_slice(d);
                            *n += d.len() as u64;
                        });
                    } else {
                        b.on_segment(now, &repr);
                    }
                } else if let Some(l) = self.listener.as_mut() {
                    match l.on_segment(now, src, &repr, self.syn_policy) {
                        Accepted::Connection(c) => self.b = Some(*c),
                        Accepted::Reply(r) if r.control == TcpControl::Syn => {
                            self.send_from(Side::B, &r);
                        }
                        Accepted::Reply(r) => {
                            self.unmatched += 1;
                            self.send_from(Side::B, &r);
                        }
                        Accepted::Drop => {}
                    }
                } else {
                    self.unmatched += 1;
                }
            }
        }
    }

    /// Injects a segment as if it arrived at `to` now.
    pub fn inject(&mut self, to: Side, repr: &TcpRepr) {
        let now = self.instant();
        if let Some(c) = self.conn(to) {
            c.on_segment(now, repr);
        }
        self.collect();
    }

    /// The next time something happens, if anything will.
    fn next_time(&self) -> Option<u64> {
        let mut t = self.wires.iter().map(|w| w.at).min();
        for c in [self.a.as_ref(), self.b.as_ref()].into_iter().flatten() {
            if let Some(p) = c.poll_at() {
                let p = p.total_micros().max(0) as u64;
                t = Some(t.map_or(p, |x| x.min(p)));
            }
        }
        t
    }

    /// One step: transmit, advance the clock to the next event, deliver what is due.
    /// Returns false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.transmit();
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        loop {
            let due = self
                .wires
                .iter()
                .enumerate()
                .filter(|(_, w)| w.at <= self.now)
                .min_by_key(|(_, w)| (w.at, w.n))
                .map(|(i, _)| i);
            let Some(i) = due else { break };
            let w = self.wires.swap_remove(i);
            self.deliver(w);
        }
        self.collect();
        true
    }

    /// Steps until `cond` holds or `max_us` of virtual time pass; returns whether it held.
    pub fn run_until(&mut self, max_us: u64, mut cond: impl FnMut(&mut Pair) -> bool) -> bool {
        let end = self.now + max_us;
        let mut steps = 0u64;
        while self.now <= end {
            if cond(self) {
                return true;
            }
            steps += 1;
            assert!(steps < 5_000_000, "harness livelock");
            if !self.step() {
                return cond(self);
            }
        }
        cond(self)
    }

    /// Steps for `us` of virtual time.
    pub fn run_for(&mut self, us: u64) {
        let end = self.now + us;
        self.run_until(us, |p| p.now >= end);
    }

    pub fn established(&mut self) -> bool {
        self.run_until(1_000_000, |p| {
            p.a.as_ref().map(|c| c.state()) == Some(State::Established)
                && p.b.as_ref().map(|c| c.state()) == Some(State::Established)
        })
    }

    /// Segments sent by `from` (not dropped or dropped).
    pub fn sent_by(&self, from: Side) -> impl Iterator<Item = &Seg> {
        self.log.iter().filter(move |s| s.from == from)
    }
}
