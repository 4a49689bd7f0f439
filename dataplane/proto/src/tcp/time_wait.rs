//! TIME-WAIT without the connection (RFC 9293 3.6, 3.10.7.4): once both FINs are
//! acknowledged, all a 4-tuple needs for its 2 MSL is what it takes to acknowledge a
//! retransmitted FIN. [`TimeWait`] keeps exactly that (a few dozen octets), so the poll
//! core can free the [`Connection`](super::Connection) and its buffers at once and keep
//! many TIME-WAIT tuples for little memory.

use smoltcp::time::Instant;
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::seq::{seq_diff, ts_lt};
use super::{bare_repr, FourTuple};

/// A 4-tuple in TIME-WAIT: what it takes to acknowledge a retransmitted FIN for 2 MSL
/// once the connection itself is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWait {
    /// The 4-tuple.
    pub tuple: FourTuple,
    /// Our SND.NXT (after our FIN).
    pub snd_nxt: TcpSeqNumber,
    /// Our RCV.NXT (after the peer's FIN).
    pub rcv_nxt: TcpSeqNumber,
    /// Window to advertise (already scaled down).
    pub window: u16,
    /// Timestamps: (our clock offset, tick in µs, TS.Recent), when negotiated.
    pub ts: Option<(u32, u64, u32)>,
    /// When the 2 MSL end.
    pub deadline: Instant,
    /// Length of 2 MSL (to restart it on a retransmitted FIN).
    pub two_msl: smoltcp::time::Duration,
}

/// What to do with a segment for a tuple in TIME-WAIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeWaitAction {
    /// Send this ACK (a retransmitted FIN, or any other segment: RFC 9293 3.10.7.4).
    Ack(TcpRepr<'static>),
    /// Nothing to send.
    Drop,
    /// A SYN that may reopen the tuple (RFC 6191: its timestamp, or else its sequence
    /// number, is beyond the old incarnation's): forget the TIME-WAIT and hand the SYN to
    /// the listener.
    Reopen,
}

impl TimeWait {
    /// Handles a segment for this tuple at `now`. RSTs are ignored (RFC 1337: a RST must
    /// not cut TIME-WAIT short).
    pub fn on_segment(&mut self, now: Instant, repr: &TcpRepr) -> TimeWaitAction {
        if repr.src_port != self.tuple.remote_port || repr.dst_port != self.tuple.local_port {
            return TimeWaitAction::Drop;
        }
        match repr.control {
            TcpControl::Rst => return TimeWaitAction::Drop,
            TcpControl::Syn if repr.ack_number.is_none() => {
                let newer = match (self.ts, repr.timestamp) {
                    (Some((_, _, recent)), Some(ts)) => ts_lt(recent, ts.tsval),
                    _ => seq_diff(repr.seq_number, self.rcv_nxt) > 0,
                };
                return if newer {
                    TimeWaitAction::Reopen
                } else {
                    TimeWaitAction::Ack(self.ack(now))
                };
            }
            TcpControl::Fin => {
                // The peer's FIN again: our last ACK was lost; restart 2 MSL.
                self.deadline = now + self.two_msl;
            }
            _ => {}
        }
        if let (Some((o, t, recent)), Some(ts)) = (self.ts, repr.timestamp) {
            if !ts_lt(ts.tsval, recent) {
                self.ts = Some((o, t, ts.tsval));
            }
        }
        TimeWaitAction::Ack(self.ack(now))
    }

    /// The ACK this tuple sends.
    pub fn ack(&self, now: Instant) -> TcpRepr<'static> {
        let mut r = bare_repr(
            self.tuple.local_port,
            self.tuple.remote_port,
            TcpControl::None,
            self.snd_nxt,
        );
        r.ack_number = Some(self.rcv_nxt);
        r.window_len = self.window;
        if let Some((offset, tick, recent)) = self.ts {
            let us = now.total_micros().max(0) as u64;
            let tsval = ((us / tick.max(1)) as u32).wrapping_add(offset);
            r.timestamp = Some(TcpTimestampRepr::new(tsval, recent));
        }
        r
    }

    /// Whether the 2 MSL have passed.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv4Address;

    fn tw() -> TimeWait {
        TimeWait {
            tuple: FourTuple {
                local_addr: Ipv4Address::new(10, 0, 0, 1),
                local_port: 49152,
                remote_addr: Ipv4Address::new(10, 0, 0, 2),
                remote_port: 4791,
            },
            snd_nxt: TcpSeqNumber(1000),
            rcv_nxt: TcpSeqNumber(5000),
            window: 100,
            ts: Some((7, 1000, 50)),
            deadline: Instant::from_secs(60),
            two_msl: smoltcp::time::Duration::from_secs(60),
        }
    }

    fn seg(control: TcpControl, seq: i32, tsval: Option<u32>) -> TcpRepr<'static> {
        let mut r = bare_repr(4791, 49152, control, TcpSeqNumber(seq));
        if control != TcpControl::Syn {
            r.ack_number = Some(TcpSeqNumber(1000));
        }
        r.timestamp = tsval.map(|v| TcpTimestampRepr::new(v, 0));
        r
    }

    #[test]
    fn retransmitted_fin_is_acked_and_restarts_two_msl() {
        let mut t = tw();
        let now = Instant::from_secs(30);
        let TimeWaitAction::Ack(a) = t.on_segment(now, &seg(TcpControl::Fin, 4999, Some(60)))
        else {
            panic!("no ACK")
        };
        assert_eq!(a.seq_number, TcpSeqNumber(1000));
        assert_eq!(a.ack_number, Some(TcpSeqNumber(5000)));
        assert_eq!(a.timestamp.map(|t| t.tsecr), Some(60));
        assert_eq!(t.deadline, Instant::from_secs(90));
        assert!(!t.expired(Instant::from_secs(89)));
        assert!(t.expired(Instant::from_secs(90)));
    }

    #[test]
    fn rst_ignored_newer_syn_reopens_old_syn_acked() {
        let mut t = tw();
        let now = Instant::from_secs(1);
        assert_eq!(
            t.on_segment(now, &seg(TcpControl::Rst, 5000, None)),
            TimeWaitAction::Drop
        );
        assert_eq!(
            t.on_segment(now, &seg(TcpControl::Syn, 1, Some(51))),
            TimeWaitAction::Reopen
        );
        assert!(matches!(
            t.on_segment(now, &seg(TcpControl::Syn, 1, Some(49))),
            TimeWaitAction::Ack(_)
        ));
        t.ts = None;
        assert_eq!(
            t.on_segment(now, &seg(TcpControl::Syn, 6000, None)),
            TimeWaitAction::Reopen
        );
        assert!(matches!(
            t.on_segment(now, &seg(TcpControl::Syn, 4000, None)),
            TimeWaitAction::Ack(_)
        ));
    }
}
