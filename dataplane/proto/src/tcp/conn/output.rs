//! What goes out (RFC 9293 3.8.6, RFC 5681, RFC 6582, RFC 6675): the advertised
//! receive window with SWS avoidance, then planning each segment (ACK, data whole FPDUs
//! at a time, retransmissions, SACK holes, FIN, probes) and emitting it.

use super::*;

impl Connection {
    // ------------------------------------------------------------------ receive window

    pub(super) fn free_space(&self) -> u64 {
        (self.rcv_buf.saturating_sub(self.recv.ready_len())) as u64
    }

    pub(super) fn sws_threshold(&self) -> u64 {
        // RFC 9293 3.8.6.2.2: min(Fr * RCV.BUFF, Eff.snd.MSS) with Fr = 1/2.
        ((self.rcv_buf / 2) as u64).min(self.emss as u64).max(1)
    }

    /// The window field for an outgoing segment, advancing RCV.NXT + RCV.WND only by
    /// SWS-avoiding steps and never shrinking it (RFC 9293 3.8.6.2.2).
    pub(super) fn advertise_window(&mut self) -> u16 {
        let new_right = self.rcv_nxt + self.free_space();
        if new_right > self.rcv_adv && new_right - self.rcv_adv >= self.sws_threshold() {
            self.rcv_adv = new_right;
        }
        let wnd = self.rcv_adv.saturating_sub(self.rcv_nxt);
        let unit = 1u64 << self.rcv_wscale;
        let field = wnd.div_ceil(unit).min(65535);
        self.rcv_adv = self.rcv_adv.max(self.rcv_nxt + field * unit);
        field as u16
    }

    // ------------------------------------------------------------------ output

    /// Runs the timers due at `now`, then emits every segment that is ready:
    /// `emit(repr, payload)` with `repr.payload == payload`. Emits nothing once CLOSED
    /// (except a pending RST).
    pub fn poll_transmit(&mut self, now: Instant, emit: impl FnMut(&TcpRepr, &[u8])) {
        self.poll_transmit_burst(now, usize::MAX, emit);
    }

    /// Like [`Connection::poll_transmit`], emitting at most `max` segments (for a transmit
    /// ring with that much room). Returns how many were emitted; if it is `max`, more may
    /// be ready ([`Connection::poll_at`] says so).
    pub fn poll_transmit_burst(
        &mut self,
        now: Instant,
        max: usize,
        mut emit: impl FnMut(&TcpRepr, &[u8]),
    ) -> usize {
        self.poll_transmit_records(now, max, false, |repr, _, _| emit(repr, repr.payload))
    }

    /// Like [`Connection::poll_transmit_burst`], and with `share` also says where each
    /// payload lives: `Some(p)` when one queued record holds all of `repr.payload` (the
    /// usual case, one FPDU per segment), so that a port may transmit it from `p.record`
    /// without copying (`Port::tx_zero_copy` of the `dataplane` crate), keeping
    /// a clone of it until its device has read it. `None` for segments without payload,
    /// payloads gathered from several records, and always without `share` (records are
    /// then never moved into shared buffers, which costs a little per record).
    ///
    /// The third argument is the one's complement sum of `repr.payload` (as
    /// `wire::tcp::checksum::data` gives it) when the payload is whole records, whose
    /// sums were taken as they were queued: the emitter fills the TCP checksum from it
    /// without reading the payload again. `None` when the payload is empty or splits a
    /// record.
    pub fn poll_transmit_records(
        &mut self,
        now: Instant,
        max: usize,
        share: bool,
        mut emit: impl FnMut(&TcpRepr, Option<TxPayload<'_>>, Option<u16>),
    ) -> usize {
        self.now = self.now.max(micros(now));
        self.on_timers();
        let mut n = 0;
        while n < max {
            let Some(out) = self.plan_next() else {
                break;
            };
            self.send(out, share, &mut emit);
            n += 1;
        }
        self.arm_persist();
        self.track_progress();
        n
    }

    /// Arms the USER TIMEOUT while data or our FIN waits for an acknowledgment, clears it
    /// when nothing does ([`Config::user_timeout`]).
    pub(super) fn track_progress(&mut self) {
        let waiting = matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        ) && self.snd_una < self.data_end() + u64::from(self.fin_queued);
        match self.cfg.user_timeout {
            Some(ut) if waiting => {
                if self.progress_deadline.is_none() {
                    self.progress_deadline = Some(self.after(dur_us(ut)));
                }
            }
            _ => self.progress_deadline = None,
        }
    }

