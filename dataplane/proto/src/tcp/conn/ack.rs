//! ACK processing (RFC 9293 3.10.7.4 "fifth"): SND.UNA, RTT samples (RFC 6298), the
//! congestion window through the [`CongestionControl`](super::super::CongestionControl),
//! loss recovery (RFC 6582 NewReno, RFC 6675 SACK), the send window, Eifel (RFC 3522,
//! RFC 4015).

use super::*;

impl Connection {
    /// The ACK part of RFC 9293 3.10.7.4 "fifth" for synchronized states, with RFC 6298
    /// (RTT/RTO), RFC 5681 (cwnd) and RFC 6582 (NewReno).
    pub(super) fn process_ack(
        &mut self,
        repr: &TcpRepr,
        ack: TcpSeqNumber,
        ack_off: u64,
        seg_wnd: u64,
        pure: bool,
    ) {
        let smss = self.emss as u64;
        let use_sack = self.sack_ok;
        let una_before = self.snd_una;
        let newly_sacked = if use_sack {
            self.absorb_sack_blocks(repr)
        } else {
            0
        };
        // RFC 3522 Eifel detection: the first ACK to advance SND.UNA after a timeout echoes
        // a TSval older than the first retransmission's when an original transmission
        // made it: the timeout was spurious (a peer that did not run in time, not loss).
        let spurious = match self.rto_undo {
            Some(u) if ack_off > self.snd_una => {
                self.rto_undo = None;
                let echo = repr.timestamp.map(|ts| ts.tsecr).filter(|&e| e != 0);
                match echo {
                    Some(e) if ts_lt(e, u.rtx_tsval) => {
                        // How long the original took: the timer should have waited
                        // that long (RFC 4015's response, RttEstimator::spurious_timeout).
                        // The echo is the peer's word; our own clock bounds it (from when
                        // the timer that fired was armed), so an old TSecr cannot make
                        // it longer.
                        let tick = dur_us(self.cfg.ts_tick).max(1);
                        let ticks = u64::from(self.tsval().wrapping_sub(e));
                        let own = self.now.saturating_sub(u.armed_at);
                        self.rtt
                            .spurious_timeout(ticks.saturating_mul(tick).min(own));
                        Some(u)
                    }
                    Some(_) => {
                        self.rtt.loss_detected();
                        None
                    }
                    None => None,
                }
            }
            _ => None,
        };
        if ack_off > self.snd_una {
            let acked = ack_off - self.snd_una;
            self.snd_una = ack_off;
            // Progress: the USER TIMEOUT starts over (re-armed on the next transmit poll).
            self.progress_deadline = None;
            self.sendq
                .ack_to(ack_off.saturating_sub(1).min(self.sendq.end()));
            if self.snd_nxt < self.snd_una {
                self.snd_nxt = self.snd_una;
            }
            if let Some((end, sent)) = self.rtt_timed {
                if ack_off >= end {
                    self.rtt_sample(self.now.saturating_sub(sent));
                    self.rtt_timed = None;
                }
            }
            self.retries = 0;
            self.rtx_deadline = if self.snd_una >= self.snd_max {
                None
            } else {
                Some(self.after(self.rtt.rto()))
            };
            if self.in_recovery {
                if ack_off >= self.recover {
                    if use_sack {
                        // RFC 6675 section 5: recovery ends; continue from ssthresh.
                        self.win.cwnd = self.win.ssthresh.max(smss);
                        self.sendq.clear_rtx();
                    } else {
                        // Full acknowledgment (RFC 6582 3.2 step 3).
                        let flight = self.snd_max - self.snd_una;
                        self.win.cwnd = self.win.ssthresh.min(flight.max(smss) + smss);
                    }
                    self.leave_recovery();
                    self.dupacks = 0;
                    self.fast_rtx_pending = false;
                    self.pipe = 0;
                } else if use_sack {
                    // RFC 6675: no cwnd deflation; pipe is recomputed below.
                } else {
                    // Partial acknowledgment (step 4): retransmit the first unacknowledged
                    // record, deflate cwnd.
                    self.fast_rtx_pending = true;
                    self.win.cwnd = self.win.cwnd.saturating_sub(acked);
                    if acked >= smss {
                        self.win.cwnd += smss;
                    }
                    self.win.cwnd = self.win.cwnd.max(smss);
                }
            } else {
                self.dupacks = 0;
                self.cc.on_ack(&mut self.win, acked, smss);
            }
        } else if ack_off == self.snd_una
            && pure
            && self.snd_max > self.snd_una
            && seg_wnd == self.snd_wnd
            && (!use_sack || newly_sacked > 0 || repr.sack_ranges[0].is_none())
        {
            // A duplicate ACK (RFC 5681 section 2); with SACK, one that SACKs octets not
            // SACKed before (RFC 6675 section 2, RFC 5681's SACK alternative): an ACK that
            // reports nothing new (a D-SACK of a needless resend, an ACK the path
            // doubled) is no sign that anything left the network. (One with no SACK
            // block at all still counts: a peer that agreed to SACK and sends none.)
            self.dupacks += 1;
            self.stats.dupacks_received += 1;
            if self.in_recovery {
                if !use_sack {
                    self.win.cwnd += smss;
                }
            } else if !use_sack && self.dupacks == 3 && ack_off > self.recover {
                // Fast retransmit (RFC 6582 3.2 step 2), when the ACK "covers more than
                // recover": beyond SND.MAX as it was, the careful reading (section 4:
                // after a timeout, duplicates of octets below it are what unnecessary
                // retransmissions bring; without SACK they cannot be told apart).
                let flight = self.snd_max - self.snd_una;
                self.cc.on_loss(&mut self.win, flight, smss);
                self.recover = self.snd_max;
                self.win.cwnd = self.win.ssthresh + 3 * smss;
                self.enter_recovery();
                self.rtt.loss_detected();
                self.fast_rtx_pending = true;
                self.rtt_timed = None;
                self.stats.fast_retransmits += 1;
            }
        }
        if let Some(u) = spurious {
            // RFC 4015 response: no go-back-N (the originals arrived), resume with new data
            // (SND.NXT = SND.MAX) and give back the congestion state the timeout took,
            // before this ACK's SACKs are judged. With SACK the recovery point goes back
            // too: the timeout's guarded against duplicates of a go-back resend, which
            // stops here (and with SACK duplicates that report nothing new do not count),
            // so that SACKs of what a real loss in the window left out start a fast
            // recovery (they waited for a second timeout). Without SACK it stays (RFC 6582
            // section 4: the peer's duplicate ACKs for the segments the timeouts resent
            // cannot be told from those of a loss).
            self.stats.spurious_timeouts += 1;
            self.snd_nxt = self.snd_nxt.max(self.snd_max);
            if !self.in_recovery {
                if use_sack {
                    self.recover = u.recover;
                }
                self.win.cwnd = self.win.cwnd.max(u.cwnd);
                self.win.ssthresh = u.ssthresh;
            }
        }
        if use_sack {
            let (una, high) = self.scoreboard_range();
            if !self.in_recovery
                && self.snd_max > self.snd_una
                // No new recovery until the ACK reaches the last recovery point (SND.MAX
                // when it was set; RFC 6675 5.1, HighACK >= RecoveryPoint). At the point
                // itself, only an ACK that SACKs new data counts: so a loss of the first
                // segment sent after it starts one (the ACK that ended the last recovery
                // is at it), while duplicates of what a timeout resent needlessly, which
                // SACK nothing new (RFC 6675 counts those as no duplicates), do not.
                && (ack_off > self.recover || (ack_off == self.recover && newly_sacked > 0))
                && (self.dupacks >= 3
                    || (newly_sacked > 0 && self.sendq.first_is_lost(una, high, smss))
                    || (newly_sacked > 0 && self.early_retransmit(una, high)))
            {
                // Enter SACK-based loss recovery (RFC 6675 section 5, steps 4.1-4.3).
                let flight = self.snd_max - self.snd_una;
                self.recover = self.snd_max;
                self.cc.on_loss(&mut self.win, flight, smss);
                self.enter_recovery();
                self.rtt.loss_detected();
                self.sendq.clear_rtx();
                self.fast_rtx_pending = true;
                self.rtt_timed = None;
                self.stats.fast_retransmits += 1;
            }
            if self.in_recovery {
                // Retransmissions that records sent after them overtook are lost too
                // (RFC 8985 6.2, in transmission order): NextSeg may send them again.
                let lost = self.sendq.take_lost_retransmissions(una, high);
                self.stats.lost_retransmissions += lost;
                self.pipe = self.sendq.pipe(una, high, smss);
            }
        }
        // Window update (RFC 9293 3.10.7.4: SND.WL1/SND.WL2 rule).
        let wl1_d = seq_diff(repr.seq_number, self.snd_wl1);
        if wl1_d > 0 || (wl1_d == 0 && seq_diff(ack, self.snd_wl2) >= 0) {
            let opened = seg_wnd > self.snd_wnd;
            self.snd_wnd = seg_wnd;
            self.snd_wl1 = repr.seq_number;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(seg_wnd);
            if opened {
                self.persist_backoff = 0;
            }
        }
        if let Some(h) = self.tlp_high {
            // The TLP episode (RFC 8985 7.4). A probe of new data ends it once acknowledged.
            // A probe that sent octets again ends it with a D-SACK saying they had arrived
            // before (the ACKs were late: nothing lost), or with an ACK beyond it and no
            // such D-SACK: it repaired a loss that nothing else saw, so the congestion
            // response of a fast recovery follows, and the timer's learned floor goes. (An
            // ACK that reaches just the probe's end may come ahead of the D-SACK.) Then
            // the next tail may be probed.
            if !self.tlp_rtx && ack_off >= h || self.tlp_rtx && self.tlp_dsack {
                self.tlp_high = None;
            } else if ack_off > h {
                self.tlp_high = None;
                if !self.in_recovery {
                    let cwnd = self.win.cwnd;
                    self.cc.on_loss(&mut self.win, cwnd, smss);
                    self.rtt.loss_detected();
                    self.stats.tail_loss_probe_repairs += 1;
                }
            }
        }
        if ack_off > una_before || newly_sacked > 0 {
            self.schedule_tlp();
        }
    }

