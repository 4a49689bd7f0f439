//! SYN cookies (RFC 4987 section 3.6): a listener whose SYN-RECEIVED backlog is full
//! answers a SYN without keeping any state, and rebuilds the connection from the ACK that
//! completes the handshake.
//!
//! The cookie is our ISN:
//!
//! ```text
//!  31                              8 7         3 2     0
//! +---------------------------------+-----------+-------+
//! |  MAC (24 bits)                  | counter   |  MSS  |
//! +---------------------------------+-----------+-------+
//! ```
//!
//! * `MSS`: an index into [`MSS_TABLE`], the largest entry not above the peer's MSS.
//! * `counter`: the low 5 bits of a clock ticking every [`PERIOD_US`]; a cookie is accepted
//!   in its own period and the next one, so it lives 64 to 128 seconds.
//! * `MAC`: a keyed PRF (the [`IsnGenerator`]'s key) over the 4-tuple, the peer's ISN, the
//!   full counter and the MSS index. A forged ACK is accepted with probability 2^-24 per
//!   try, and only while the listener has sent cookies recently ([`COOKIE_WINDOW_US`]).
//!
//! A SYN's window scale and SACK-permitted options cannot fit in 32 bits of ISN; as Linux
//! does, they travel in the low 6 bits of the TSval of our SYN-ACK and come back in the
//! ACK's TSecr. Without timestamps a cookie connection has neither option (it still works,
//! with a window of at most 64 KiB and NewReno recovery).

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::isn::IsnGenerator;
use super::{bare_repr, Config, FourTuple};

/// The MSS values a cookie can carry (3 bits).
pub(crate) const MSS_TABLE: [u16; 8] = [536, 1200, 1360, 1440, 1452, 1460, 4312, 8960];

/// Period of the cookie clock, microseconds (64 s).
pub(crate) const PERIOD_US: u64 = 64_000_000;

/// How long after the last cookie sent an ACK to the listener is checked as a cookie
/// (two periods: the life of the last cookie).
pub(crate) const COOKIE_WINDOW_US: u64 = 2 * PERIOD_US;

/// TSval bits: window scale (4 bits, 15 = none) and SACK-permitted (bit 4).
const TS_OPT_BITS: u32 = 0x3F;
const TS_NO_WSCALE: u32 = 0xF;
const TS_SACK: u32 = 0x10;

/// What a valid cookie ACK tells about the SYN it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CookieSyn {
    /// Our ISN (the cookie).
    pub iss: TcpSeqNumber,
    /// The peer's ISN.
    pub irs: TcpSeqNumber,
    /// The peer's MSS, rounded down to a table entry.
    pub mss: u16,
    /// The peer's window scale (only with timestamps).
    pub window_scale: Option<u8>,
    /// SACK-permitted (only with timestamps).
    pub sack_permitted: bool,
    /// Timestamps were on.
    pub timestamps: bool,
}

fn mss_index(mss: u16) -> u32 {
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32
}

fn counter_at(now_us: u64) -> u32 {
    (now_us / PERIOD_US) as u32
}

fn cookie(isn: &IsnGenerator, tuple: &FourTuple, irs: TcpSeqNumber, counter: u32, mss: u32) -> u32 {
    let mac = isn.cookie_mac(tuple, irs.0 as u32, counter, mss) & 0x00FF_FFFF;
    (mac << 8) | ((counter & 0x1F) << 3) | (mss & 7)
}

/// Our TSval clock for `tuple`, as [`Connection`](super::Connection) runs it.
pub(crate) fn tsval(cfg: &Config, isn: &IsnGenerator, tuple: &FourTuple, now_us: u64) -> u32 {
    let tick = cfg.ts_tick.total_micros().max(1);
    ((now_us / tick) as u32).wrapping_add(isn.ts_offset(tuple))
}