    /// Persist timer (RFC 9293 3.8.6.1, RFC 1122 4.2.2.17): armed when data waits, nothing
    /// is in flight and the window does not let it go.
    pub(super) fn arm_persist(&mut self) {
        let can_send_state = matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck
        );
        let waiting = self.snd_nxt < self.data_end();
        if can_send_state && waiting && self.snd_nxt <= self.snd_una {
            if self.persist_deadline.is_none() {
                let shift = self.persist_backoff.min(16);
                let t = self
                    .rtt
                    .rto()
                    .saturating_mul(1 << shift)
                    .min(dur_us(self.cfg.rto_max));
                self.persist_deadline = Some(self.after(t));
            }
        } else {
            self.persist_deadline = None;
            self.persist_force = false;
        }
    }

    pub(super) fn plan_next(&self) -> Option<Out> {
        if let Some((seq, ack)) = self.pending_rst {
            return Some(Out {
                kind: Kind::Rst { seq, ack },
                seq_off: 0,
                data_start: 0,
                data_len: 0,
                whole: false,
                fin: false,
            });
        }
        let ack_out = Out {
            kind: Kind::Ack,
            seq_off: self.snd_nxt,
            data_start: 0,
            data_len: 0,
            whole: false,
            fin: false,
        };
        match self.state {
            State::Closed | State::Listen => None,
            State::SynSent | State::SynReceived => {
                if self.snd_nxt == 0 {
                    Some(Out {
                        kind: Kind::Syn,
                        ..ack_out
                    })
                } else if self.state == State::SynReceived && self.ack == AckState::Now {
                    Some(Out {
                        seq_off: self.snd_max,
                        ..ack_out
                    })
                } else {
                    None
                }
            }
            _ => {
                // An owed ACK carrying SACK blocks goes out on its own, before data
                // (data segments carry no SACK blocks, so EMSS stays fixed).
                if self.acks_owed > 0
                    || (self.ack == AckState::Now && self.sack_ok && self.recv.ooo_bytes() > 0)
                {
                    return Some(ack_out);
                }
                if let Some(o) = self.plan_data() {
                    return Some(o);
                }
                if self.probe_pending {
                    return Some(Out {
                        kind: Kind::Probe,
                        seq_off: self.snd_una.saturating_sub(1),
                        ..ack_out
                    });
                }
                (self.ack == AckState::Now).then_some(ack_out)
            }
        }
    }

    /// Chooses the next data/FIN segment (RFC 5044 5.3 / draft 5.3 segmentation, RFC 9293
    /// 3.8.6.2.1 sender SWS avoidance, RFC 5681 cwnd, RFC 6582 retransmissions).
    pub(super) fn plan_data(&self) -> Option<Out> {
        if !matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        ) {
            return None;
        }
        if self.fast_rtx_pending {
            if let Some(o) = self.plan_range(self.snd_una, self.snd_max, MODE_FAST) {
                return Some(o);
            }
        }
        if self.tlp_pending {
            // RFC 8985 7.3: new data if there is some and the peer's window takes it
            // (cwnd does not count for the probe), else the last segment again.
            if let Some(o) = self.plan_range(self.snd_max, self.data_end(), MODE_PROBE) {
                return Some(o);
            }
            if let Some((a, _)) = self.sendq.record_bounds(self.snd_max.saturating_sub(2)) {
                if let Some(o) = self.plan_range(a + 1, self.snd_max, MODE_PROBE) {
                    return Some(o);
                }
            }
        }
        if self.in_recovery && self.sack_ok && self.snd_nxt >= self.snd_max {
            // RFC 6675 NextSeg: rule 1 (lost holes), rule 2 (new data), rule 3 (other
            // holes below SACKed data), each only while cwnd - pipe allows.
            if let Some(o) = self.plan_sack_hole(HoleRule::Lost) {
                return Some(o);
            }
            if let Some(o) = self.plan_range(self.snd_nxt, self.data_end(), MODE_NEW) {
                return Some(o);
            }
            return self.plan_sack_hole(HoleRule::Unsacked);
        }
        if self.snd_nxt < self.snd_max {
            self.plan_range(self.snd_nxt, self.snd_max, MODE_GOBACK)
        } else {
            self.plan_range(self.snd_nxt, self.data_end(), MODE_NEW)
        }
    }

    /// A SACK-recovery retransmission of the first hole under `rule`, packing the records
    /// of that hole (RFC 6675 NextSeg at record granularity, RFC 5044 5.3 boundaries).
    pub(super) fn plan_sack_hole(&self, rule: HoleRule) -> Option<Out> {
        let smss = self.emss as u64;
        let (una, high) = self.scoreboard_range();
        let room = self.win.cwnd.saturating_sub(self.pipe);
        if room == 0 {
            return None;
        }
        let start = self.sendq.next_hole(una, high, smss, rule)?;
        let plan = self.sendq.plan_hole(start, self.emss, high);
        if plan.len == 0 || plan.len as u64 > room {
            return None;
        }
        let end = plan.start + plan.len as u64;
        Some(Out {
            kind: Kind::Data { mode: MODE_SACK },
            seq_off: plan.start + 1,
            data_start: plan.start,
            data_len: plan.len,
            whole: plan.whole && self.sendq.is_boundary(end) && self.sendq.is_boundary(start),
            fin: false,
        })
    }

    /// One segment from send offset `start`, not beyond `bound`, in `mode`.
    pub(super) fn plan_range(&self, start: u64, bound: u64, mode: u8) -> Option<Out> {
        if start == 0 {
            // The SYN is not data; plan_next sends it.
            return None;
        }
        let data_end = self.data_end();
        let fin_sent = self.fin_queued && self.snd_max > data_end;
        let bound = bound.min(data_end);
        let base = Out {
            kind: Kind::Data { mode },
            seq_off: start,
            data_start: 0,
            data_len: 0,
            whole: false,
            fin: false,
        };
        if start >= data_end {
            // No data left in this range: perhaps the FIN alone.
            let fin_due = self.fin_queued
                && start == data_end
                && if mode == MODE_NEW {
                    !fin_sent
                } else {
                    fin_sent
                };
            return fin_due.then_some(Out { fin: true, ..base });
        }
        let flight = self.snd_nxt.saturating_sub(self.snd_una);
        let wnd_right = self.snd_una + self.snd_wnd;
        let cwnd_right = if mode == MODE_FAST || mode == MODE_PROBE {
            u64::MAX
        } else if self.in_recovery && self.sack_ok {
            start.saturating_add(self.win.cwnd.saturating_sub(self.pipe))
        } else if mode == MODE_NEW && (1..=2).contains(&self.dupacks) {
            // Limited transmit (RFC 3042): on each of the first two duplicate ACKs one
            // new segment beyond cwnd, so that a loss in a small window still brings the
            // three duplicate ACKs fast retransmit needs instead of a timeout.
            self.snd_una
                .saturating_add(self.win.cwnd + self.dupacks as u64 * self.emss as u64)
        } else {
            self.snd_una.saturating_add(self.win.cwnd)
        };
        // Stream offsets (send offset k+1 is stream octet k).
        let s_start = match self.sendq.record_bounds(start - 1) {
            // Retransmissions restart at the record boundary (RFC 5044 5.3) when the record
            // fits one segment: octets below SND.UNA are resent and trimmed by the receiver.
            Some((a, b)) if mode != MODE_NEW && b - a <= self.emss as u64 => a,
            _ => start - 1,
        };
        let s_bound = bound - 1;
        let s_max_end = s_bound.min(wnd_right.min(cwnd_right).saturating_sub(1));
        let plan = self.sendq.plan(s_start, self.emss, s_max_end);
        let want = self.sendq.plan(s_start, self.emss, s_bound);
        let limited = plan.len == 0 || (!plan.whole && plan.len < want.len);
        if limited {
            // The window (or cwnd) cannot take the next record whole. Wait for ACKs while
            // data is in flight; with nothing in flight, split only when the usable window
            // is at least half the largest the peer offered (sender SWS avoidance) or the
            // persist timer said so (override timeout).
            let ok = plan.len > 0
                && (mode == MODE_FAST
                    || (flight == 0
                        && (self.persist_force || (plan.len as u64) * 2 >= self.max_snd_wnd)));
            if !ok {
                return None;
            }
        }
        let end = plan.start + plan.len as u64; // stream offset
        if end < start {
            // Nothing at or beyond `start` would go out: no progress.
            return None;
        }
        let fin = self.fin_queued
            && end + 1 == data_end
            && if mode == MODE_NEW {
                !fin_sent
            } else {
                fin_sent
            };
        Some(Out {
            seq_off: plan.start + 1,
            data_start: plan.start,
            data_len: plan.len,
            whole: plan.whole && self.sendq.is_boundary(end),
            fin,
            ..base
        })
    }

    pub(super) fn send(
        &mut self,
        out: Out,
        share: bool,
        emit: &mut impl FnMut(&TcpRepr, Option<TxPayload<'_>>, Option<u16>),
    ) {
        let mut repr = crate::tcp::bare_repr(
            self.tuple.local_port,
            self.tuple.remote_port,
            TcpControl::None,
            seq_at(self.iss, out.seq_off),
        );
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        match out.kind {
            Kind::Rst { seq, ack } => {
                self.pending_rst = None;
                repr.control = TcpControl::Rst;
                repr.seq_number = seq;
                repr.ack_number = ack;
                self.stats.segments_sent += 1;
                self.stats.resets_sent += 1;
                emit(&repr, None, None);
                self.scratch = scratch;
                return;
            }
            Kind::Syn => {
                repr.control = TcpControl::Syn;
                repr.seq_number = self.iss;
                repr.window_len = self.syn_window();
                let mss = self.cfg.mtu.saturating_sub(IP_TCP_HEADERS).clamp(1, 65535);
                repr.max_seg_size = Some(mss as u16);
                let passive = self.state == State::SynReceived;
                if self.cfg.window_scaling && (!passive || self.ws_ok) {
                    repr.window_scale = Some(self.rcv_wscale);
                }
                repr.sack_permitted = self.cfg.sack && (!passive || self.sack_ok);
                if self.cfg.timestamps && (!passive || self.ts_ok) {
                    repr.timestamp = Some(TcpTimestampRepr::new(
                        self.tsval(),
                        if passive { self.ts_recent } else { 0 },
                    ));
                }
                if passive {
                    repr.ack_number = Some(seq_at(self.irs, self.rcv_nxt));
                    self.last_ack_sent = self.rcv_nxt;
                    self.ack = AckState::Idle;
                }
                if self.snd_max > 0 {
                    self.stats.syn_retransmits += 1;
                    self.rtt_timed = None;
                } else if self.rtt_timed.is_none() {
                    self.rtt_timed = Some((1, self.now));
                }
                self.snd_nxt = 1;
                self.snd_max = self.snd_max.max(1);
                if self.rtx_deadline.is_none() {
                    self.rtx_deadline = Some(self.after(self.rtt.rto()));
                }
                self.stats.segments_sent += 1;
                emit(&repr, None, None);
                self.scratch = scratch;
                return;
            }
            Kind::Data { mode } => {
                if out.fin {
                    repr.control = TcpControl::Fin;
                } else if out.data_len > 0 {
                    repr.control = TcpControl::Psh;
                }
                let end = out.seq_off + out.data_len as u64 + u64::from(out.fin);
                // New data: a probe may carry some too.
                let fresh = mode == MODE_NEW || (mode == MODE_PROBE && out.seq_off >= self.snd_max);
                if out.data_len > 0 {
                    let st = &mut self.stats;
                    match (fresh, out.whole) {
                        (true, true) => st.new_segments_whole += 1,
                        (true, false) => st.new_segments_split += 1,
                        (false, true) => st.rtx_segments_whole += 1,
                        (false, false) => st.rtx_segments_split += 1,
                    }
                    st.octets_sent += out.data_len as u64;
                }
                match mode {
                    MODE_NEW => {
                        if self.rtt_timed.is_none() {
                            self.rtt_timed = Some((end, self.now));
                        }
                        self.snd_nxt = end;
                        self.snd_max = self.snd_max.max(end);
                    }
                    MODE_GOBACK => {
                        self.rtt_timed = None;
                        self.snd_nxt = self.snd_nxt.max(end);
                    }
                    MODE_PROBE => {
                        self.rtt_timed = None;
                        self.tlp_pending = false;
                        self.stats.tail_loss_probes += 1;
                        self.snd_nxt = self.snd_nxt.max(end);
                        self.snd_max = self.snd_max.max(end);
                        self.tlp_high = Some(self.snd_max);
                        self.tlp_rtx = !fresh;
                        self.tlp_dsack = false;
                        // RFC 8985 7.3: the RTO restarts with the probe.
                        self.rtx_deadline = Some(self.after(self.rtt.rto()));
                    }
                    _ => {
                        self.rtt_timed = None;
                        self.fast_rtx_pending = false;
                        self.snd_nxt = self.snd_nxt.max(end);
                    }
                }
                if !fresh {
                    self.stats.retransmitted_octets += out.data_len as u64;
                }
                if out.data_len > 0 && self.sack_ok {
                    self.sendq.mark_sent(out.data_start, out.data_len);
                }
                if self.in_recovery && self.sack_ok {
                    if mode == MODE_FAST || mode == MODE_SACK {
                        self.sendq.mark_rtx(out.data_start, out.data_len);
                    }
                    self.pipe += out.data_len as u64;
                }
                // The timer restarts when the oldest outstanding segment is retransmitted
                // in loss recovery (RFC 6675 section 6 leaves this to the implementer;
                // Linux does it): its ACK can come no sooner than a round trip later,
                // and a timer left running from before the loss, at SRTT plus a little,
                // fired in most recoveries on a queue a round trip deep, sending the
                // whole window again and dropping cwnd to one segment.
                let una = self.snd_una.saturating_sub(1);
                let head_again = matches!(mode, MODE_FAST | MODE_SACK)
                    && out.data_start <= una
                    && una < out.data_start + out.data_len as u64;
                if self.rtx_deadline.is_none() || head_again {
                    self.rtx_deadline = Some(self.after(self.rtt.rto()));
                }
                if mode == MODE_NEW {
                    self.schedule_tlp();
                }
                self.persist_force = false;
            }
            Kind::Probe => {
                self.probe_pending = false;
                self.stats.zero_window_probes += 1;
            }
            Kind::Ack => {}
        }
        // Every segment from here on is an ACK in a synchronized state or SYN-RECEIVED.
        repr.ack_number = Some(seq_at(self.irs, self.rcv_nxt));
        repr.window_len = self.advertise_window();
        if self.ts_ok {
            repr.timestamp = Some(TcpTimestampRepr::new(self.tsval(), self.ts_recent));
        }
        if out.kind == Kind::Ack && self.sack_ok {
            // A D-SACK goes in the next pure ACK (data segments carry no SACK blocks), first
            // (RFC 2883 section 4). One beyond RCV.NXT is followed by the block that holds
            // it (section 4.1.3), and is dropped if no block holds it any more (the
            // octets were given up: a block of them would claim what we do not have).
            let rcv_nxt = self.rcv_nxt as i64;
            let dsack = self.dsack.take();
            let holding = match dsack {
                Some((a, _)) if a >= rcv_nxt => self.recv.block_holding(a as u64 - 1),
                _ => None,
            };
            let dsack = dsack.filter(|&(a, _)| a < rcv_nxt || holding.is_some());
            let first = dsack.map(|(a, b)| {
                self.stats.dsacks_sent += 1;
                (
                    seq_at(self.irs, a as u64).0 as u32,
                    seq_at(self.irs, b as u64).0 as u32,
                )
            });
            let mut blocks = self.recv.sack_blocks(MAX_SACK_BLOCKS);
            if let Some(h) = holding.filter(|_| first.is_some()) {
                blocks.retain(|&b| b != h);
                blocks.insert(0, h);
            }
            let blocks = blocks.into_iter().map(|(a, b)| {
                (
                    seq_at(self.irs, a + 1).0 as u32,
                    seq_at(self.irs, b + 1).0 as u32,
                )
            });
            for (slot, block) in repr
                .sack_ranges
                .iter_mut()
                .zip(first.into_iter().chain(blocks))
            {
                *slot = Some(block);
            }
        }
        self.last_ack_sent = self.rcv_nxt;
        if out.kind == Kind::Ack {
            self.acks_owed = self.acks_owed.saturating_sub(1);
        }
        self.ack = if self.acks_owed > 0 {
            AckState::Now
        } else {
            AckState::Idle
        };
        self.segs_unacked = 0;
        self.stats.segments_sent += 1;
        // The payload straight from its record when one record holds it (the usual case:
        // one FPDU per segment), else gathered into the scratch buffer.
        let (payload, record): (&[u8], _) = match out.kind {
            Kind::Data { .. } if out.data_len > 0 => {
                let len = out.data_len;
                if share {
                    self.sendq.share(out.data_start, len);
                }
                match self.sendq.payload(out.data_start, len) {
                    Payload::Shared { record, offset } if share => (
                        &record[offset..offset + len],
                        Some(TxPayload {
                            record,
                            offset,
                            len,
                        }),
                    ),
                    Payload::Shared { record, offset } => (&record[offset..offset + len], None),
                    Payload::Plain(p) => (p, None),
                    Payload::Split => {
                        self.sendq.copy(out.data_start, len, &mut scratch);
                        (&scratch, None)
                    }
                }
            }
            _ => (&[], None),
        };
        let payload_sum = if payload.is_empty() {
            None
        } else {
            self.sendq.payload_sum(out.data_start, out.data_len)
        };
        repr.payload = payload;
        emit(&repr, record, payload_sum);
        self.scratch = scratch;
    }
}
