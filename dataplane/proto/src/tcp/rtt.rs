//! The retransmission timer computation of RFC 6298, in microseconds.

/// RTT estimator and RTO (RFC 6298 section 2), with the exponential backoff of section 5.5
/// and a configurable floor and ceiling.
///
/// All values are microseconds. The clock granularity G is 1 microsecond.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<u64>,
    rttvar: u64,
    /// RTO before backoff.
    base_rto: u64,
    backoff: u32,
    min: u64,
    max: u64,
    /// Floor of the variance term `K * RTTVAR`.
    var_floor: u64,
    /// A further floor of the variance term learned from spurious timeouts
    /// ([`RttEstimator::spurious_timeout`]).
    learned_floor: u64,
}

/// Most a floor learned from spurious timeouts may add to SRTT: RFC 6298's recommended
/// minimum RTO, 1 s.
pub const LEARNED_FLOOR_MAX: u64 = 1_000_000;

impl RttEstimator {
    /// A fresh estimator: RTO = `initial` (RFC 6298 2.1, 1 s recommended), bounded to
    /// `min..=max` (2.4 recommends a 1 s floor; data centres use far less).
    pub fn new(initial: u64, min: u64, max: u64) -> Self {
        let max = max.max(1);
        let min = min.min(max);
        RttEstimator {
            srtt: None,
            rttvar: 0,
            base_rto: initial.clamp(min, max),
            backoff: 0,
            min,
            max,
            var_floor: 0,
            learned_floor: 0,
        }
    }

    /// Floors the variance term: RTO = SRTT + max(4 RTTVAR, `floor`) (then clamped to
    /// `min..=max`). RFC 6298 2.3 has max(G, K*RTTVAR) with G the clock granularity; a
    /// larger floor (Linux keeps RTTVAR at least its minimum RTO) keeps RTO from closing
    /// in on SRTT when the RTT is steady, so a peer that is late by a little more than
    /// the RTT's jitter (not scheduled, say) does not set off a spurious timeout.
    pub fn with_var_floor(mut self, floor: u64) -> Self {
        self.var_floor = floor;
        self
    }

