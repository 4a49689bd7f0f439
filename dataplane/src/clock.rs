//! The clock the poll loops read, once per iteration.
//!
//! [`now`] reads the CPU's invariant counter (the x86 TSC where CPUID reports it invariant,
//! aarch64's CNTVCT) and scales it to nanoseconds with a factor calibrated once per process
//! against the OS's monotonic clock (the `quanta` crate; the first reading pays for the
//! calibration, a millisecond or so). Where the CPU has no such counter it reads the OS
//! clock, as [`std::time::Instant`] does.
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
        // Over 50 ms the counter-based clock and std's may differ by calibration error
        // and the readings' own jitter; 2 % leaves room for a busy machine.
        let (q0, s0) = (now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (q1, s1) = (now(), std::time::Instant::now());
        let (q, s) = ((q1 - q0).as_secs_f64(), (s1 - s0).as_secs_f64());
        assert!(
            (q / s - 1.0).abs() < 0.02,
            "clock measured {q} s while std measured {s} s"
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
        let mut last = 0;
        let mut m = Monotonic::new();
        for _ in 0..100_000 {
            let t = m.micros();
            assert!(t >= last);
            last = t;
        }
    }
}