    /// RFC 5827 early retransmit (the SACK variant): with fewer than four segments
    /// outstanding and no new segment that may go out (none queued, or cwnd or the
    /// peer's window full), the first outstanding segment is taken as lost once every
    /// later one is SACKed (ER_thresh = outstanding segments - 1), where waiting for
    /// three duplicate ACKs would wait for the RTO. (A tail loss probe's SACK is what
    /// usually completes the picture.)
    fn early_retransmit(&self, una: u64, high: u64) -> bool {
        let smss = self.emss as u64;
        let flight = self.snd_max.saturating_sub(self.snd_una);
        if flight.div_ceil(smss.max(1)) >= 4 {
            return false;
        }
        let room = self.win.cwnd.min(self.snd_wnd);
        let can_send_new = self.data_end() > self.snd_max && flight + smss <= room;
        !can_send_new && self.sendq.only_first_missing(una, high)
    }

    /// Stream offsets `[SND.UNA, SND.MAX)` restricted to data (no SYN, no FIN): the range
    /// the SACK scoreboard covers.
    pub(super) fn scoreboard_range(&self) -> (u64, u64) {
        let end = self.sendq.end();
        (
            self.snd_una.saturating_sub(1).min(end),
            self.snd_max.saturating_sub(1).min(end),
        )
    }