    /// Takes one RTT measurement `r` (RFC 6298 2.2 and 2.3) and clears the backoff
    /// (section 5.7: a new RTT sample after a backoff recomputes RTO).
    pub fn sample(&mut self, r: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                // RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT <- 7/8 SRTT + 1/8 R'.
                let delta = srtt.abs_diff(r);
                self.rttvar = self.rttvar - self.rttvar / 4 + delta / 4;
                self.srtt = Some(srtt - srtt / 8 + r / 8);
            }
        }
        self.recompute();
        self.backoff = 0;
    }

    /// RTO = SRTT + max(K * RTTVAR, floors), clamped (RFC 6298 2.3 and 2.4).
    fn recompute(&mut self) {
        let Some(srtt) = self.srtt else {
            return;
        };
        let k_rttvar = self
            .rttvar
            .saturating_mul(4)
            .max(1)
            .max(self.var_floor)
            .max(self.learned_floor);
        self.base_rto = srtt.saturating_add(k_rttvar).clamp(self.min, self.max);
    }

    /// A timeout was found spurious (RFC 3522: the original transmission arrived) and its
    /// original took `rtt` microseconds to be acknowledged: the RTO was too short for this
    /// path, typically a peer that did not run for a while (a descheduled thread, a
    /// preempted virtual CPU). RFC 4015 section 4 lets the response make the timer more
    /// conservative; here the variance term's floor is raised so that an RTO this long
    /// would have covered `rtt`, with a quarter to spare (at most the RTO ceiling). Unlike
    /// RTTVAR it does not decay with every sample (a peer that stalls every few hundred
    /// milliseconds would be forgotten in a few round trips); evidence of loss clears it
    /// ([`RttEstimator::loss_detected`]). At most `LEARNED_FLOOR_MAX` (1 s): a stall longer
    /// than that is an outage, not lateness to wait out on every later loss. The backoff
    /// goes back to none.
    pub fn spurious_timeout(&mut self, rtt: u64) {
        let need = rtt.saturating_sub(self.srtt.unwrap_or(0));
        let want = need
            .saturating_add(need / 4)
            .min(LEARNED_FLOOR_MAX)
            .min(self.max);
        self.learned_floor = self.learned_floor.max(want);
        self.recompute();
        // The backoff of timeouts that were no loss is undone as well (RFC 4015
        // section 4 lets the response set the timer anew).
        self.backoff = 0;
    }

    /// Loss was detected (a timeout that was not spurious, or loss recovery entered): a
    /// path that loses segments needs its timer short, so the floor learned from spurious
    /// timeouts goes back to the configured one.
    pub fn loss_detected(&mut self) {
        if self.learned_floor != 0 {
            self.learned_floor = 0;
            self.recompute();
        }
    }

    /// The variance term's floor learned from spurious timeouts, microseconds.
    pub fn learned_floor(&self) -> u64 {
        self.learned_floor
    }

    /// Doubles the RTO (RFC 6298 5.5), up to the ceiling.
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(32);
    }

    /// The current RTO in microseconds, backoff included.
    pub fn rto(&self) -> u64 {
        let shifted = if self.backoff >= 32 {
            u64::MAX
        } else {
            self.base_rto.saturating_mul(1u64 << self.backoff)
        };
        shifted.min(self.max)
    }

    /// SRTT in microseconds, once a sample was taken.
    pub fn srtt(&self) -> Option<u64> {
        self.srtt
    }

    /// RTTVAR in microseconds.
    pub fn rttvar(&self) -> u64 {
        self.rttvar
    }

    /// How many times the RTO has been doubled since the last sample.
    pub fn backoff_count(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_formulas() {
        let mut e = RttEstimator::new(1_000_000, 200_000, 60_000_000);
        assert_eq!(e.rto(), 1_000_000);
        e.sample(100_000);
        // SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR = 300 ms.
        assert_eq!(e.srtt(), Some(100_000));
        assert_eq!(e.rto(), 300_000);
        e.sample(100_000);
        // RTTVAR = 3/4 * 50 ms; RTO = 100 + 4 * 37.5 = 250 ms.
        assert_eq!(e.rttvar(), 37_500);
        assert_eq!(e.rto(), 250_000);
        e.back_off();
        assert_eq!(e.rto(), 500_000);
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(), 60_000_000);
        let mut f = RttEstimator::new(1_000_000, 200_000, 60_000_000);
        f.sample(10);
        // Floor.
        assert_eq!(f.rto(), 200_000);
    }

    #[test]
    fn variance_floor() {
        let mut e = RttEstimator::new(1_000, 50, 1_000_000).with_var_floor(200);
        for _ in 0..50 {
            e.sample(500);
        }
        // RTTVAR decayed to almost nothing; the floor keeps RTO 200 above SRTT.
        assert!(e.rttvar() < 5);
        assert_eq!(e.rto(), 700);
        let mut f = RttEstimator::new(1_000, 50, 1_000_000);
        for _ in 0..50 {
            f.sample(500);
        }
        assert!(f.rto() < 520);
    }

    #[test]
    fn spurious_timeouts_raise_the_floor_and_loss_clears_it() {
        let mut e = RttEstimator::new(1_000, 50, 100_000).with_var_floor(200);
        for _ in 0..50 {
            e.sample(500);
        }
        assert_eq!(e.rto(), 700);
        // The original took 4.5 ms (the timer backed off twice meanwhile): the floor
        // covers 4 ms above SRTT with a quarter spare, and the backoff is undone.
        e.back_off();
        e.back_off();
        assert_eq!((e.rto(), e.backoff_count()), (2_800, 2));
        e.spurious_timeout(4_500);
        assert_eq!(e.learned_floor(), 5_000);
        assert_eq!((e.rto(), e.backoff_count()), (5_500, 0));
        // Samples do not wear it down (RTTVAR alone would).
        for _ in 0..1_000 {
            e.sample(500);
        }
        assert_eq!(e.rto(), 5_500);
        // A shorter spurious one does not lower it; a longer one raises it.
        e.spurious_timeout(1_000);
        assert_eq!(e.rto(), 5_500);
        e.spurious_timeout(8_500);
        assert_eq!(e.learned_floor(), 10_000);
        // Loss takes it back to the configured floor.
        e.loss_detected();
        assert_eq!(e.learned_floor(), 0);
        assert_eq!(e.rto(), 700);
        // Never above the ceiling, nor above LEARNED_FLOOR_MAX.
        e.spurious_timeout(u64::MAX);
        assert_eq!(e.rto(), 100_000);
        let mut f = RttEstimator::new(1_000, 50, 60_000_000);
        f.sample(500);
        f.spurious_timeout(u64::MAX);
        assert_eq!(f.learned_floor(), LEARNED_FLOOR_MAX);
    }

    #[test]
    fn low_floor() {
        let mut e = RttEstimator::new(1_000, 50, 1_000_000);
        e.sample(20);
        assert_eq!(e.rto(), 60);
    }
}
