//! Queue pairs wired back to back in memory.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use wire::ddp::{TaggedHeader, UntaggedHeader};
use wire::rdmap::{self, Opcode, ReadRequest, TermError, Terminate};

const PD: u32 = 7;
const MULPDU: usize = 1448;

struct Side {
    mrs: Arc<MrTable>,
    qp: Qp,
}

struct Pair {
    a: Side,
    b: Side,
    /// ULPDUs that went from A to B and from B to A, in order.
    a_to_b: Vec<Vec<u8>>,
    b_to_a: Vec<Vec<u8>>,
    /// With markers: each direction's MPA stream (A to B, then B to A), through which the
    /// ULPDUs go as FPDUs, delivered where they arrive ([`Qp::on_ulpdu_runs`]).
    marked: Option<[MarkedLink; 2]>,
    /// Each ULPDU is asked for with exactly the length [`Qp::next_ulpdu_len`] announces
    /// (as the core does to put several in one record), which must be what it gets.
    predict: bool,
}

/// One direction's FPDU stream, markers and CRC on.
struct MarkedLink {
    framer: wire::mpa::fpdu::Framer,
    deframer: wire::mpa::deframe::Deframer,
    scratch: Vec<u8>,
}

impl MarkedLink {
    /// A stream whose marker origin lies `origin` octets before its first FPDU.
    fn new(origin: u64) -> Self {
        let mode = wire::mpa::fpdu::FpduMode {
            markers: true,
            crc: true,
        };
        MarkedLink {
            framer: wire::mpa::fpdu::Framer::at_offset(mode, origin),
            deframer: wire::mpa::deframe::Deframer::at_offset(mode, origin),
            scratch: Vec::new(),
        }
    }

    /// Frames `ulpdu` and hands it to `qp` as it lies between the markers (an empty one,
    /// which no FPDU carries, as it is).
    fn carry(&mut self, ulpdu: &[u8], qp: &mut Qp) {
        if ulpdu.is_empty() {
            return qp.on_ulpdu(ulpdu);
        }
        let mut wire = Vec::new();
        self.framer.frame(ulpdu, &mut wire).unwrap();
        let scratch = &mut self.scratch;
        let mut n = 0;
        self.deframer
            .push_runs_hinted(&wire, &Default::default(), |f| {
                n += 1;
                qp.on_ulpdu_runs(Some(f.stream_offset), f.ulpdu, scratch);
            })
            .unwrap();
        assert_eq!(n, 1);
    }
}

fn cfg(qpn: u32) -> QpConfig {
    QpConfig::new(qpn, PD)
}

fn side(c: QpConfig) -> Side {
    let mrs = Arc::new(MrTable::new());
    Side {
        qp: Qp::new(c, mrs.clone()),
        mrs,
    }
}

fn pair() -> Pair {
    pair_with(cfg(1), cfg(2))
}

fn pair_with(a: QpConfig, b: QpConfig) -> Pair {
    Pair {
        a: side(a),
        b: side(b),
        a_to_b: Vec::new(),
        b_to_a: Vec::new(),
        marked: None,
        predict: false,
    }
}

impl Pair {
    /// Moves ULPDUs both ways until neither side has anything to send.
    fn pump(&mut self, mulpdu: usize) {
        let mut buf = Vec::with_capacity(mulpdu);
        loop {
            let mut moved = false;
            buf.clear();
            while poll(&mut self.a.qp, self.predict, mulpdu, &mut buf) {
                assert!(buf.len() <= mulpdu);
                match &mut self.marked {
                    Some([ab, _]) => ab.carry(&buf, &mut self.b.qp),
                    None => self.b.qp.on_ulpdu(&buf),
                }
                if self.a_to_b.len() < 10_000 {
                    self.a_to_b.push(buf.clone());
                }
                buf.clear();
                moved = true;
            }
            while poll(&mut self.b.qp, self.predict, mulpdu, &mut buf) {
                assert!(buf.len() <= mulpdu);
                match &mut self.marked {
                    Some([_, ba]) => ba.carry(&buf, &mut self.a.qp),
                    None => self.a.qp.on_ulpdu(&buf),
                }
                if self.b_to_a.len() < 10_000 {
                    self.b_to_a.push(buf.clone());
                }
                buf.clear();
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }
}

/// `qp.poll_ulpdu(mulpdu, buf)`, or with `predict` with the length
/// [`Qp::next_ulpdu_len`] announces, checking it gets exactly that.
fn poll(qp: &mut Qp, predict: bool, mulpdu: usize, buf: &mut Vec<u8>) -> bool {
    if !predict {
        return qp.poll_ulpdu(mulpdu, buf);
    }
    let Some(len) = qp.next_ulpdu_len(mulpdu) else {
        assert!(!qp.poll_ulpdu(mulpdu, &mut Vec::new()), "nothing announced");
        return false;
    };
    assert!(len <= mulpdu);
    assert_eq!(qp.next_ulpdu_len(mulpdu), Some(len), "announced again");
    assert!(qp.poll_ulpdu(len, buf));
    assert_eq!(buf.len(), len);
    true
}

fn completions(qp: &mut Qp) -> Vec<Completion> {
    std::iter::from_fn(|| qp.poll_completion()).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn reg(s: &Side, base: u64, len: usize, access: Access) -> Arc<MemoryRegion> {
    s.mrs.register(PD, base, len, access).unwrap()
}

fn sge(mr: &MemoryRegion, off: u64, len: u32) -> Sge {
    Sge {
        stag: mr.stag(),
        to: mr.base_to() + off,
        len,
    }
}

fn ok(wr_id: u64, opcode: WcOpcode, byte_len: u32, qpn: u32) -> Completion {
    Completion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        qpn,
        solicited: false,
        invalidated_stag: None,
        term: None,
    }
}

const SIZES: [usize; 8] = [
    0,
    1,
    MULPDU - 18 - 1,
    MULPDU - 18,
    MULPDU - 18 + 1,
    65536,
    3 * 1024 * 1024 + 5,
    MULPDU - 14 + 1,
];

#[test]
fn sends_every_size() {
    for &len in &SIZES {
        let mut p = pair();
        let src = reg(&p.a, 0x1000, len.max(1), Access::empty());
        let data = pattern(len, 3);
        src.write(0, &data).unwrap();
        let dst = reg(&p.b, 0x9000, len + 16, Access::LOCAL_WRITE);
        dst.fill(0xEE);
        p.b.qp
            .post_recv(RecvWr {
                wr_id: 77,
                local: sge(&dst, 0, len as u32 + 16),
            })
            .unwrap();
        p.a.qp
            .post_send(SendWr {
                wr_id: 5,
                op: SendOp::Send,
                local: sge(&src, 0, len as u32),
                signaled: true,
            })
            .unwrap();
        p.pump(MULPDU);
        assert_eq!(
            completions(&mut p.a.qp),
            vec![ok(5, WcOpcode::Send, len as u32, 1)]
        );
        assert_eq!(
            completions(&mut p.b.qp),
            vec![ok(77, WcOpcode::Recv, len as u32, 2)]
        );
        let got = dst.to_vec();
        assert_eq!(&got[..len], &data[..], "len {len}");
        assert_eq!(&got[len..], &[0xEE; 16]);
        // Segments: MSN 1, MO advancing, L only on the last, each within MULPDU.
        let expect_segs = if len == 0 {
            1
        } else {
            len.div_ceil(MULPDU - 18)
        };
        assert_eq!(p.a_to_b.len(), expect_segs.min(10_000));
        let mut mo = 0;
        for (i, u) in p.a_to_b.iter().enumerate() {
            let seg = rdmap::parse_segment(u).unwrap();
            let wire::ddp::DdpHeader::Untagged(h) = seg.header else {
                panic!()
            };
            assert_eq!((h.qn, h.msn, h.mo), (0, 1, mo));
            assert_eq!(h.last, i + 1 == expect_segs);
            mo += seg.payload.len() as u32;
        }
        assert_eq!(p.a.qp.state(), QpState::Rts);
        assert_eq!(p.b.qp.state(), QpState::Rts);
    }
}

#[test]
fn writes_every_size_last_octet_visible() {
    for &len in &SIZES {
        let mut p = pair();
        let src = reg(&p.a, 0, len.max(1), Access::empty());
        let data = pattern(len, 9);
        src.write(0, &data).unwrap();
        let dst = reg(&p.b, 0x7000_0000, len + 20, Access::REMOTE_WRITE);
        dst.fill(0x11);
        p.a.qp
            .post_send(SendWr {
                wr_id: 1,
                op: SendOp::Write {
                    remote_stag: dst.stag(),
                    remote_to: 0x7000_0000 + 10,
                },
                local: sge(&src, 0, len as u32),
                signaled: true,
            })
            .unwrap();
        p.pump(MULPDU);
        assert_eq!(
            completions(&mut p.a.qp),
            vec![ok(1, WcOpcode::Write, len as u32, 1)]
        );
        assert!(completions(&mut p.b.qp).is_empty());
        let got = dst.to_vec();
        assert_eq!(&got[..10], &[0x11; 10]);
        assert_eq!(&got[10..10 + len], &data[..]);
        assert_eq!(&got[10 + len..], &[0x11; 10]);
        if len > 0 {
            assert_eq!(dst.load_u8_acquire(10 + len - 1), data.last().copied());
        }
        let mut to = 0x7000_0000 + 10;
        for u in &p.a_to_b {
            let seg = rdmap::parse_segment(u).unwrap();
            let wire::ddp::DdpHeader::Tagged(h) = seg.header else {
                panic!()
            };
            assert_eq!((h.stag, h.to), (dst.stag(), to));
            to += seg.payload.len() as u64;
        }
    }
}

#[test]
fn reads_every_size() {
    for &len in &SIZES {
        let mut p = pair();
        let src = reg(&p.b, 0x4000, len + 8, Access::REMOTE_READ);
        let data = pattern(len, 1);
        src.write(8, &data).unwrap();
        let sink = reg(&p.a, 0x100, len + 4, Access::LOCAL_WRITE);
        sink.fill(0x22);
        p.a.qp
            .post_send(SendWr {
                wr_id: 9,
                op: SendOp::Read {
                    remote_stag: src.stag(),
                    remote_to: 0x4008,
                },
                local: sge(&sink, 2, len as u32),
                signaled: true,
            })
            .unwrap();
        p.pump(MULPDU);
        assert_eq!(
            completions(&mut p.a.qp),
            vec![ok(9, WcOpcode::Read, len as u32, 1)]
        );
        assert!(completions(&mut p.b.qp).is_empty());
        let got = sink.to_vec();
        assert_eq!(&got[..2], &[0x22; 2]);
        assert_eq!(&got[2..2 + len], &data[..]);
        assert_eq!(&got[2 + len..], &[0x22; 2]);
        assert_eq!(p.a_to_b.len(), 1);
        let seg = rdmap::parse_segment(&p.a_to_b[0]).unwrap();
        assert_eq!(seg.opcode, Opcode::RdmaReadRequest);
        assert_eq!(p.b.qp.stats().read_responses_sent, 1);
    }
}

#[test]
fn send_with_invalidate_and_solicited() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let victim = reg(&p.b, 0, 64, Access::REMOTE_WRITE);
    let dst = reg(&p.b, 0x100, 64, Access::LOCAL_WRITE);
    for i in 0..2 {
        p.b.qp
            .post_recv(RecvWr {
                wr_id: 10 + i,
                local: sge(&dst, 0, 64),
            })
            .unwrap();
    }
    p.a.qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::SendSolicitedInvalidate {
                stag: victim.stag(),
            },
            local: sge(&src, 0, 10),
            signaled: true,
        })
        .unwrap();
    p.a.qp
        .post_send(SendWr {
            wr_id: 2,
            op: SendOp::SendSolicited,
            local: sge(&src, 0, 3),
            signaled: false,
        })
        .unwrap();
    p.pump(MULPDU);
    assert_eq!(completions(&mut p.a.qp), vec![ok(1, WcOpcode::Send, 10, 1)]);
    let c = completions(&mut p.b.qp);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].invalidated_stag, Some(victim.stag()));
    assert!(c[0].solicited && c[1].solicited);
    assert_eq!((c[0].byte_len, c[1].byte_len), (10, 3));
    assert!(!victim.is_valid());
    assert_eq!(
        p.b.mrs.lookup(victim.stag()).map(|m| m.is_valid()),
        Some(false)
    );
}

