//! Segment arrival (RFC 9293 3.10.7): SYN-SENT, the synchronized states' checks in
//! order (sequence acceptability, RST, SYN, ACK, URG, text, FIN), when to acknowledge.

use super::*;

/// Where in-order octets go when they skip the receive buffer
/// ([`Connection::on_segment_deliver`]): `(stream_offset, octets)`.
type Deliver<'a> = &'a mut dyn FnMut(u64, &[u8], bool);

impl Connection {
    // ------------------------------------------------------------------ input

    /// Processes one arriving segment (RFC 9293 section 3.10.7 "SEGMENT ARRIVES"). The
    /// segment's data is `repr.payload`. Never panics; malformed or hostile segments are
    /// dropped, answered with an ACK or a challenge ACK (RFC 5961) or with a RST, as the
    /// RFCs say. Call [`Connection::poll_transmit`] afterwards for any answer.
    ///
    /// The caller demultiplexes by 4-tuple; a segment whose ports do not match is dropped.
    pub fn on_segment(&mut self, now: Instant, repr: &TcpRepr) {
        self.on_segment_inner(now, repr, None, false);
    }

    /// [`Connection::on_segment`], and in-order data that nothing waits before (the
    /// receive buffer is empty) goes straight to `deliver(stream_offset, octets)` from the
    /// segment, instead of being copied into the receive buffer for
    /// [`Connection::recv`]: the MPA deframer reads it from the port's frame. Everything
    /// else (out of order, behind buffered octets) is buffered as `on_segment` buffers it,
    /// for `recv` to hand out in order.
    pub fn on_segment_deliver(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        deliver: &mut dyn FnMut(u64, &[u8]),
    ) {
        let mut d = |off: u64, data: &[u8], _: bool| deliver(off, data);
        self.on_segment_inner(now, repr, Some(&mut d), false);
    }

    /// [`Connection::on_segment_deliver`] that also shows octets arriving out of order:
    /// `deliver(stream_offset, octets, in_order)`. In-order octets (`true`) are as for
    /// `on_segment_deliver`; out-of-order octets (`false`) are shown once stored, and only
    /// when all of them are new to the receive buffer (none held before): it keeps the
    /// first octets it gets for a range, so these are exactly the octets it will deliver
    /// there in order later. (MPA with markers finds and places FPDUs in them early,
    /// RFC 5044 section 5.3, RFC 5041 section 3.)
    pub fn on_segment_deliver_out_of_order(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        deliver: &mut dyn FnMut(u64, &[u8], bool),
    ) {
        self.on_segment_inner(now, repr, Some(deliver), true);
    }

    fn on_segment_inner(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        deliver: Option<Deliver<'_>>,
        out_of_order: bool,
    ) {
        self.now = self.now.max(micros(now));
        if repr.src_port != self.tuple.remote_port || repr.dst_port != self.tuple.local_port {
            self.stats.segments_dropped += 1;
            return;
        }
        self.stats.segments_received += 1;
        match self.state {
            State::Closed => {
                if let Some(r) = crate::tcp::reset_for(repr) {
                    self.pending_rst = Some((r.seq_number, r.ack_number));
                }
            }
            State::Listen => {}
            State::SynSent => self.on_segment_syn_sent(repr),
            _ => self.on_segment_synchronized(repr, deliver, out_of_order),
        }
        // An ACK may have closed the window or ended what was in flight: the persist
        // timer and the USER TIMEOUT are armed now, not at the next transmit (which may
        // never come when nothing can be sent).
        self.arm_persist();
        self.track_progress();
    }

    /// RFC 9293 section 3.10.7.3, SYN-SENT.
    pub(super) fn on_segment_syn_sent(&mut self, repr: &TcpRepr) {
        let is_rst = repr.control == TcpControl::Rst;
        // First, check the ACK bit.
        let mut ack_ok = false;
        if let Some(ack) = repr.ack_number {
            let d = seq_diff(ack, self.iss);
            ack_ok = d > 0 && d as u64 <= self.snd_max;
            if !ack_ok {
                if !is_rst {
                    self.pending_rst = Some((ack, None));
                }
                self.stats.segments_dropped += 1;
                return;
            }
        }
        // Second, the RST bit.
        if is_rst {
            if ack_ok {
                self.enter_closed(Some(Event::Reset));
            } else {
                self.stats.segments_dropped += 1;
            }
            return;
        }
        // Fourth, the SYN bit.
        if repr.control != TcpControl::Syn {
            self.stats.segments_dropped += 1;
            return;
        }
        self.absorb_syn(repr);
        if let Some(ack) = repr.ack_number {
            let ack_off = seq_diff(ack, self.iss) as u64;
            self.snd_una = ack_off;
            if let Some((end, sent)) = self.rtt_timed.take() {
                if ack_off >= end {
                    self.rtt_sample(self.now.saturating_sub(sent));
                }
            }
            self.rtx_deadline = None;
            self.retries = 0;
            self.init_cwnd();
            self.state = State::Established;
            self.events.push_back(Event::Established);
            self.ack = AckState::Now;
        } else {
            // Simultaneous open: SYN-RECEIVED, send SYN,ACK with the same ISS.
            self.state = State::SynReceived;
            self.snd_nxt = 0;
            self.rtt_timed = None;
        }
        // Data in a SYN is not taken; it is not acknowledged, so the peer sends it again.
    }