/// The SYN-ACK with a cookie for `syn` (a SYN without ACK addressed to `tuple`).
pub(crate) fn syn_ack(
    cfg: &Config,
    isn: &IsnGenerator,
    tuple: &FourTuple,
    now_us: u64,
    syn: &TcpRepr,
) -> TcpRepr<'static> {
    let mss = syn.max_seg_size.unwrap_or(MSS_TABLE[0]);
    let idx = mss_index(mss);
    let iss = cookie(isn, tuple, syn.seq_number, counter_at(now_us), idx);
    let mut r = bare_repr(
        tuple.local_port,
        tuple.remote_port,
        TcpControl::Syn,
        TcpSeqNumber(iss as i32),
    );
    r.ack_number = Some(syn.seq_number + 1);
    let rcv_buf = cfg.recv_buffer.clamp(1, 1 << 30);
    r.window_len = rcv_buf.min(65535) as u16;
    let ours = cfg.mtu.saturating_sub(40).clamp(1, 65535);
    r.max_seg_size = Some(ours as u16);
    if let (true, Some(ts)) = (cfg.timestamps, syn.timestamp) {
        // Options only where they can be remembered: in the TSval.
        let mut bits = TS_NO_WSCALE;
        if cfg.window_scaling {
            if let Some(ws) = syn.window_scale {
                bits = u32::from(ws.min(14));
                r.window_scale = Some(super::conn::recv_window_scale(rcv_buf));
            }
        }
        if cfg.sack && syn.sack_permitted {
            bits |= TS_SACK;
            r.sack_permitted = true;
        }
        let tsv = (tsval(cfg, isn, tuple, now_us) & !TS_OPT_BITS) | bits;
        r.timestamp = Some(TcpTimestampRepr::new(tsv, ts.tsval));
    }
    r
}