#[test]
fn ord_limits_outstanding_reads_and_orders_completions() {
    let mut ca = cfg(1);
    ca.ord = 2;
    let mut p = pair_with(ca, cfg(2));
    let src = reg(&p.b, 0, 4096, Access::REMOTE_READ);
    src.write(0, &pattern(4096, 5)).unwrap();
    let sink = reg(&p.a, 0, 4 * 4096, Access::LOCAL_WRITE);
    let dst = reg(&p.b, 0x10000, 16, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 50,
            local: sge(&dst, 0, 16),
        })
        .unwrap();
    for i in 0..3u64 {
        p.a.qp
            .post_send(SendWr {
                wr_id: i,
                op: SendOp::Read {
                    remote_stag: src.stag(),
                    remote_to: 0,
                },
                local: sge(&sink, i * 4096, 4096),
                signaled: true,
            })
            .unwrap();
    }
    p.a.qp
        .post_send(SendWr {
            wr_id: 3,
            op: SendOp::Send,
            local: sge(&sink, 0, 0),
            signaled: true,
        })
        .unwrap();
    // A alone: two Read Requests go out, the third waits, and so does the Send after it.
    let mut out = Vec::new();
    let mut reqs = Vec::new();
    while p.a.qp.poll_ulpdu(MULPDU, &mut out) {
        reqs.push(std::mem::take(&mut out));
    }
    assert_eq!(reqs.len(), 2);
    assert_eq!(p.a.qp.outstanding_reads(), 2);
    assert!(!p.a.qp.has_tx());
    for r in &reqs {
        p.b.qp.on_ulpdu(r);
    }
    p.pump(MULPDU);
    let c = completions(&mut p.a.qp);
    let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    for i in 0..3 {
        let mut v = vec![0; 4096];
        sink.read(i * 4096, &mut v).unwrap();
        assert_eq!(v, pattern(4096, 5));
    }
    assert_eq!(completions(&mut p.b.qp).len(), 1);
}

#[test]
fn send_completion_waits_for_earlier_read() {
    let mut p = pair();
    let src = reg(&p.b, 0, 8, Access::REMOTE_READ);
    let sink = reg(&p.a, 0, 8, Access::LOCAL_WRITE);
    let dst = reg(&p.b, 0x100, 8, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 1,
            local: sge(&dst, 0, 8),
        })
        .unwrap();
    p.a.qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Read {
                remote_stag: src.stag(),
                remote_to: 0,
            },
            local: sge(&sink, 0, 8),
            signaled: true,
        })
        .unwrap();
    p.a.qp
        .post_send(SendWr {
            wr_id: 2,
            op: SendOp::Send,
            local: sge(&sink, 0, 4),
            signaled: true,
        })
        .unwrap();
    let mut out = Vec::new();
    while p.a.qp.poll_ulpdu(MULPDU, &mut out) {}
    // The Send is on the wire but its completion waits for the Read's.
    assert!(p.a.qp.poll_completion().is_none());
    p.b.qp.on_ulpdu(&out[..46]);
    p.b.qp.on_ulpdu(&out[46..]);
    p.pump(MULPDU);
    let ids: Vec<u64> = completions(&mut p.a.qp).iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn read_responses_and_sends_alternate() {
    let mut p = pair();
    let src = reg(&p.b, 0, 3 * MULPDU, Access::REMOTE_READ);
    let bsrc = reg(&p.b, 0x10_0000, 3 * MULPDU, Access::empty());
    let sink = reg(&p.a, 0, 3 * MULPDU, Access::LOCAL_WRITE);
    let adst = reg(&p.a, 0x10_0000, 3 * MULPDU, Access::LOCAL_WRITE);
    for i in 0..2 {
        p.a.qp
            .post_recv(RecvWr {
                wr_id: i,
                local: sge(&adst, 0, 3 * MULPDU as u32),
            })
            .unwrap();
        p.a.qp
            .post_send(SendWr {
                wr_id: i,
                op: SendOp::Read {
                    remote_stag: src.stag(),
                    remote_to: 0,
                },
                local: sge(&sink, 0, 2 * MULPDU as u32),
                signaled: true,
            })
            .unwrap();
        p.b.qp
            .post_send(SendWr {
                wr_id: i,
                op: SendOp::Send,
                local: sge(&bsrc, 0, 2 * MULPDU as u32),
                signaled: true,
            })
            .unwrap();
    }
    let mut out = Vec::new();
    while p.a.qp.poll_ulpdu(MULPDU, &mut out) {
        p.b.qp.on_ulpdu(&out);
        out.clear();
    }
    let mut ops = Vec::new();
    while p.b.qp.poll_ulpdu(MULPDU, &mut out) {
        let seg = rdmap::parse_segment(&out).unwrap();
        if seg.last() {
            ops.push(seg.opcode);
        }
        p.a.qp.on_ulpdu(&out);
        out.clear();
    }
    assert_eq!(
        ops,
        vec![
            Opcode::RdmaReadResponse,
            Opcode::Send,
            Opcode::RdmaReadResponse,
            Opcode::Send
        ]
    );
    assert_eq!(completions(&mut p.a.qp).len(), 4);
}

