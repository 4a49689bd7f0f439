//! The clock the poll loops read, once per iteration.
//!
//! [`now`] reads the CPU's invariant counter (the x86 TSC where CPUID reports it invariant,
//! aarch64's CNTVCT) and scales it to nanoseconds with a factor calibrated once per process
//! against the OS's monotonic clock (the `quanta` crate; the first reading in a process pays
//! for the calibration, from half a millisecond up to 200 ms). Where the CPU has no such
//! counter (on x86, an invariant TSC and RDTSCP) it reads the OS clock, as
//! [`std::time::Instant`] does.
//!
//! Why: the OS clock costs a system-call-free but still slow vDSO call (about 33 ns on the
//! AMD EPYC VM this was measured on, against 12 ns for the counter), and a core reads the
//! clock on every poll; with a busy bench loop beside it that was 13 % of a two-thread
//! `write-bw` profile.
//!
//! The counter can differ by a little between CPUs, so two readings on different CPUs may
//! run backwards: subtraction saturates at zero, and [`Monotonic`] keeps a loop's times
//! from ever going back.

use std::time::Duration;

pub use quanta::Instant;

/// The current time (see the module docs for the source).
#[inline]
pub fn now() -> Instant {
    Instant::now()
}

/// Microseconds since an epoch that never go backwards, for one loop's timers.
#[derive(Debug, Clone, Copy)]
pub struct Monotonic {
    epoch: Instant,
    last_us: i64,
}

impl Monotonic {
    /// A clock whose time 0 is now.
    pub fn new() -> Self {
        Monotonic {
            epoch: now(),
            last_us: 0,
        }
    }

    /// Microseconds since the epoch: the clock's reading, or the last value returned when
    /// the reading is older (a reading on another CPU whose counter lags).
    #[inline]
    pub fn micros(&mut self) -> i64 {
        self.advance_to(now() - self.epoch)
    }

    /// Takes `since_epoch` as the new time unless it is older than the last one.
    #[inline]
    fn advance_to(&mut self, since_epoch: Duration) -> i64 {
        let us = i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX);
        if us > self.last_us {
            self.last_us = us;
        }
        self.last_us
    }
}

impl Default for Monotonic {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_os_clock() {
        // Each reading of this clock is bracketed by two of std's, so a thread preempted
        // between readings widens the bracket instead of failing the test; 1 % on top
        // covers the calibration's error.
        let bracket = || {
            let a = std::time::Instant::now();
            let q = now();
            (a, q, std::time::Instant::now())
        };
        let (a0, q0, b0) = bracket();
        std::thread::sleep(Duration::from_millis(100));
        let (a1, q1, b1) = bracket();
        let q = (q1 - q0).as_secs_f64();
        let (lo, hi) = ((a1 - b0).as_secs_f64(), (b1 - a0).as_secs_f64());
        assert!(
            q >= lo * 0.99 && q <= hi * 1.01,
            "clock measured {q} s while std measured {lo} to {hi} s"
        );
    }

    #[test]
    fn monotonic_never_goes_back() {
        let mut m = Monotonic::new();
        assert_eq!(m.advance_to(Duration::from_micros(10)), 10);
        // A lagging reading (another CPU's counter) keeps the last time.
        assert_eq!(m.advance_to(Duration::from_micros(7)), 10);
        assert_eq!(m.advance_to(Duration::from_micros(11)), 11);
        // Beyond i64 microseconds saturates rather than wrapping negative.
        assert_eq!(m.advance_to(Duration::MAX), i64::MAX);
    }
}