    /// RFC 9293 section 3.10.7.4, every state from SYN-RECEIVED on.
    pub(super) fn on_segment_synchronized(
        &mut self,
        repr: &TcpRepr,
        deliver: Option<Deliver<'_>>,
        out_of_order: bool,
    ) {
        let is_rst = repr.control == TcpControl::Rst;
        let is_syn = repr.control == TcpControl::Syn;
        let is_fin = repr.control == TcpControl::Fin;
        let rcv_nxt_seq = seq_at(self.irs, self.rcv_nxt);
        let seg_off = off_of(self.rcv_nxt, rcv_nxt_seq, repr.seq_number);
        let seg_len = repr.payload.len() as i64 + i64::from(is_syn) + i64::from(is_fin);
        let wnd = self.rcv_adv.saturating_sub(self.rcv_nxt) as i64;
        let nxt = self.rcv_nxt as i64;

        // A retransmitted SYN in SYN-RECEIVED: our SYN,ACK was lost; send it again.
        if self.state == State::SynReceived
            && is_syn
            && repr.ack_number.is_none()
            && repr.seq_number == self.irs
        {
            if self.snd_una == 0 {
                self.snd_nxt = 0;
            }
            return;
        }

        // RFC 7323 5.3: PAWS, before the sequence number check.
        if self.ts_ok && !is_rst && self.ts_recent_valid {
            // RFC 7323 5.5: TS.Recent older than 24 days is stale.
            // With finer ticks the TSval clock wraps sooner: 2^31 ticks, at most 24 days.
            let stale = dur_us(self.cfg.ts_tick)
                .max(1)
                .saturating_mul(1 << 31)
                .min(24 * 86_400 * 1_000_000);
            if self.now.saturating_sub(self.ts_recent_age) > stale {
                self.ts_recent_valid = false;
            } else if let Some(ts) = repr.timestamp {
                if ts_lt(ts.tsval, self.ts_recent) {
                    self.stats.paws_rejected += 1;
                    self.ack = AckState::Now;
                    return;
                }
            }
        }
        if self.ts_ok && !is_rst && repr.timestamp.is_none() {
            // RFC 7323 3.2: a non-RST segment without TSopt SHOULD be dropped silently.
            self.stats.segments_dropped += 1;
            return;
        }

        // RFC 5961 section 4.2: a SYN in a synchronized state gets a challenge ACK,
        // whatever its sequence number (this replaces RFC 9293's "fourth" step).
        if is_syn {
            self.challenge_ack();
            return;
        }

        // First, check the sequence number (RFC 9293 3.10.7.4 table).
        let acceptable = if seg_len == 0 {
            if wnd == 0 {
                seg_off == nxt
            } else {
                nxt <= seg_off && seg_off < nxt + wnd
            }
        } else if wnd == 0 {
            // Special allowance: take the ACK of a data segment at RCV.NXT (zero-window
            // probe), drop its text below.
            seg_off == nxt
        } else {
            let last = seg_off + seg_len - 1;
            (nxt <= seg_off && seg_off < nxt + wnd) || (nxt <= last && last < nxt + wnd)
        };
        if !acceptable {
            if !is_rst {
                self.owe_ack();
                let old = seg_off + seg_len <= nxt;
                self.stats.duplicate_segments += u64::from(old);
                if old && !repr.payload.is_empty() {
                    self.note_duplicate(seg_off, seg_off + repr.payload.len() as i64);
                }
            }
            self.stats.segments_dropped += 1;
            return;
        }

        // Second, the RST bit (RFC 5961 section 3.2).
        if is_rst {
            if seg_off == nxt {
                self.recv.clear();
                self.ooo_held_since = None;
                self.enter_closed(Some(Event::Reset));
            } else {
                self.challenge_ack();
            }
            return;
        }

        // Fifth, the ACK field.
        let Some(ack) = repr.ack_number else {
            self.stats.segments_dropped += 1;
            return;
        };
        let una_seq = seq_at(self.iss, self.snd_una);
        let ack_rel = seq_diff(ack, una_seq);
        let ack_off = self.snd_una as i64 + ack_rel;
        if self.state == State::SynReceived {
            if ack_rel > 0 && ack_off as u64 <= self.snd_max {
                // A close() in SYN-RECEIVED takes effect now (RFC 9293 3.10.4).
                self.state = if self.fin_queued {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.events.push_back(Event::Established);
                self.snd_una = ack_off as u64;
                if self.snd_nxt < self.snd_una {
                    self.snd_nxt = self.snd_una;
                }
                if let Some((end, sent)) = self.rtt_timed.take() {
                    if self.snd_una >= end {
                        self.rtt_sample(self.now.saturating_sub(sent));
                    }
                }
                self.rtx_deadline = None;
                self.retries = 0;
                self.init_cwnd();
                self.snd_wnd = u64::from(repr.window_len) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = repr.seq_number;
                self.snd_wl2 = ack;
            } else {
                self.pending_rst = Some((ack, None));
                self.stats.segments_dropped += 1;
                return;
            }
        }
        // RFC 5961 section 5.2 and RFC 9293: an ACK for data not yet sent, or older than
        // the largest window the peer ever offered, is answered with an ACK and dropped.
        if ack_off > self.snd_max as i64
            || ack_off < (self.snd_una as i64).saturating_sub(self.max_snd_wnd as i64)
        {
            self.challenge_ack();
            self.stats.segments_dropped += 1;
            return;
        }
        let ack_off_u = ack_off.max(0) as u64;
        let seg_wnd = u64::from(repr.window_len) << self.snd_wscale;
        let pure = repr.payload.is_empty() && !is_fin;
        self.process_ack(repr, ack, ack_off_u, seg_wnd, pure);

        // RFC 7323 4.3: update TS.Recent when the segment covers Last.ACK.sent.
        if self.ts_ok {
            if let Some(ts) = repr.timestamp {
                let last_ack = self.last_ack_sent as i64;
                if seg_off <= last_ack && !ts_lt(ts.tsval, self.ts_recent) {
                    self.ts_recent = ts.tsval;
                    self.ts_recent_valid = true;
                    self.ts_recent_age = self.now;
                }
            }
        }

        let fin_acked = self.fin_queued && self.snd_una == self.data_end() + 1;
        match self.state {
            State::FinWait1 if fin_acked => {
                self.state = State::FinWait2;
                // Not in RFC 9293: a peer that never sends its FIN must not hold the
                // connection forever (Linux tcp_fin_timeout). The TIME-WAIT deadline field
                // serves as the FIN-WAIT-2 deadline.
                self.time_wait_deadline = Some(self.after(dur_us(self.cfg.fin_wait2_timeout)));
            }
            State::Closing if fin_acked => self.enter_time_wait(),
            State::LastAck if fin_acked => {
                self.enter_closed(None);
                return;
            }
            _ => {}
        }

        // Seventh, the segment text.
        let takes_text = matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        );
        let mut fin_in_window = is_fin;
        if takes_text && !repr.payload.is_empty() {
            if wnd == 0 {
                // Data beyond a zero window: dropped, ACK tells the peer.
                self.ack = AckState::Now;
                fin_in_window = false;
            } else {
                let right = nxt + wnd;
                let start = seg_off.max(nxt);
                let end = (seg_off + repr.payload.len() as i64).min(right);
                if seg_off < nxt {
                    // The front of the segment was received before.
                    self.note_duplicate(seg_off, nxt.min(seg_off + repr.payload.len() as i64));
                }
                if end < seg_off + repr.payload.len() as i64 {
                    fin_in_window = false;
                }
                if start < end {
                    let a = (start - seg_off) as usize;
                    let b = (end - seg_off) as usize;
                    // Receive offset k+1 is stream octet k.
                    let stream_off = (start - 1) as u64;
                    let text = &repr.payload[a..b];
                    let held_before = self.recv.ooo_bytes();
                    let ins = match deliver {
                        Some(d) if self.recv.in_order_and_empty(stream_off) => {
                            d(stream_off, text, true);
                            self.recv.delivered(text.len())
                        }
                        Some(d) if out_of_order => {
                            let ins = self.recv.insert(stream_off, text);
                            if ins.out_of_order && self.recv.ooo_bytes() == held_before + text.len()
                            {
                                d(stream_off, text, false);
                            }
                            ins
                        }
                        _ => self.recv.insert(stream_off, text),
                    };
                    self.rcv_nxt = self.recv.nxt() + 1;
                    self.ooo_held_since = if self.recv.ooo_bytes() == 0 {
                        None
                    } else if held_before == 0 {
                        Some(self.now)
                    } else {
                        self.ooo_held_since
                    };
                    if ins.out_of_order {
                        self.stats.out_of_order_segments += 1;
                        if ins.duplicate {
                            // Beyond a hole, and held already.
                            self.note_duplicate(start, end);
                        }
                        self.owe_ack();
                    } else if ins.duplicate {
                        self.stats.duplicate_segments += 1;
                        self.owe_ack();
                    } else if ins.filled_hole {
                        self.ack = AckState::Now;
                    } else {
                        self.schedule_ack();
                    }
                } else {
                    self.stats.duplicate_segments += 1;
                    self.owe_ack();
                }
            }
        }

        // Eighth, the FIN bit.
        if is_fin && fin_in_window && takes_text {
            let fin_off = (seg_off + repr.payload.len() as i64).max(0) as u64;
            if fin_off >= self.rcv_nxt {
                self.rcv_fin = Some(fin_off);
            }
        }
        if is_fin && self.state == State::TimeWait {
            // A retransmitted FIN: acknowledge it and restart the 2 MSL timeout.
            self.ack = AckState::Now;
            self.time_wait_deadline = Some(self.after(dur_us(self.cfg.msl).saturating_mul(2)));
        }
        self.maybe_consume_fin();
    }