#[test]
fn read_rtr_response_is_absorbed() {
    let mut ca = cfg(1);
    ca.read_rtr_sink = Some((1, 0));
    ca.tx_next_msn[1] = 2;
    let mut p = pair_with(ca, cfg(2));
    let rr = rdmap::zero_length_read_response(&ReadRequest {
        sink_stag: 1,
        sink_to: 0,
        read_message_size: 0,
        source_stag: 1,
        source_to: 0,
    });
    p.a.qp.on_ulpdu(&rr);
    assert_eq!(p.a.qp.state(), QpState::Rts);
    // Zero-length Write RTR and Send RTR: a Send RTR needs a receive like any Send.
    p.a.qp.on_ulpdu(&rdmap::zero_length_write(1));
    assert_eq!(p.a.qp.state(), QpState::Rts);
    // A zero-length Read Request RTR on B is answered by a zero-length Read Response.
    p.b.qp
        .on_ulpdu(&rdmap::zero_length_read_request(1, 1, 0, 1, 0));
    let mut out = Vec::new();
    assert!(p.b.qp.poll_ulpdu(MULPDU, &mut out));
    assert_eq!(out, rr);
    assert!(completions(&mut p.a.qp).is_empty());
    // A second one is a violation (no Read outstanding).
    p.a.qp.on_ulpdu(&rr);
    assert_eq!(
        p.a.qp.terminate_sent().unwrap().error.triple(),
        (0, 2, 0x06)
    );
}

// ---------------------------------------------------------------------------------------
// Violations
// ---------------------------------------------------------------------------------------

/// Feeds one ULPDU to B, then checks the Terminate B sends and that A (receiving it)
/// goes to Error too.
fn expect_terminate(p: &mut Pair, triple: (u8, u8, u8)) -> Terminate {
    assert_eq!(p.b.qp.state(), QpState::Terminating);
    let t = *p.b.qp.terminate_sent().expect("terminate queued");
    assert_eq!(t.error.triple(), triple, "{t}");
    assert!(p.b.qp.has_tx());
    let mut out = Vec::new();
    assert!(p.b.qp.poll_ulpdu(MULPDU, &mut out));
    assert!(p.b.qp.terminate_flushed());
    assert_eq!(p.b.qp.state(), QpState::Error);
    assert!(!p.b.qp.poll_ulpdu(MULPDU, &mut out.clone()));
    let seg = rdmap::parse_segment(&out).unwrap();
    assert_eq!(seg.opcode, Opcode::Terminate);
    p.a.qp.on_ulpdu(&out);
    assert_eq!(p.a.qp.state(), QpState::Error);
    assert_eq!(p.a.qp.terminate_received(), Some(&t));
    t
}

fn write_wr(src: &MemoryRegion, len: u32, stag: u32, to: u64) -> SendWr {
    SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_stag: stag,
            remote_to: to,
        },
        local: sge(src, 0, len),
        signaled: true,
    }
}

/// Sends A's first ULPDU to B only.
fn one_segment(p: &mut Pair) -> Vec<u8> {
    let mut out = Vec::new();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut out));
    p.b.qp.on_ulpdu(&out);
    out
}

fn write_violation(access: Access, pd: u32, to_off: i64, len: u32, triple: (u8, u8, u8)) {
    let mut p = pair();
    let src = reg(&p.a, 0, 4096, Access::empty());
    src.fill(0xAB);
    let dst = p.b.mrs.register(pd, 0x1000, 100, access).unwrap();
    dst.fill(0x5C);
    let other = reg(&p.b, 0x2000, 100, Access::all());
    other.fill(0x5C);
    let to = (0x1000i64 + to_off) as u64;
    p.a.qp
        .post_send(write_wr(&src, len, dst.stag(), to))
        .unwrap();
    p.a.qp
        .post_send(write_wr(&src, 4, other.stag(), 0x2000))
        .unwrap();
    let seg = one_segment(&mut p);
    let t = expect_terminate(&mut p, triple);
    assert_eq!(t.ddp_segment_length, Some(seg.len() as u16));
    assert_eq!(
        t.ddp_header,
        Some(wire::ddp::DdpHeader::decode(&seg).unwrap())
    );
    assert_eq!(t.rdmap_header, None);
    assert_eq!(dst.to_vec(), vec![0x5C; 100]);
    assert_eq!(other.to_vec(), vec![0x5C; 100]);
    // A: the first Write completed when handed out (TCP owns it then); the second one,
    // not started, is flushed. The error is in `terminate_received`.
    let c = completions(&mut p.a.qp);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[1].status, WcStatus::Flushed);
    assert_eq!(
        p.a.qp.terminate_received().map(|t| t.error.triple()),
        Some(triple)
    );
    assert!(completions(&mut p.b.qp).is_empty());
}

#[test]
fn write_violations() {
    let rw = Access::REMOTE_WRITE;
    write_violation(rw, PD, 0, 101, (1, 1, 0x01)); // past the end
    write_violation(rw, PD, -1, 10, (1, 1, 0x01)); // before the start
    write_violation(rw, PD + 1, 0, 10, (1, 1, 0x02)); // wrong PD
    write_violation(Access::REMOTE_READ, PD, 0, 10, (1, 1, 0x00)); // no REMOTE_WRITE
}

#[test]
fn write_bad_stag_and_to_wrap() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    p.a.qp.post_send(write_wr(&src, 8, 0x1234_5600, 0)).unwrap();
    one_segment(&mut p);
    expect_terminate(&mut p, (1, 1, 0x00));

    let mut p = pair();
    let dst = reg(&p.b, u64::MAX - 100, 100, Access::REMOTE_WRITE);
    let hdr = TaggedHeader {
        last: true,
        rsvd_ulp: Opcode::RdmaWrite.rdmap_control(),
        stag: dst.stag(),
        to: u64::MAX - 3,
    };
    let mut u = hdr.to_bytes().to_vec();
    u.extend_from_slice(&[1; 8]);
    p.b.qp.on_ulpdu(&u);
    expect_terminate(&mut p, (1, 1, 0x03));
    assert_eq!(dst.to_vec(), vec![0; 100]);

    // A deregistered (stale) STag and an invalidated one.
    let mut p = pair();
    let dst = reg(&p.b, 0, 100, Access::REMOTE_WRITE);
    assert!(p.b.mrs.deregister(dst.stag()));
    p.a.qp
        .post_send(write_wr(&src_of(&p), 8, dst.stag(), 0))
        .unwrap();
    one_segment(&mut p);
    expect_terminate(&mut p, (1, 1, 0x00));
    assert_eq!(dst.to_vec(), vec![0; 100]);
}

/// A tagged segment placed from between markers is refused as a contiguous one is: the
/// Terminate quotes the whole segment (its length counts no marker), and nothing is
/// placed. Marker origins put markers in the header (such segments are taken whole) and
/// in the payload.
#[test]
fn marked_write_violations_quote_the_whole_segment() {
    for origin in (0..600).step_by(7) {
        for (len, stag_ok, triple) in [(1000u32, true, (1, 1, 0x01)), (1000, false, (1, 1, 0x00))] {
            let mut p = pair();
            p.marked = Some([MarkedLink::new(origin), MarkedLink::new(origin)]);
            let src = reg(&p.a, 0, 4096, Access::empty());
            src.fill(0xAB);
            let dst = reg(&p.b, 0x1000, 100, Access::REMOTE_WRITE);
            dst.fill(0x5C);
            let stag = if stag_ok {
                dst.stag()
            } else {
                dst.stag() ^ 0x100
            };
            p.a.qp.post_send(write_wr(&src, len, stag, 0x1000)).unwrap();
            let mut seg = Vec::new();
            assert!(p.a.qp.poll_ulpdu(MULPDU, &mut seg));
            let [ab, _] = p.marked.as_mut().unwrap();
            ab.carry(&seg, &mut p.b.qp);
            let t = expect_terminate(&mut p, triple);
            assert_eq!(
                t.ddp_segment_length,
                Some(seg.len() as u16),
                "origin {origin}"
            );
            assert_eq!(
                t.ddp_header,
                Some(wire::ddp::DdpHeader::decode(&seg).unwrap())
            );
            assert_eq!(dst.to_vec(), vec![0x5C; 100]);
        }
    }
}

fn src_of(p: &Pair) -> Arc<MemoryRegion> {
    reg(&p.a, 0x5000_0000, 64, Access::empty())
}