/// Checks the ACK that completes a cookie handshake: `Some` when its acknowledgment
/// number is a cookie we issued for this 4-tuple and the peer's ISN (`SEG.SEQ - 1`) in
/// the current or the previous period.
pub(crate) fn check(
    isn: &IsnGenerator,
    tuple: &FourTuple,
    now_us: u64,
    ack: &TcpRepr,
) -> Option<CookieSyn> {
    if ack.control != TcpControl::None && ack.control != TcpControl::Psh {
        return None;
    }
    let ack_number = ack.ack_number?;
    let iss = ack_number.0.wrapping_sub(1) as u32;
    let irs = TcpSeqNumber(ack.seq_number.0.wrapping_sub(1));
    let idx = iss & 7;
    let now = counter_at(now_us);
    let valid = (0..2u32).any(|age| {
        let c = now.wrapping_sub(age);
        (iss >> 3) & 0x1F == c & 0x1F && cookie(isn, tuple, irs, c, idx) == iss
    });
    if !valid {
        return None;
    }
    let (window_scale, sack_permitted, timestamps) = match ack.timestamp {
        Some(ts) => {
            let ws = ts.tsecr & 0xF;
            (
                (ws != TS_NO_WSCALE).then_some(ws.min(14) as u8),
                ts.tsecr & TS_SACK != 0,
                true,
            )
        }
        None => (None, false, false),
    };
    Some(CookieSyn {
        iss: TcpSeqNumber(iss as i32),
        irs,
        mss: MSS_TABLE[idx as usize],
        window_scale,
        sack_permitted,
        timestamps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv4Address;

    fn tuple(port: u16) -> FourTuple {
        FourTuple {
            local_addr: Ipv4Address::new(10, 0, 0, 1),
            local_port: 4791,
            remote_addr: Ipv4Address::new(10, 0, 0, 2),
            remote_port: port,
        }
    }

    fn syn(seq: i32, ts: bool) -> TcpRepr<'static> {
        let mut s = bare_repr(40000, 4791, TcpControl::Syn, TcpSeqNumber(seq));
        s.max_seg_size = Some(1460);
        s.window_scale = Some(7);
        s.sack_permitted = true;
        s.window_len = 65535;
        if ts {
            s.timestamp = Some(TcpTimestampRepr::new(12345, 0));
        }
        s
    }

    fn ack_for(sa: &TcpRepr, seq: i32) -> TcpRepr<'static> {
        let mut a = bare_repr(40000, 4791, TcpControl::None, TcpSeqNumber(seq + 1));
        a.ack_number = Some(sa.seq_number + 1);
        a.window_len = 512;
        a.timestamp = sa.timestamp.map(|t| TcpTimestampRepr::new(12346, t.tsval));
        a
    }

    #[test]
    fn round_trip_with_options() {
        let isn = IsnGenerator::with_key([3; 16]);
        let cfg = Config::default();
        let t = tuple(40000);
        let sa = syn_ack(&cfg, &isn, &t, 5_000_000, &syn(777, true));
        assert_eq!(sa.control, TcpControl::Syn);
        assert_eq!(sa.ack_number, Some(TcpSeqNumber(778)));
        assert!(sa.sack_permitted && sa.window_scale.is_some());
        let c = check(&isn, &t, 6_000_000, &ack_for(&sa, 777)).expect("valid cookie");
        assert_eq!(c.iss, sa.seq_number);
        assert_eq!(c.irs, TcpSeqNumber(777));
        assert_eq!(c.mss, 1460);
        assert_eq!(c.window_scale, Some(7));
        assert!(c.sack_permitted && c.timestamps);
    }

    #[test]
    fn without_timestamps_no_options() {
        let isn = IsnGenerator::with_key([3; 16]);
        let cfg = Config::default();
        let t = tuple(40001);
        let sa = syn_ack(&cfg, &isn, &t, 0, &syn(-5, false));
        assert!(!sa.sack_permitted && sa.window_scale.is_none() && sa.timestamp.is_none());
        let c = check(&isn, &t, 1, &ack_for(&sa, -5)).expect("valid cookie");
        assert_eq!(
            (c.window_scale, c.sack_permitted, c.timestamps),
            (None, false, false)
        );
    }

    #[test]
    fn expires_after_two_periods_and_is_bound_to_tuple_and_isn() {
        let isn = IsnGenerator::with_key([9; 16]);
        let cfg = Config::default();
        let t = tuple(40002);
        let sa = syn_ack(&cfg, &isn, &t, 10, &syn(1, true));
        let a = ack_for(&sa, 1);
        assert!(check(&isn, &t, PERIOD_US + 10, &a).is_some());
        assert!(check(&isn, &t, 2 * PERIOD_US + 10, &a).is_none());
        assert!(check(&isn, &tuple(40003), 10, &a).is_none());
        assert!(check(&IsnGenerator::with_key([8; 16]), &t, 10, &a).is_none());
        let mut other_isn = a;
        other_isn.seq_number = TcpSeqNumber(100);
        assert!(check(&isn, &t, 10, &other_isn).is_none());
        let mut syn_flag = a;
        syn_flag.control = TcpControl::Syn;
        assert!(check(&isn, &t, 10, &syn_flag).is_none());
    }

    #[test]
    fn mss_rounds_down() {
        assert_eq!(MSS_TABLE[mss_index(1460) as usize], 1460);
        assert_eq!(MSS_TABLE[mss_index(1459) as usize], 1452);
        assert_eq!(MSS_TABLE[mss_index(100) as usize], 536);
        assert_eq!(MSS_TABLE[mss_index(u16::MAX) as usize], 8960);
    }

    #[test]
    fn forged_acks_are_rejected() {
        let isn = IsnGenerator::with_key([1; 16]);
        let t = tuple(40004);
        let mut hits = 0;
        for i in 0..20_000i32 {
            let mut a = bare_repr(40004, 4791, TcpControl::None, TcpSeqNumber(i));
            a.ack_number = Some(TcpSeqNumber(i.wrapping_mul(7919)));
            hits += usize::from(check(&isn, &t, 0, &a).is_some());
        }
        assert_eq!(hits, 0);
    }
}