    pub(super) fn maybe_consume_fin(&mut self) {
        let Some(fin) = self.rcv_fin else {
            return;
        };
        if fin != self.rcv_nxt {
            if fin < self.rcv_nxt {
                self.rcv_fin = None;
            }
            return;
        }
        self.rcv_fin = None;
        self.rcv_nxt += 1;
        self.ack = AckState::Now;
        if !self.peer_fin_reported {
            self.peer_fin_reported = true;
            self.events.push_back(Event::PeerClosed);
        }
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                let fin_acked = self.fin_queued && self.snd_una == self.data_end() + 1;
                if fin_acked {
                    self.enter_time_wait();
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(),
            _ => {}
        }
    }

    pub(super) fn enter_time_wait(&mut self) {
        self.state = State::TimeWait;
        self.rtx_deadline = None;
        self.persist_deadline = None;
        self.time_wait_deadline = Some(self.after(dur_us(self.cfg.msl).saturating_mul(2)));
    }

    /// Octets `[start, end)` (receive offsets) arrived again: the next pure ACK reports
    /// them in a D-SACK block (RFC 2883), so the peer can tell a needless retransmission.
    /// With SACK only (the block goes where SACK blocks go). Duplicates that touch the
    /// one not yet reported join it (a burst of retransmissions, one block); otherwise
    /// the latest wins.
    fn note_duplicate(&mut self, start: i64, end: i64) {
        if !self.sack_ok || start < 1 || start >= end {
            return;
        }
        self.dsack = Some(match self.dsack {
            Some((a, b)) if start <= b && a <= end => (a.min(start), b.max(end)),
            _ => (start, end),
        });
    }