fn read_violation(access: Access, pd: u32, to_off: i64, len: u32, triple: (u8, u8, u8)) {
    let mut p = pair();
    let src = p.b.mrs.register(pd, 0x1000, 100, access).unwrap();
    let sink = reg(&p.a, 0, 4096, Access::LOCAL_WRITE);
    sink.fill(0x33);
    p.a.qp
        .post_send(SendWr {
            wr_id: 4,
            op: SendOp::Read {
                remote_stag: src.stag(),
                remote_to: (0x1000 + to_off) as u64,
            },
            local: sge(&sink, 0, len),
            signaled: false,
        })
        .unwrap();
    let seg = one_segment(&mut p);
    let t = expect_terminate(&mut p, triple);
    assert_eq!(
        t.rdmap_header,
        Some(ReadRequest::decode(&seg[18..]).unwrap())
    );
    assert_eq!(sink.to_vec(), vec![0x33; 4096]);
    let c = completions(&mut p.a.qp);
    assert_eq!(c.len(), 1, "unsignaled, but errors complete");
    assert_eq!((c[0].wr_id, c[0].status), (4, WcStatus::RemoteAccessError));
    assert_eq!(c[0].opcode, WcOpcode::Read);
}

#[test]
fn read_violations() {
    let rr = Access::REMOTE_READ;
    read_violation(rr, PD, 0, 101, (0, 1, 0x01));
    read_violation(rr, PD + 1, 0, 10, (0, 1, 0x03));
    read_violation(Access::REMOTE_WRITE, PD, 0, 10, (0, 1, 0x02));
    let mut p = pair();
    let sink = reg(&p.a, 0, 64, Access::LOCAL_WRITE);
    p.a.qp
        .post_send(SendWr {
            wr_id: 4,
            op: SendOp::Read {
                remote_stag: 0x4242_4200,
                remote_to: 0,
            },
            local: sge(&sink, 0, 8),
            signaled: true,
        })
        .unwrap();
    one_segment(&mut p);
    expect_terminate(&mut p, (0, 1, 0x00));
}

#[test]
fn ird_overrun() {
    let mut cb = cfg(2);
    cb.ird = 2;
    let mut ca = cfg(1);
    ca.ord = 3; // A misbehaves: more than B's IRD.
    let mut p = pair_with(ca, cb);
    let src = reg(&p.b, 0, 64, Access::REMOTE_READ);
    let sink = reg(&p.a, 0, 64, Access::LOCAL_WRITE);
    for i in 0..3 {
        p.a.qp
            .post_send(SendWr {
                wr_id: i,
                op: SendOp::Read {
                    remote_stag: src.stag(),
                    remote_to: 0,
                },
                local: sge(&sink, 0, 8),
                signaled: true,
            })
            .unwrap();
    }
    let mut reqs = Vec::new();
    let mut out = Vec::new();
    while p.a.qp.poll_ulpdu(MULPDU, &mut out) {
        reqs.push(std::mem::take(&mut out));
    }
    assert_eq!(reqs.len(), 3);
    p.b.qp.on_ulpdu(&reqs[0]);
    p.b.qp.on_ulpdu(&reqs[1]);
    assert_eq!(p.b.qp.state(), QpState::Rts);
    p.b.qp.on_ulpdu(&reqs[2]);
    // The Terminate goes before the two queued Read Responses, which are dropped.
    let t = expect_terminate(&mut p, (0, 2, 0x07));
    assert!(t.rdmap_header.is_some());
    let c = completions(&mut p.a.qp);
    assert_eq!(c.len(), 3);
    assert_eq!(c[0].status, WcStatus::RemoteOperationError);
    assert!(c[1..].iter().all(|c| c.status == WcStatus::Flushed));
}

#[test]
fn send_violations() {
    // No receive posted.
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let send = |len| SendWr {
        wr_id: 8,
        op: SendOp::Send,
        local: sge(&src, 0, len),
        signaled: true,
    };
    p.a.qp.post_send(send(10)).unwrap();
    one_segment(&mut p);
    let t = expect_terminate(&mut p, (1, 2, 0x02));
    assert!(matches!(
        t.ddp_header,
        Some(wire::ddp::DdpHeader::Untagged(_))
    ));
    let c = completions(&mut p.a.qp);
    assert_eq!(c[0].status, WcStatus::Success);

    // Receive too small: its completion is a local length error.
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let dst = reg(&p.b, 0, 64, Access::LOCAL_WRITE);
    dst.fill(0x99);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 3,
            local: sge(&dst, 0, 9),
        })
        .unwrap();
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 4,
            local: sge(&dst, 0, 64),
        })
        .unwrap();
    p.a.qp
        .post_send(SendWr {
            wr_id: 8,
            op: SendOp::Send,
            local: sge(&src, 0, 10),
            signaled: true,
        })
        .unwrap();
    one_segment(&mut p);
    expect_terminate(&mut p, (1, 2, 0x05));
    assert_eq!(dst.to_vec(), vec![0x99; 64]);
    let c = completions(&mut p.b.qp);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::LocalLengthError), (4, WcStatus::Flushed)]
    );
    assert_eq!(c[0].term.map(|e| e.triple()), Some((1, 2, 0x05)));
    assert_eq!(
        p.b.qp.post_recv(RecvWr {
            wr_id: 1,
            local: sge(&dst, 0, 1)
        }),
        Err(PostError::InvalidState)
    );
}

#[test]
fn msn_out_of_range() {
    let mut p = pair();
    let dst = reg(&p.b, 0, 64, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 3,
            local: sge(&dst, 0, 64),
        })
        .unwrap();
    let h = UntaggedHeader {
        last: true,
        rsvd_ulp: Opcode::Send.rdmap_control(),
        rsvd_ulp2: 0,
        qn: 0,
        msn: 2,
        mo: 0,
    };
    p.b.qp.on_ulpdu(&h.to_bytes());
    expect_terminate(&mut p, (1, 2, 0x03));
    // Read Request with a wrong MSN on QN 1.
    let mut p = pair();
    p.b.qp
        .on_ulpdu(&rdmap::zero_length_read_request(5, 1, 0, 1, 0));
    expect_terminate(&mut p, (1, 2, 0x03));
}

#[test]
fn invalidate_bad_stag() {
    for (victim_pd, exists, triple) in [(PD, false, (0, 2, 0x09)), (PD + 1, true, (0, 1, 0x09))] {
        let mut p = pair();
        let src = reg(&p.a, 0, 64, Access::empty());
        let victim = p.b.mrs.register(victim_pd, 0, 8, Access::all()).unwrap();
        let stag = if exists { victim.stag() } else { 0x00AB_CD00 };
        let dst = reg(&p.b, 0, 64, Access::LOCAL_WRITE);
        p.b.qp
            .post_recv(RecvWr {
                wr_id: 3,
                local: sge(&dst, 0, 64),
            })
            .unwrap();
        p.a.qp
            .post_send(SendWr {
                wr_id: 8,
                op: SendOp::SendInvalidate { stag },
                local: sge(&src, 0, 10),
                signaled: true,
            })
            .unwrap();
        one_segment(&mut p);
        expect_terminate(&mut p, triple);
        assert!(victim.is_valid());
        let c = completions(&mut p.b.qp);
        assert_eq!(c[0].status, WcStatus::LocalProtectionError);
        assert_eq!(c[0].term.map(|e| e.triple()), Some(triple));
    }
}

#[test]
fn read_response_violations() {
    // Outside the requested range (but inside the sink region): DDP base or bounds.
    let mut p = pair();
    let sink = reg(&p.a, 0, 64, Access::LOCAL_WRITE);
    p.a.qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Read {
                remote_stag: 0x100,
                remote_to: 0,
            },
            local: sge(&sink, 0, 8),
            signaled: true,
        })
        .unwrap();
    let mut out = Vec::new();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut out));
    let mut u = TaggedHeader {
        last: true,
        rsvd_ulp: Opcode::RdmaReadResponse.rdmap_control(),
        stag: sink.stag(),
        to: 4,
    }
    .to_bytes()
    .to_vec();
    u.extend_from_slice(&[7; 8]);
    p.a.qp.on_ulpdu(&u);
    assert_eq!(p.a.qp.state(), QpState::Terminating);
    assert_eq!(
        p.a.qp.terminate_sent().unwrap().error.triple(),
        (1, 1, 0x01)
    );
    assert_eq!(sink.to_vec(), vec![0; 64]);
    let c = completions(&mut p.a.qp);
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (1, WcStatus::LocalProtectionError)
    );
    // Wrong STag.
    let mut p = pair();
    let sink = reg(&p.a, 0, 64, Access::LOCAL_WRITE);
    p.a.qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Read {
                remote_stag: 0x100,
                remote_to: 0,
            },
            local: sge(&sink, 0, 8),
            signaled: true,
        })
        .unwrap();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut out));
    u[2..6].copy_from_slice(&(sink.stag() ^ 0x100).to_be_bytes());
    p.a.qp.on_ulpdu(&u);
    assert_eq!(
        p.a.qp.terminate_sent().unwrap().error.triple(),
        (1, 1, 0x00)
    );
}

