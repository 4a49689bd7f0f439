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
}

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
        let srtt = self.srtt.unwrap_or(r);
        let k_rttvar = self.rttvar.saturating_mul(4).max(1).max(self.var_floor);
        self.base_rto = srtt.saturating_add(k_rttvar).clamp(self.min, self.max);
        self.backoff = 0;
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
    fn low_floor() {
        let mut e = RttEstimator::new(1_000, 50, 1_000_000);
        e.sample(20);
        assert_eq!(e.rto(), 60);
    }
}