    /// An immediate ACK for an out-of-order, duplicate or unacceptable segment.
    pub(super) fn owe_ack(&mut self) {
        self.acks_owed = (self.acks_owed + 1).min(64);
        self.ack = AckState::Now;
    }

    /// Delayed ACK (RFC 9293 3.8.6.3, RFC 5681 4.2): every `ack_every`-th segment, or when
    /// the timer fires.
    pub(super) fn schedule_ack(&mut self) {
        self.segs_unacked += 1;
        if self.segs_unacked >= self.cfg.ack_every.max(1)
            || self.cfg.delayed_ack.total_micros() == 0
        {
            self.ack = AckState::Now;
        } else if self.ack == AckState::Idle {
            self.ack = AckState::Delayed(self.after(dur_us(self.cfg.delayed_ack)));
        }
    }

    /// A challenge ACK (RFC 5961 sections 3.2, 4.2, 5.2), rate-limited per connection to
    /// [`Config::challenge_ack_limit`] per second (section 7).
    pub(super) fn challenge_ack(&mut self) {
        if self.now.saturating_sub(self.challenge_window_start) >= 1_000_000 {
            self.challenge_window_start = self.now;
            self.challenge_count = 0;
        }
        if self.challenge_count < self.cfg.challenge_ack_limit {
            self.challenge_count += 1;
            self.stats.challenge_acks += 1;
            self.ack = AckState::Now;
        }
    }

    /// Stream offset + 1 after the last queued data octet: the send offset of the FIN.
    pub(super) fn data_end(&self) -> u64 {
        1 + self.sendq.end()
    }
}