/// Announcing the next ULPDU takes nothing: a request only announced is not started, so
/// an error flushes it as any other request not started.
#[test]
fn announcing_the_next_ulpdu_starts_nothing() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    for _ in 0..2 {
        p.a.qp.post_send(write_wr(&src, 64, 0x100, 0)).unwrap();
    }
    assert_eq!(p.a.qp.next_ulpdu_len(MULPDU), Some(14 + 64));
    let mut out = Vec::new();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut out)); // the whole first Write
    for _ in 0..3 {
        assert_eq!(p.a.qp.next_ulpdu_len(MULPDU), Some(14 + 64));
    }
    assert_eq!(p.a.qp.next_ulpdu_len(20), Some(20));
    assert_eq!(p.a.qp.next_ulpdu_len(14), None);
    p.a.qp
        .on_llp_error(TermError::Llp(wire::mpa::MpaErrorCode::CrcMismatch));
    let st: Vec<_> = completions(&mut p.a.qp)
        .iter()
        .map(|c| (c.opcode, c.status))
        .collect();
    assert_eq!(
        st,
        vec![
            (WcOpcode::Write, WcStatus::Success),
            (WcOpcode::Write, WcStatus::Flushed)
        ]
    );
}

#[test]
fn llp_error_flushes() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let dst = reg(&p.a, 0x100, 64, Access::LOCAL_WRITE);
    p.a.qp
        .post_recv(RecvWr {
            wr_id: 9,
            local: sge(&dst, 0, 64),
        })
        .unwrap();
    for i in 0..2 {
        p.a.qp.post_send(write_wr(&src, 64, 0x100, 0)).unwrap();
        let _ = i;
    }
    let mut out = Vec::new();
    assert!(p.a.qp.poll_ulpdu(40, &mut out)); // first segment of the first Write
    let err = TermError::Llp(wire::mpa::MpaErrorCode::CrcMismatch);
    p.a.qp.on_llp_error(err);
    assert_eq!(p.a.qp.state(), QpState::Terminating);
    out.clear();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut out));
    let seg = rdmap::parse_segment(&out).unwrap();
    let rdmap::Body::Terminate { terminate, .. } = seg.body else {
        panic!()
    };
    assert_eq!(terminate, Terminate::new(err));
    assert!(p.a.qp.terminate_flushed());
    let c = completions(&mut p.a.qp);
    let st: Vec<_> = c.iter().map(|c| (c.opcode, c.status)).collect();
    assert_eq!(
        st,
        vec![
            (WcOpcode::Write, WcStatus::TransportError),
            (WcOpcode::Write, WcStatus::Flushed),
            (WcOpcode::Recv, WcStatus::Flushed)
        ]
    );
    assert_eq!(
        p.a.qp.post_send(write_wr(&src, 1, 0x100, 0)),
        Err(PostError::InvalidState)
    );
}

#[test]
fn post_checks() {
    let mut c = cfg(1);
    c.max_send_wr = 1;
    c.max_recv_wr = 1;
    c.ord = 0;
    let s = side(c);
    let mut qp = s.qp;
    let mr = s.mrs.register(PD, 0, 16, Access::empty()).unwrap();
    let other_pd = s.mrs.register(PD + 1, 0, 16, Access::all()).unwrap();
    let w = |stag, len| RecvWr {
        wr_id: 1,
        local: Sge { stag, to: 0, len },
    };
    assert_eq!(
        qp.post_recv(w(mr.stag(), 8)),
        Err(PostError::LocalProtection(MrError::AccessDenied))
    );
    assert_eq!(
        qp.post_recv(w(other_pd.stag(), 8)),
        Err(PostError::LocalProtection(MrError::PdMismatch))
    );
    assert_eq!(
        qp.post_recv(w(0x9_9900, 8)),
        Err(PostError::LocalProtection(MrError::InvalidStag))
    );
    assert_eq!(qp.post_recv(w(0x9_9900, 0)), Ok(()));
    assert_eq!(qp.post_recv(w(0x9_9900, 0)), Err(PostError::QueueFull));
    let read = SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote_stag: 5,
            remote_to: 0,
        },
        local: Sge {
            stag: mr.stag(),
            to: 0,
            len: 0,
        },
        signaled: true,
    };
    assert_eq!(qp.post_send(read), Err(PostError::ReadNotAllowed));
    let send = SendWr {
        op: SendOp::Send,
        local: Sge {
            stag: mr.stag(),
            to: 8,
            len: 9,
        },
        ..read
    };
    assert_eq!(
        qp.post_send(send),
        Err(PostError::LocalProtection(MrError::OutOfBounds))
    );
    let send = SendWr {
        local: Sge {
            len: 8,
            ..send.local
        },
        ..send
    };
    assert_eq!(qp.post_send(send), Ok(()));
    assert_eq!(qp.post_send(send), Err(PostError::QueueFull));
    assert_eq!(qp.send_queue_len(), 1);
    assert_eq!(qp.recv_queue_len(), 1);
}

#[test]
fn terminate_received_flushes_receives() {
    let mut p = pair();
    let dst = reg(&p.b, 0, 64, Access::LOCAL_WRITE);
    p.b.qp
        .post_recv(RecvWr {
            wr_id: 1,
            local: sge(&dst, 0, 64),
        })
        .unwrap();
    let t = Terminate::new(TermError::Rdmap(
        wire::rdmap::RdmapError::LOCAL_CATASTROPHIC,
    ));
    p.b.qp.on_ulpdu(&rdmap::terminate_ulpdu(&t, 1));
    assert_eq!(p.b.qp.state(), QpState::Error);
    assert_eq!(p.b.qp.terminate_received(), Some(&t));
    assert!(p.b.qp.terminate_sent().is_none());
    let c = completions(&mut p.b.qp);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Flushed));
    // Nothing more is accepted or sent.
    let mut out = Vec::new();
    assert!(!p.b.qp.poll_ulpdu(MULPDU, &mut out));
    assert!(!p.b.qp.has_tx());
}