    /// Marks the records the peer's SACK blocks cover (RFC 2018, RFC 6675 "Update()").
    /// Blocks at or below SND.UNA or beyond SND.MAX are ignored. A first block that is a
    /// D-SACK (RFC 2883 section 4: below the cumulative ACK, or inside the second block)
    /// counts its octets as ones the peer received twice.
    pub(super) fn absorb_sack_blocks(&mut self, repr: &TcpRepr) -> u64 {
        let una_seq = seq_at(self.iss, self.snd_una);
        if let Some((l, r)) = repr.sack_ranges[0] {
            let (l, r) = (TcpSeqNumber(l as i32), TcpSeqNumber(r as i32));
            let below_ack = repr
                .ack_number
                .is_some_and(|a| seq_diff(r, a) <= 0 && seq_diff(l, r) < 0);
            let inside_second = repr.sack_ranges[1].is_some_and(|(l2, r2)| {
                seq_diff(l, TcpSeqNumber(l2 as i32)) >= 0
                    && seq_diff(TcpSeqNumber(r2 as i32), r) >= 0
                    && seq_diff(l, r) < 0
            });
            // The same block in an ACK with the same cumulative ACK and TSval is the same
            // report again (an ACK the path duplicated): counted once. Without timestamps
            // two reports cannot be told from one, and each is counted; with them, two
            // real reports of one block within one TSval tick and under one cumulative
            // ACK count once (a tick is 1 ms by default, 10 us on the in-memory link).
            let key = repr.timestamp.map(|t| {
                (
                    l.0 as u32,
                    r.0 as u32,
                    repr.ack_number.map_or(0, |a| a.0 as u32),
                    t.tsval,
                )
            });
            let again = key.is_some() && self.last_dsack == key;
            if (below_ack || inside_second) && !again {
                self.last_dsack = key;
                // At most what was ever sent: a block of nonsense costs only its count.
                let len = seq_diff(r, l).unsigned_abs().min(self.snd_max);
                self.stats.dsack_octets = self.stats.dsack_octets.saturating_add(len);
                self.tlp_dsack |= self.tlp_high.is_some();
            }
        }
        let mut newly = 0;
        for (l, r) in repr.sack_ranges.iter().flatten() {
            let dl = seq_diff(TcpSeqNumber(*l as i32), una_seq);
            let dr = seq_diff(TcpSeqNumber(*r as i32), una_seq);
            if dl < 0 || dr <= dl {
                continue;
            }
            let (lo, hi) = (self.snd_una + dl as u64, self.snd_una + dr as u64);
            if hi > self.snd_max || lo == 0 {
                continue;
            }
            let end = self.sendq.end();
            newly += self.sendq.mark_sacked((lo - 1).min(end), (hi - 1).min(end));
        }
        newly
    }
}
