//! Timers (RFC 6298, RFC 9293 3.8.6.1): retransmission with backoff, delayed ACK,
//! persist, user timeout, FIN-WAIT-2, TIME-WAIT; and when the next one is due.

use super::*;

impl Connection {
    // ------------------------------------------------------------------ timers

    pub(super) fn on_timers(&mut self) {
        let now = self.now;
        if self.progress_deadline.is_some_and(|t| now >= t) {
            // USER TIMEOUT: abort (RST) and report it.
            self.pending_rst = Some((seq_at(self.iss, self.snd_nxt), None));
            self.enter_closed(Some(Event::TimedOut));
            return;
        }
        if let Some(t) = self.time_wait_deadline {
            if now >= t {
                self.enter_closed(None);
                return;
            }
        }
        if let AckState::Delayed(t) = self.ack {
            if now >= t {
                self.ack = AckState::Now;
            }
        }
        if let Some(t) = self.tlp_deadline {
            if now >= t {
                self.tlp_deadline = None;
                if self.snd_max > self.snd_una && !self.in_recovery && self.tlp_high.is_none() {
                    self.tlp_pending = true;
                    // The probe goes first; the RTO waits one more RTO from now (it is
                    // set again as the probe goes out).
                    self.rtx_deadline = Some(self.after(self.rtt.rto()));
                }
            }
        }
        if let Some(t) = self.rtx_deadline {
            if now >= t {
                self.on_rto();
            }
        }
        if let Some(t) = self.persist_deadline {
            if now >= t {
                self.persist_deadline = None;
                if self.snd_wnd == 0 {
                    self.probe_pending = true;
                    self.persist_backoff = (self.persist_backoff + 1).min(16);
                } else {
                    self.persist_force = true;
                }
            }
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6, RFC 5681 3.1, RFC 6582 section 4).
    pub(super) fn on_rto(&mut self) {
        self.rtx_deadline = None;
        self.tlp_deadline = None;
        self.tlp_pending = false;
        self.tlp_high = None;
        if self.snd_una >= self.snd_max {
            return;
        }
        self.retries += 1;
        self.stats.timeouts += 1;
        let limit = if self.synchronized() {
            self.cfg.max_retries
        } else {
            self.cfg.syn_retries
        };
        if self.retries > limit {
            self.enter_closed(Some(Event::TimedOut));
            return;
        }
        let armed_at = self.now.saturating_sub(self.rtt.rto());
        self.rtt.back_off();
        self.rtt_timed = None;
        if self.synchronized() && self.ts_ok && self.rto_undo.is_none() {
            // The retransmission goes out in this same call, so with this TSval.
            self.rto_undo = Some(RtoUndo {
                rtx_tsval: self.tsval(),
                armed_at,
                cwnd: self.win.cwnd,
                ssthresh: self.win.ssthresh,
                recover: self.recover,
            });
        }
        if self.synchronized() {
            let smss = self.emss as u64;
            let flight = self.snd_max - self.snd_una;
            self.cc.on_timeout(&mut self.win, flight, smss);
            self.leave_recovery();
            self.fast_rtx_pending = false;
            self.recover = self.snd_max;
            self.dupacks = 0;
            self.pipe = 0;
            // RFC 2018 section 8: after a timeout, SACK information is not trusted.
            self.sendq.clear_sacked();
        }
        // Go back: resend from SND.UNA (from its record's start, see plan_data).
        self.snd_nxt = self.snd_una;
        if !self.synchronized() {
            self.snd_nxt = 0;
        }
    }

    /// When [`Connection::poll_transmit`] should be called next: now (the time of the
    /// last call) if something is ready to send, else the earliest timer, else `None`.
    pub fn poll_at(&self) -> Option<Instant> {
        if self.plan_next().is_some() {
            return Some(instant(self.now));
        }
        self.next_timer()
    }

    /// The earliest timer, whether or not something is ready to send: what
    /// [`Connection::poll_at`] gives once [`Connection::poll_transmit_records`] sent all
    /// it could (it returned fewer segments than it was allowed), without planning the
    /// next segment again.
    pub fn next_timer(&self) -> Option<Instant> {
        let mut t: Option<u64> = None;
        let mut take = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y: u64| y.min(x)));
            }
        };
        take(self.rtx_deadline);
        take(self.tlp_deadline);
        take(self.persist_deadline);
        take(self.progress_deadline);
        take(self.time_wait_deadline);
        if let AckState::Delayed(d) = self.ack {
            take(Some(d));
        }
        t.map(instant)
    }
}