#[test]
fn malformed_segments_terminate() {
    // Truncated DDP header: RDMAP Remote Operation Unspecified.
    let mut p = pair();
    p.b.qp.on_ulpdu(&[0x41, 0x43, 0, 0]);
    expect_terminate(&mut p, (0, 2, 0xFF));
    // Invalid RDMAP version.
    let mut p = pair();
    let mut u = rdmap::zero_length_send(1);
    u[1] = 0x83;
    p.b.qp.on_ulpdu(&u);
    expect_terminate(&mut p, (0, 2, 0x05));
    // Invalid DDP version (tagged).
    let mut p = pair();
    let mut u = rdmap::zero_length_write(1);
    u[0] = 0xC2;
    p.b.qp.on_ulpdu(&u);
    expect_terminate(&mut p, (1, 1, 0x04));
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Send(usize),
    Write(usize, usize),
    Read(usize, usize),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..5000).prop_map(Op::Send),
        (0usize..5000, 0usize..64).prop_map(|(l, o)| Op::Write(l, o)),
        (0usize..5000, 0usize..64).prop_map(|(l, o)| Op::Read(l, o)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With markers (`origin`), every ULPDU goes through an FPDU stream and is placed from
    /// between its markers.
    #[test]
    fn random_operations_round_trip(ops in proptest::collection::vec(arb_op(), 1..12), mulpdu in 60usize..2000, ord in 1u16..4, origin in proptest::option::of((0u64..1024, 0u64..1024)), predict in any::<bool>()) {
        let mut ca = cfg(1);
        ca.ord = ord;
        let mut cb = cfg(2);
        cb.ird = ord;
        let mut p = pair_with(ca, cb);
        p.marked = origin.map(|(ab, ba)| [MarkedLink::new(ab), MarkedLink::new(ba)]);
        p.predict = predict;
        const SLOT: usize = 8192;
        let n = ops.len();
        let a_src = reg(&p.a, 0, SLOT * n, Access::LOCAL_WRITE);
        let b_mem = reg(&p.b, 0x1_0000_0000, SLOT * n, Access::all());
        let b_recv = reg(&p.b, 0x2_0000_0000, SLOT * n, Access::LOCAL_WRITE);
        let b_src = reg(&p.b, 0x3_0000_0000, SLOT * n, Access::REMOTE_READ);
        let mut expect_b_mem = vec![0u8; SLOT * n];
        let mut expect_b_recv = vec![0u8; SLOT * n];
        let mut expect_a = vec![0u8; SLOT * n];
        for (i, op) in ops.iter().enumerate() {
            let base = i * SLOT;
            let data = pattern(5000, i as u8);
            a_src.write(base, &data).unwrap();
            expect_a[base..base + 5000].copy_from_slice(&data);
            let bdata = pattern(5000, 100 + i as u8);
            b_src.write(base, &bdata).unwrap();
            let wr = match *op {
                Op::Send(len) => {
                    p.b.qp.post_recv(RecvWr { wr_id: i as u64, local: sge(&b_recv, base as u64, SLOT as u32) }).unwrap();
                    expect_b_recv[base..base + len].copy_from_slice(&data[..len]);
                    SendWr { wr_id: i as u64, op: SendOp::Send, local: sge(&a_src, base as u64, len as u32), signaled: true }
                }
                Op::Write(len, off) => {
                    expect_b_mem[base + off..base + off + len].copy_from_slice(&data[..len]);
                    SendWr { wr_id: i as u64, op: SendOp::Write { remote_stag: b_mem.stag(), remote_to: b_mem.base_to() + (base + off) as u64 }, local: sge(&a_src, base as u64, len as u32), signaled: i % 2 == 0 }
                }
                Op::Read(len, off) => {
                    // Read into A's slot at `off`, after A's own data was sent.
                    expect_a[base + off..base + off + len].copy_from_slice(&bdata[..len]);
                    SendWr { wr_id: i as u64, op: SendOp::Read { remote_stag: b_src.stag(), remote_to: b_src.base_to() + base as u64 }, local: sge(&a_src, (base + off) as u64, len as u32), signaled: true }
                }
            };
            p.a.qp.post_send(wr).unwrap();
        }
        p.pump(mulpdu);
        prop_assert_eq!(p.a.qp.state(), QpState::Rts);
        prop_assert_eq!(p.b.qp.state(), QpState::Rts);
        let ca: Vec<_> = completions(&mut p.a.qp);
        let expected_ids: Vec<u64> = ops.iter().enumerate().filter(|(i, op)| !matches!(op, Op::Write(..)) || i % 2 == 0).map(|(i, _)| i as u64).collect();
        prop_assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), expected_ids);
        prop_assert!(ca.iter().all(|c| c.status == WcStatus::Success));
        let cb = completions(&mut p.b.qp);
        prop_assert_eq!(cb.len(), ops.iter().filter(|o| matches!(o, Op::Send(_))).count());
        prop_assert_eq!(b_mem.to_vec(), expect_b_mem);
        prop_assert_eq!(b_recv.to_vec(), expect_b_recv);
        prop_assert_eq!(a_src.to_vec(), expect_a);
    }

    #[test]
    fn arbitrary_ulpdus_never_panic_nor_place_outside(
        ulpdus in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..80),
                // Structured: a valid-looking header with random fields and payload.
                (any::<bool>(), 0u8..8, any::<u32>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..40), any::<bool>())
                    .prop_map(|(t, op, a, b, payload, last)| {
                        let mut v = if t {
                            TaggedHeader { last, rsvd_ulp: 0x40 | op, stag: a, to: b }.to_bytes().to_vec()
                        } else {
                            UntaggedHeader { last, rsvd_ulp: 0x40 | op, rsvd_ulp2: a, qn: (b % 3) as u32, msn: (b >> 32) as u32 % 3, mo: (b >> 8) as u32 % 64 }.to_bytes().to_vec()
                        };
                        v.extend_from_slice(&payload);
                        v
                    }),
            ],
            1..20),
        use_real_stags in any::<bool>(),
        // Through an FPDU stream whose first marker falls in the first ULPDUs.
        marked in proptest::option::of(440u64..520),
    ) {
        let mut p = pair();
        let mut link = marked.map(MarkedLink::new);
        let writable = reg(&p.b, 0, 256, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
        let readonly = reg(&p.b, 0, 256, Access::REMOTE_READ);
        let foreign = p.b.mrs.register(PD + 1, 0, 256, Access::all()).unwrap();
        readonly.fill(0x77);
        foreign.fill(0x66);
        p.b.qp.post_recv(RecvWr { wr_id: 1, local: sge(&writable, 0, 32) }).unwrap();
        let stags = [writable.stag(), readonly.stag(), foreign.stag()];
        for (i, mut u) in ulpdus.into_iter().enumerate() {
            if use_real_stags && u.len() >= 14 && u[0] & 0x80 != 0 {
                u[2..6].copy_from_slice(&stags[i % 3].to_be_bytes());
            }
            match &mut link {
                Some(l) => l.carry(&u, &mut p.b.qp),
                None => p.b.qp.on_ulpdu(&u),
            }
            let mut out = Vec::new();
            while p.b.qp.poll_ulpdu(MULPDU, &mut out) {
                out.clear();
            }
            while p.b.qp.poll_completion().is_some() {}
        }
        prop_assert_eq!(readonly.to_vec(), vec![0x77; 256]);
        prop_assert_eq!(foreign.to_vec(), vec![0x66; 256]);
    }
}

#[test]
fn terminate_maps_status_of_a_send_in_progress() {
    // A multi-segment Send is cut short by the peer's Terminate: it completes with the
    // status mapped from the Terminate's error.
    let mut p = pair();
    let src = reg(&p.a, 0, 4096, Access::empty());
    p.a.qp
        .post_send(SendWr {
            wr_id: 8,
            op: SendOp::Send,
            local: sge(&src, 0, 4096),
            signaled: true,
        })
        .unwrap();
    one_segment(&mut p);
    let t = expect_terminate(&mut p, (1, 2, 0x02));
    let c = completions(&mut p.a.qp);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, WcStatus::RemoteInvalidRequest);
    assert_eq!(c[0].term, Some(t.error));
}

#[test]
fn refused_work_requests_complete_in_posting_order() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let dst = reg(&p.b, 0x100, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
    let bad = Sge {
        stag: 0xdead_be00,
        to: 0,
        len: 8,
    };
    // Send queue: good, refused (unknown local STag), good, refused (too long for its
    // region), good: the completions come in that order, the refused ones in error.
    let mut wrs = Vec::new();
    for (i, local) in [
        sge(&src, 0, 64),
        bad,
        sge(&src, 0, 64),
        sge(&src, 0, 65),
        sge(&src, 0, 8),
    ]
    .into_iter()
    .enumerate()
    {
        wrs.push(SendWr {
            wr_id: 10 + i as u64,
            op: SendOp::Write {
                remote_stag: dst.stag(),
                remote_to: dst.base_to(),
            },
            local,
            signaled: true,
        });
    }
    for wr in wrs {
        p.a.qp.submit_send(wr).unwrap();
    }
    p.pump(MULPDU);
    let c = completions(&mut p.a.qp);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (10, WcStatus::Success),
            (11, WcStatus::LocalProtectionError),
            (12, WcStatus::Success),
            (13, WcStatus::LocalProtectionError),
            (14, WcStatus::Success),
        ]
    );
    // Receive queue: a refused receive completes in its turn, when a Send reaches it (the
    // Send then fails, as with a verbs provider); a good one before it completes first.
    let rb = reg(&p.b, 0x1000, 64, Access::LOCAL_WRITE);
    p.b.qp
        .submit_recv(RecvWr {
            wr_id: 1,
            local: sge(&rb, 0, 64),
        })
        .unwrap();
    p.b.qp
        .submit_recv(RecvWr {
            wr_id: 2,
            local: bad,
        })
        .unwrap();
    assert!(
        completions(&mut p.b.qp).is_empty(),
        "nothing before its turn"
    );
    for _ in 0..2 {
        p.a.qp
            .submit_send(SendWr {
                wr_id: 20,
                op: SendOp::Send,
                local: sge(&src, 0, 8),
                signaled: true,
            })
            .unwrap();
    }
    p.pump(MULPDU);
    let c = completions(&mut p.b.qp);
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::Success), (2, WcStatus::LocalProtectionError)]
    );
    // Once in error, a refused post completes flushed, after everything before it.
    p.b.qp
        .submit_recv(RecvWr {
            wr_id: 3,
            local: bad,
        })
        .unwrap();
    let c = completions(&mut p.b.qp);
    assert_eq!(
        c.last().map(|c| (c.wr_id, c.status)),
        Some((3, WcStatus::Flushed))
    );
}

