//! Congestion control: how big the congestion window is (RFC 5681).
//!
//! The engine detects loss and runs recovery itself (duplicate ACKs and NewReno partial
//! acknowledgments, RFC 6582; SACK `pipe`, RFC 6675; spurious timeouts undone, RFC 4015);
//! a [`CongestionControl`] decides the sizes: how the window grows as data is
//! acknowledged, and where `ssthresh` and `cwnd` go when a loss is found or the
//! retransmission timer fires. [`NewReno`] (RFC 5681 with byte counting, RFC 3465) is the
//! one there is; the trait leaves room for CUBIC (RFC 9438) or DCTCP (RFC 8257).
//! [`Config::congestion`](super::Config::congestion) picks one per connection.

use std::fmt;

/// The congestion window and slow-start threshold of a connection, octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// cwnd.
    pub cwnd: u64,
    /// ssthresh (`u64::MAX`: not set yet, slow start until the first loss).
    pub ssthresh: u64,
}

/// A congestion controller (see the module docs). `smss` is the sender maximum segment
/// size, `flight` the octets outstanding (`SND.MAX - SND.UNA`) when the event happened.
pub trait CongestionControl: fmt::Debug + Send {
    /// The algorithm's name.
    fn name(&self) -> &'static str;
    /// The window when the connection is established: `initial_segments` of `smss`
    /// (RFC 5681 3.1 IW, RFC 6928).
    fn init(&mut self, w: &mut Window, smss: u64, initial_segments: u32);
    /// `acked` octets of new data were acknowledged outside loss recovery.
    fn on_ack(&mut self, w: &mut Window, acked: u64, smss: u64);
    /// A loss was found (three duplicate ACKs, or SACK): the window loss recovery starts
    /// from. The engine may inflate `cwnd` from there (RFC 6582 adds three segments).
    fn on_loss(&mut self, w: &mut Window, flight: u64, smss: u64);
    /// The retransmission timer fired.
    fn on_timeout(&mut self, w: &mut Window, flight: u64, smss: u64);
}

/// The algorithms there are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Congestion {
    /// [`NewReno`].
    #[default]
    NewReno,
}

impl Congestion {
    /// A new controller of this kind.
    pub fn controller(self) -> Box<dyn CongestionControl> {
        match self {
            Congestion::NewReno => Box::<NewReno>::default(),
        }
    }
}

/// RFC 5681: slow start with appropriate byte counting (RFC 3465, L = 2), congestion
/// avoidance adding one segment per window of acknowledged octets, `ssthresh` at half the
/// flight size on a loss (at least two segments), one segment after a timeout.
#[derive(Debug, Clone, Default)]
pub struct NewReno {
    /// Octets acknowledged in congestion avoidance since `cwnd` last grew.
    ca_acked: u64,
}

impl CongestionControl for NewReno {
    fn name(&self) -> &'static str {
        "newreno"
    }

    fn init(&mut self, w: &mut Window, smss: u64, initial_segments: u32) {
        w.cwnd = u64::from(initial_segments.max(1)) * smss;
        w.ssthresh = u64::MAX;
        self.ca_acked = 0;
    }

    fn on_ack(&mut self, w: &mut Window, acked: u64, smss: u64) {
        if w.cwnd < w.ssthresh {
            w.cwnd += acked.min(2 * smss);
        } else {
            self.ca_acked += acked;
            if self.ca_acked >= w.cwnd {
                self.ca_acked -= w.cwnd;
                w.cwnd += smss;
            }
        }
    }

    fn on_loss(&mut self, w: &mut Window, flight: u64, smss: u64) {
        w.ssthresh = (flight / 2).max(2 * smss);
        w.cwnd = w.ssthresh;
    }

    fn on_timeout(&mut self, w: &mut Window, flight: u64, smss: u64) {
        w.ssthresh = (flight / 2).max(2 * smss);
        w.cwnd = smss;
        self.ca_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMSS: u64 = 1000;

    #[test]
    fn newreno_grows_and_backs_off_as_rfc_5681_says() {
        let mut cc = Congestion::NewReno.controller();
        assert_eq!(cc.name(), "newreno");
        let mut w = Window {
            cwnd: 0,
            ssthresh: 0,
        };
        cc.init(&mut w, SMSS, 10);
        assert_eq!((w.cwnd, w.ssthresh), (10 * SMSS, u64::MAX));
        // Slow start: at most two segments per ACK (RFC 3465 L = 2).
        cc.on_ack(&mut w, 5 * SMSS, SMSS);
        assert_eq!(w.cwnd, 12 * SMSS);
        // A loss with 20 segments in flight: half of it.
        cc.on_loss(&mut w, 20 * SMSS, SMSS);
        assert_eq!((w.cwnd, w.ssthresh), (10 * SMSS, 10 * SMSS));
        // Congestion avoidance: one segment per cwnd of acknowledged octets.
        for _ in 0..9 {
            cc.on_ack(&mut w, SMSS, SMSS);
        }
        assert_eq!(w.cwnd, 10 * SMSS);
        cc.on_ack(&mut w, SMSS, SMSS);
        assert_eq!(w.cwnd, 11 * SMSS);
        // A timeout: one segment; ssthresh at least two.
        cc.on_timeout(&mut w, SMSS, SMSS);
        assert_eq!((w.cwnd, w.ssthresh), (SMSS, 2 * SMSS));
    }
}