/// `poll_fpdu` (the one pass: copy from the region, CRC and sum, markers) frames exactly
/// the ULPDUs `poll_ulpdu` gives, in every FPDU mode, with the sum of the wire octets; and
/// a source whose memory is revoked in the middle of a message fails its work request
/// (and the stream) instead of leaving it stuck.
#[test]
fn poll_fpdu_frames_what_poll_ulpdu_gives() {
    use wire::mpa::fpdu::{FpduMode, Framer};
    use wire::tcp::checksum;
    for (markers, crc) in [(false, true), (true, true), (true, false), (false, false)] {
        let mode = FpduMode { markers, crc };
        let mut plain = side(cfg(1));
        let mut framed = side(cfg(1));
        let data = pattern(200_000, 3);
        let mut srcs = Vec::new();
        for s in [&plain, &framed] {
            let src = reg(s, 0, data.len(), Access::empty());
            src.write(0, &data).unwrap();
            srcs.push(src);
        }
        for (s, src) in [(&mut plain, &srcs[0]), (&mut framed, &srcs[1])] {
            for (i, (off, len)) in [(0u64, 8u32), (1, 70), (5, 150_000), (7, 0)]
                .iter()
                .enumerate()
            {
                s.qp.post_send(SendWr {
                    wr_id: i as u64,
                    op: SendOp::Write {
                        remote_stag: 0x1234_5601,
                        remote_to: 0x10_0000 + *off,
                    },
                    local: sge(src, *off, *len),
                    signaled: true,
                })
                .unwrap();
            }
        }
        let mut f_ref = Framer::at_offset(mode, 12);
        let mut f = Framer::at_offset(mode, 12);
        let mut n = 0;
        loop {
            let mut u = Vec::new();
            let sent = plain.qp.poll_ulpdu(MULPDU, &mut u);
            let mut rec = vec![0xEE; 5];
            let got = framed.qp.poll_fpdu(MULPDU, &mut f, &mut rec).unwrap();
            assert_eq!(sent, got.is_some(), "{mode:?} ULPDU {n}");
            if !sent {
                break;
            }
            let mut want = Vec::new();
            f_ref.frame(&u, &mut want).unwrap();
            assert_eq!(&rec[..5], &[0xEE; 5]);
            assert_eq!(&rec[5..], &want[..], "{mode:?} ULPDU {n}");
            assert_eq!(got, Some(checksum::data(&want)), "{mode:?} ULPDU {n}");
            n += 1;
        }
        assert!(n > 100);
        assert_eq!(completions(&mut plain.qp), completions(&mut framed.qp));
    }

    // Revoked in the middle of a long Write: the work request completes in error and the
    // queue pair fails; nothing is left to send but the Terminate.
    let mut s = side(cfg(1));
    let src = reg(&s, 0, 100_000, Access::empty());
    s.qp.post_send(SendWr {
        wr_id: 9,
        op: SendOp::Write {
            remote_stag: 0x1234_5601,
            remote_to: 0,
        },
        local: sge(&src, 0, 100_000),
        signaled: true,
    })
    .unwrap();
    let mut f = Framer::new(FpduMode::CRC_ONLY);
    let mut rec = Vec::new();
    assert!(s.qp.poll_fpdu(MULPDU, &mut f, &mut rec).unwrap().is_some());
    src.memory().revoke();
    let mut ulpdus = 0;
    loop {
        rec.clear();
        if s.qp.poll_fpdu(MULPDU, &mut f, &mut rec).unwrap().is_none() {
            break;
        }
        ulpdus += 1;
        assert!(ulpdus < 10, "still sending from a revoked region");
    }
    let c = completions(&mut s.qp);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (9, WcStatus::LocalProtectionError)
    );
    assert_ne!(s.qp.state(), QpState::Rts);
}

/// The region of the previous request is reused without a table lookup only while it is
/// the one named and still valid: after deregistration or invalidation a request naming
/// it is refused as before.
#[test]
fn local_region_cache_never_outlives_the_region() {
    let mut p = pair();
    let src = reg(&p.a, 0, 64, Access::empty());
    let write = |mr: &MemoryRegion| SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote_stag: 0x1234_5601,
            remote_to: 0,
        },
        local: sge(mr, 0, 8),
        signaled: false,
    };
    assert_eq!(p.a.qp.post_send(write(&src)), Ok(()));
    assert_eq!(p.a.qp.post_send(write(&src)), Ok(()));
    // Another region in between, then back: each is looked up and checked.
    let other = reg(&p.a, 0x1000, 64, Access::empty());
    assert_eq!(p.a.qp.post_send(write(&other)), Ok(()));
    assert_eq!(p.a.qp.post_send(write(&src)), Ok(()));
    // Deregistered while it is the cached one: gone.
    assert_eq!(p.a.qp.post_send(write(&other)), Ok(()));
    assert!(p.a.mrs.deregister(other.stag()));
    assert_eq!(
        p.a.qp.post_send(write(&other)),
        Err(PostError::LocalProtection(MrError::InvalidStag))
    );
    // Invalidated but registered, while cached: the table's region says why.
    assert_eq!(p.a.qp.post_send(write(&src)), Ok(()));
    p.a.mrs.invalidate(src.stag(), PD).unwrap();
    assert_eq!(
        p.a.qp.post_send(write(&src)),
        Err(PostError::LocalProtection(MrError::Invalidated))
    );
}

/// A Read of `len` octets from B into A's `sink` at offset `sink_off`: A's Read Request
/// is delivered to B; B's Read Response segments are returned, not delivered.
fn read_responses(
    p: &mut Pair,
    src: &MemoryRegion,
    (sink, sink_off): (&MemoryRegion, u64),
    wr_id: u64,
    len: u32,
) -> Vec<Vec<u8>> {
    p.a.qp
        .post_send(SendWr {
            wr_id,
            op: SendOp::Read {
                remote_stag: src.stag(),
                remote_to: src.base_to(),
            },
            local: sge(sink, sink_off, len),
            signaled: true,
        })
        .unwrap();
    let mut buf = Vec::new();
    while p.a.qp.poll_ulpdu(MULPDU, &mut buf) {
        p.b.qp.on_ulpdu(&buf);
        buf.clear();
    }
    let mut out = Vec::new();
    while p.b.qp.poll_ulpdu(MULPDU, &mut buf) {
        out.push(std::mem::take(&mut buf));
    }
    out
}

#[test]
fn read_responses_are_placed_early_and_completed_in_order() {
    let mut p = pair();
    // Read Responses carry MULPDU - 14 octets each (the tagged DDP header).
    let seg_len = MULPDU - 14;
    let len = 5 * seg_len;
    let src = reg(&p.b, 0x4000, len, Access::REMOTE_READ);
    let data = pattern(len, 7);
    src.write(0, &data).unwrap();
    let sink = reg(&p.a, 0x100, len, Access::LOCAL_WRITE);
    let segs = read_responses(&mut p, &src, (&sink, 0), 1, len as u32);
    assert_eq!(segs.len(), 5);
    // Stream offsets as a deframer would give them (any increasing values will do).
    let at = |i: usize| 1000 + 100_000 * i as u64;
    // Segments 1..4 arrive before segment 0; the last (4) is not placed early.
    for (i, s) in segs.iter().enumerate().skip(1) {
        assert_eq!(p.a.qp.place_early(at(i), s), i < 4, "segment {i}");
    }
    assert_eq!(p.a.qp.stats().early_placed, 3);
    assert!(sink.to_vec()[seg_len..4 * seg_len] == data[seg_len..4 * seg_len]);
    // Nothing completes before the gap fills.
    assert!(completions(&mut p.a.qp).is_empty());
    // A segment placed early is not copied again in order: scribble over what segment 2
    // placed, and the in-order pass leaves the scribble.
    sink.write(2 * seg_len, &[0xEE; 8]).unwrap();
    for (i, s) in segs.iter().enumerate() {
        p.a.qp.on_ulpdu_at(Some(at(i)), s);
    }
    assert_eq!(
        completions(&mut p.a.qp),
        vec![ok(1, WcOpcode::Read, len as u32, 1)]
    );
    let got = sink.to_vec();
    assert_eq!(&got[2 * seg_len..2 * seg_len + 8], &[0xEE; 8]);
    assert!(got[..2 * seg_len] == data[..2 * seg_len]);
    assert!(got[2 * seg_len + 8..] == data[2 * seg_len + 8..]);
    assert_eq!(p.a.qp.state(), QpState::Rts);
}

#[test]
fn only_read_responses_for_one_outstanding_read_are_placed_early() {
    let mut p = pair();
    let len = 3 * (MULPDU - 14);
    let src = reg(&p.b, 0x4000, len, Access::REMOTE_READ);
    src.write(0, &pattern(len, 3)).unwrap();
    let sink = reg(&p.a, 0x100, 2 * len, Access::LOCAL_WRITE);
    let first = read_responses(&mut p, &src, (&sink, 0), 1, len as u32);
    // A second Read into an overlapping part of the same sink: neither read's segments
    // can be told apart by address, so none is placed early.
    let second = read_responses(&mut p, &src, (&sink, 0), 2, len as u32);
    assert!(!p.a.qp.place_early(1, &first[1]));
    assert!(!p.a.qp.place_early(2, &second[1]));
    // In order, both complete as usual.
    for (i, s) in first.iter().chain(&second).enumerate() {
        p.a.qp.on_ulpdu_at(Some(10 + i as u64), s);
    }
    assert_eq!(completions(&mut p.a.qp).len(), 2);
    // RDMA Writes and Sends wait for their turn (a Send with Invalidate in the gap may
    // revoke a Write's STag), and so does anything malformed.
    let dst = reg(
        &p.b,
        0x9000,
        4096,
        Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    );
    let wsrc = reg(&p.a, 0x20000, 4096, Access::LOCAL_WRITE);
    p.a.qp
        .post_send(write_wr(&wsrc, 4096, dst.stag(), 0x9000))
        .unwrap();
    let mut buf = Vec::new();
    assert!(p.a.qp.poll_ulpdu(MULPDU, &mut buf));
    assert!(!p.b.qp.place_early(5, &buf));
    assert!(!p.b.qp.place_early(6, b"\x00\x01garbage"));
    // No Read outstanding: a Read Response has nowhere to go early.
    assert!(!p.a.qp.place_early(7, &first[0]));
    assert_eq!(p.a.qp.stats().early_placed + p.b.qp.stats().early_placed, 0);
}

proptest! {
    /// Whatever a peer puts in an out-of-order segment (a mutated Read Response, noise),
    /// placing it early never panics and never writes outside the outstanding Read's sink
    /// range; the Read still completes with the right octets once its responses arrive in
    /// order.
    #[test]
    fn early_placement_stays_inside_the_sink(
        which in 0usize..3,
        flips in proptest::collection::vec((0usize..64, any::<u8>()), 0..6),
        noise in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut p = pair();
        let seg_len = MULPDU - 14;
        let len = 3 * seg_len;
        let src = reg(&p.b, 0x4000, len, Access::REMOTE_READ);
        let data = pattern(len, 9);
        src.write(0, &data).unwrap();
        // The Read fills [64, 64 + len) of a larger sink: the rest must stay untouched.
        let sink = reg(&p.a, 0x100, len + 128, Access::LOCAL_WRITE);
        sink.fill(0x5A);
        let segs = read_responses(&mut p, &src, (&sink, 64), 1, len as u32);
        let mut bad = segs[which].clone();
        for (at, x) in &flips {
            let i = at % bad.len();
            bad[i] ^= x;
        }
        let _ = p.a.qp.place_early(5_000_000, &bad);
        let _ = p.a.qp.place_early(6_000_000, &noise);
        let got = sink.to_vec();
        prop_assert!(got[..64].iter().all(|&b| b == 0x5A));
        prop_assert!(got[64 + len..].iter().all(|&b| b == 0x5A));
        // In order (different offsets: nothing matches what was placed early), the Read
        // completes with exactly the source's octets.
        for (i, s) in segs.iter().enumerate() {
            p.a.qp.on_ulpdu_at(Some(i as u64 * 10), s);
        }
        prop_assert_eq!(completions(&mut p.a.qp), vec![ok(1, WcOpcode::Read, len as u32, 1)]);
        let got = sink.to_vec();
        prop_assert!(got[64..64 + len] == data[..]);
        prop_assert!(got[..64].iter().all(|&b| b == 0x5A));
        prop_assert!(got[64 + len..].iter().all(|&b| b == 0x5A));
    }
}

/// Sends from several regions, queued in any order behind one another, each carry their
/// own region's octets: the QP's cached region is referred to, not held, by the requests
/// that name it, and a request naming another region while sends are queued holds that
/// one itself; the cache moves to another region once the queue has drained. A Read
/// whose sink is the cached region keeps it for its Response. A send whose cached
/// region is deregistered before it goes out fails, as one holding its region did.
#[test]
fn sends_from_interleaved_regions_carry_their_own_octets() {
    let mut p = pair();
    let len = 3000usize;
    let srcs: Vec<_> = (0..3)
        .map(|i| {
            let mr = reg(&p.a, 0x10_0000 * (i + 1), len, Access::LOCAL_WRITE);
            mr.write(0, &pattern(len, 10 + i as u8)).unwrap();
            mr
        })
        .collect();
    let order = [0usize, 0, 1, 0, 2, 1, 1, 0];
    let later = [2usize, 0, 0, 1];
    // A receive of `len` octets into `mr`, with id `id`.
    let recv = |p: &mut Pair, id: u64, mr: &MemoryRegion| {
        p.b.qp
            .post_recv(RecvWr {
                wr_id: id,
                local: sge(mr, 0, len as u32),
            })
            .unwrap();
    };
    let dsts: Vec<_> = (0..order.len() + later.len())
        .map(|i| {
            let mr = reg(
                &p.b,
                0x100_0000 + 0x10_000 * i as u64,
                len,
                Access::LOCAL_WRITE,
            );
            recv(&mut p, i as u64, &mr);
            mr
        })
        .collect();
    let send = |p: &mut Pair, id: usize, src: usize| {
        p.a.qp
            .post_send(SendWr {
                wr_id: id as u64,
                op: SendOp::Send,
                local: sge(&srcs[src], 0, len as u32),
                signaled: true,
            })
            .unwrap();
    };
    for (id, &src) in order.iter().enumerate() {
        send(&mut p, id, src);
    }
    p.pump(MULPDU);
    // The queue drained: the next request's region (2) becomes the cached one.
    for (k, &src) in later.iter().enumerate() {
        send(&mut p, order.len() + k, src);
    }
    p.pump(MULPDU);
    let all: Vec<usize> = order.iter().chain(&later).copied().collect();
    for (i, &src) in all.iter().enumerate() {
        assert_eq!(
            dsts[i].to_vec(),
            pattern(len, 10 + src as u8),
            "message {i}"
        );
    }
    let done = completions(&mut p.a.qp);
    assert_eq!(done.len(), all.len());
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    // A Read into the cached region (0, from the last send), queued behind a send from
    // region 1: its sink outlives the queue.
    let remote = reg(&p.b, 0x900_0000, len, Access::REMOTE_READ);
    remote.write(0, &pattern(len, 99)).unwrap();
    let rx = reg(&p.b, 0x980_0000, len, Access::LOCAL_WRITE);
    recv(&mut p, 500, &rx);
    send(&mut p, 100, 1);
    p.a.qp
        .post_send(SendWr {
            wr_id: 101,
            op: SendOp::Read {
                remote_stag: remote.stag(),
                remote_to: remote.base_to(),
            },
            local: sge(&srcs[0], 0, len as u32),
            signaled: true,
        })
        .unwrap();
    p.pump(MULPDU);
    assert_eq!(rx.to_vec(), pattern(len, 11));
    assert_eq!(srcs[0].to_vec(), pattern(len, 99));
    let done = completions(&mut p.a.qp);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(100, WcStatus::Success), (101, WcStatus::Success)]
    );
    // The cached region (0) deregistered under a queued send: it fails.
    let rx2 = reg(&p.b, 0xa00_0000, len, Access::LOCAL_WRITE);
    recv(&mut p, 600, &rx2);
    send(&mut p, 200, 0);
    assert!(p.a.mrs.deregister(srcs[0].stag()));
    p.pump(MULPDU);
    let done = completions(&mut p.a.qp);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].wr_id, done[0].status),
        (200, WcStatus::LocalProtectionError)
    );
    assert_eq!(rx2.to_vec(), vec![0; len]);
}

/// Receives into one region (the cached one: each refers to it) and then, once they have
/// all completed, into another (the cache moves), and one posted meanwhile into a third
/// while receives wait (it holds its region itself): every message lands where its
/// receive said.
#[test]
fn receives_refer_to_the_cached_region() {
    let mut p = pair();
    let len = 700usize;
    let src = reg(&p.a, 0x1000, 8 * len, Access::empty());
    src.write(0, &pattern(8 * len, 40)).unwrap();
    let shared = reg(&p.b, 0x10_0000, 4 * len, Access::LOCAL_WRITE);
    let other = reg(&p.b, 0x20_0000, 4 * len, Access::LOCAL_WRITE);
    let third = reg(&p.b, 0x30_0000, len, Access::LOCAL_WRITE);
    let recv = |p: &mut Pair, id: u64, mr: &MemoryRegion, slot: u64| {
        p.b.qp
            .post_recv(RecvWr {
                wr_id: id,
                local: sge(mr, slot * len as u64, len as u32),
            })
            .unwrap();
    };
    let send = |p: &mut Pair, id: u64| {
        p.a.qp
            .post_send(SendWr {
                wr_id: id,
                op: SendOp::Send,
                local: sge(&src, id * len as u64, len as u32),
                signaled: false,
            })
            .unwrap();
    };
    for i in 0..3 {
        recv(&mut p, i, &shared, i);
    }
    recv(&mut p, 3, &third, 0);
    for i in 0..4 {
        send(&mut p, i);
    }
    p.pump(MULPDU);
    for i in 4..8 {
        recv(&mut p, i, &other, i - 4);
        send(&mut p, i);
    }
    p.pump(MULPDU);
    let want = pattern(8 * len, 40);
    assert_eq!(shared.to_vec()[..3 * len], want[..3 * len]);
    assert_eq!(third.to_vec(), want[3 * len..4 * len]);
    assert_eq!(other.to_vec(), want[4 * len..]);
    let done = completions(&mut p.b.qp);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        (0..8).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
}
