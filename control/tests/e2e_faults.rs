//! Fault injection end to end: at least 256 MiB through RDMA Writes, Sends and Reads under
//! loss, reordering, duplication, re-segmentation and corruption of the in-memory wire,
//! every octet verified, every completion accounted for exactly once, the connection alive
//! at the end.
//!
//! The traffic: B exposes a ring of slots; A writes message `seq` into slot `seq % K`, then
//! Sends `(seq, slot)`. B checks every octet of the slot against the message's pattern and
//! that `seq` is the next one expected, reposts the receive and returns a credit with a
//! Send. Every 16th message A also reads the slot back with an RDMA Read and checks it.
//!
//! 256 MiB per case needs an optimised build: under `debug_assertions` these tests are
//! ignored, and `scripts/test.sh` runs them with `cargo test --release`.

mod e2e;

use std::time::Instant;

use control::verbs::*;
use dataplane::port::faults::FaultConfig;
use dataplane::port::mem::WireConfig;
use e2e::*;

const SLOT: usize = 65536;
const SLOTS: usize = 16;
const TOTAL: u64 = 256 << 20;

struct Outcome {
    messages: u64,
    octets: u64,
    reads: u64,
    seconds: f64,
    new_whole: f64,
    rtx_whole: f64,
    rtx_segments: u64,
    /// Port counters of A and B.
    ports: [dataplane::port::PortStats; 2],
    /// Read Response FPDUs A placed before the gap ahead of them filled.
    placed_early: u64,
    /// Receive bursts both cores took small while recovering from loss.
    recovery_bursts: u64,
}

fn run(name: &str, wire: WireConfig, markers: bool) -> Outcome {
    let mtu = wire.mtu;
    let mut env = Env::new(
        wire.clone(),
        {
            let seed = wire.faults.seed ^ 0x5555;
            wire.with_seed(seed)
        },
        mtu,
    );
    let init = InitiatorConfig {
        markers,
        ird: 8,
        ord: 8,
        ..Default::default()
    };
    let resp = ResponderConfig {
        markers,
        ..Default::default()
    };
    // Receives for credits (A) and notifications (B) first: the first message flows
    // before B's accept completes (client-server model).
    let a = Side::new(&env.pair.a);
    let b = Side::new(&env.pair.b);
    let ring =
        b.pd.reg_mr(
            SLOT * SLOTS,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let notes = b.pd.reg_mr(16 * SLOTS, Access::LOCAL_WRITE).unwrap();
    let credit_src = b.pd.reg_mr(8, Access::LOCAL_WRITE).unwrap();
    let src = a.pd.reg_mr(SLOT * SLOTS, Access::LOCAL_WRITE).unwrap();
    let note_src = a.pd.reg_mr(16 * SLOTS, Access::LOCAL_WRITE).unwrap();
    let credits_in = a.pd.reg_mr(8 * SLOTS, Access::LOCAL_WRITE).unwrap();
    let sink = a.pd.reg_mr(SLOT, Access::LOCAL_WRITE).unwrap();
    for s in 0..SLOTS as u64 {
        b.qp.post_recv(RecvWr {
            wr_id: s,
            local: notes.sge(s * 16, 16),
        })
        .unwrap();
        a.qp.post_recv(RecvWr {
            wr_id: 1 << 40 | s,
            local: credits_in.sge(s * 8, 8),
        })
        .unwrap();
    }
    let listener = env.pair.b.listen(4791, resp).unwrap();
    let pa = env.pair.a.connect(
        &a.qp,
        std::net::SocketAddrV4::new(control::embedded::ADDR_B, 4791),
        init,
    );
    let req = env.until("request", |_| listener.try_next());
    let pb = listener.accept(&req, &b.qp, AcceptParams::default());
    env.wait("A established", &pa).unwrap();

    let messages = TOTAL / SLOT as u64;
    let start = Instant::now();
    let mut credits = SLOTS as u64;
    let mut next_seq = 0u64; // next message A sends
    let mut expect_seq = 0u64; // next message B expects
                               // Every completion of every kind exactly once: per message, its Write's and its
                               // Send's completion and (every 16th) its Read's; counted per kind as well.
    let mut write_done = vec![false; messages as usize];
    let mut send_done = vec![false; messages as usize];
    let mut read_done = vec![false; messages as usize];
    let (mut writes_posted, mut writes_completed) = (0u64, 0u64);
    let (mut sends_posted, mut sends_completed) = (0u64, 0u64);
    let mut reads_done = 0u64;
    let mut reads_posted = 0u64;
    let mut credits_received = 0u64;
    let mut read_pending = [false; SLOTS];
    let mut b_established = false;
    let mut stage = vec![0u8; SLOT];
    let mut got = vec![0u8; SLOT];
    let mut done = Vec::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    while expect_seq < messages
        || reads_done < reads_posted
        || credits < SLOTS as u64
        || writes_completed < writes_posted
        || sends_completed < sends_posted
    {
        assert!(Instant::now() < deadline, "{name}: no end in sight");
        // A: send while credits last.
        while credits > 0 && next_seq < messages {
            let seq = next_seq;
            let slot = (seq % SLOTS as u64) as usize;
            if read_pending[slot] {
                // RDMA gives no order between a Read Response and a later Write to the
                // same place: wait for the read-back before reusing the slot.
                break;
            }
            fill(&mut stage, seq);
            src.write(slot * SLOT, &stage).unwrap();
            let mut note = [0u8; 16];
            note[..8].copy_from_slice(&seq.to_le_bytes());
            note[8..].copy_from_slice(&(slot as u64).to_le_bytes());
            note_src.write(slot * 16, &note).unwrap();
            a.qp.post_send(SendWr {
                wr_id: seq << 2,
                op: SendOp::Write {
                    remote_stag: ring.key(),
                    remote_to: ring.base_to() + (slot * SLOT) as u64,
                },
                local: src.sge((slot * SLOT) as u64, SLOT as u32),
                signaled: true,
            })
            .unwrap();
            writes_posted += 1;
            a.qp.post_send(SendWr {
                wr_id: seq << 2 | 1,
                op: SendOp::Send,
                local: note_src.sge((slot * 16) as u64, 16),
                signaled: true,
            })
            .unwrap();
            sends_posted += 1;
            credits -= 1;
            next_seq += 1;
        }
        env.pump();
        if !b_established {
            if let Some(r) = pb.try_get() {
                r.unwrap();
                b_established = true;
            }
        }
        // A's completions.
        done.clear();
        a.cq.poll(&mut done, 256);
        for c in &done {
            assert_eq!(c.status, WcStatus::Success, "{name}: A completion {c:?}");
            match c.opcode {
                WcOpcode::Recv => {
                    credits += 1;
                    credits_received += 1;
                    a.qp.post_recv(RecvWr {
                        wr_id: c.wr_id,
                        local: credits_in.sge((c.wr_id & 0xff) * 8, 8),
                    })
                    .unwrap();
                }
                WcOpcode::Read => {
                    let seq = c.wr_id >> 2;
                    assert_eq!(c.wr_id & 3, 2, "{name}: {c:?}");
                    assert!(
                        !std::mem::replace(&mut read_done[seq as usize], true),
                        "{name}: Read of message {seq} completed twice"
                    );
                    sink.read(0, &mut got).unwrap();
                    assert_eq!(check(&got, seq), 0, "{name}: read-back of message {seq}");
                    reads_done += 1;
                    read_pending[(seq % SLOTS as u64) as usize] = false;
                }
                WcOpcode::Write => {
                    let seq = (c.wr_id >> 2) as usize;
                    assert_eq!(c.wr_id & 3, 0, "{name}: {c:?}");
                    assert!(
                        !std::mem::replace(&mut write_done[seq], true),
                        "{name}: Write of message {seq} completed twice"
                    );
                    writes_completed += 1;
                }
                WcOpcode::Send => {
                    let seq = (c.wr_id >> 2) as usize;
                    assert_eq!(c.wr_id & 3, 1, "{name}: {c:?}");
                    assert!(
                        !std::mem::replace(&mut send_done[seq], true),
                        "{name}: Send of message {seq} completed twice"
                    );
                    sends_completed += 1;
                }
            }
        }
        // B's completions.
        done.clear();
        b.cq.poll(&mut done, 256);
        for c in &done {
            assert_eq!(c.status, WcStatus::Success, "{name}: B completion {c:?}");
            if c.opcode != WcOpcode::Recv {
                continue;
            }
            let mut note = [0u8; 16];
            notes.read((c.wr_id * 16) as usize, &mut note).unwrap();
            let seq = u64::from_le_bytes(note[..8].try_into().unwrap());
            let slot = u64::from_le_bytes(note[8..].try_into().unwrap()) as usize;
            assert_eq!(
                seq, expect_seq,
                "{name}: messages lost, duplicated or reordered"
            );
            ring.read(slot * SLOT, &mut got).unwrap();
            assert_eq!(check(&got, seq), 0, "{name}: octets of message {seq}");
            expect_seq += 1;
            b.qp.post_recv(RecvWr {
                wr_id: c.wr_id,
                local: notes.sge(c.wr_id * 16, 16),
            })
            .unwrap();
            // Every 16th message A reads back (before the credit lets it reuse the slot).
            if seq % 16 == 0 {
                reads_posted += 1;
                read_pending[slot] = true;
                a.qp.post_send(SendWr {
                    wr_id: seq << 2 | 2,
                    op: SendOp::Read {
                        remote_stag: ring.key(),
                        remote_to: ring.base_to() + (slot * SLOT) as u64,
                    },
                    local: sink.sge(0, SLOT as u32),
                    signaled: true,
                })
                .unwrap();
            }
            b.qp.post_send(SendWr {
                wr_id: seq,
                op: SendOp::Send,
                local: credit_src.sge(0, 8),
                signaled: false,
            })
            .unwrap();
        }
    }
    assert!(b_established, "{name}: B's accept never completed");
    // Posted = completed, per kind, each once.
    assert_eq!(
        (writes_posted, writes_completed),
        (messages, messages),
        "{name}: Writes"
    );
    assert_eq!(
        (sends_posted, sends_completed),
        (messages, messages),
        "{name}: Sends"
    );
    assert!(
        write_done.iter().all(|&d| d),
        "{name}: a Write never completed"
    );
    assert!(
        send_done.iter().all(|&d| d),
        "{name}: a Send never completed"
    );
    assert_eq!(reads_done, reads_posted, "{name}: Reads");
    assert_eq!(reads_posted, messages.div_ceil(16), "{name}: Reads posted");
    assert_eq!(
        read_done.iter().filter(|&&d| d).count() as u64,
        reads_posted,
        "{name}: Reads completed"
    );
    assert_eq!(expect_seq, messages, "{name}: messages B received");
    assert_eq!(credits_received, messages, "{name}: credits A received");
    // Nothing more may come.
    env.quiet(std::time::Duration::from_millis(20), &a.cq);
    env.quiet(std::time::Duration::from_millis(1), &b.cq);
    assert_eq!(
        a.qp.state(),
        dataplane::rings::QpRingState::Rts,
        "{name}: A alive"
    );
    assert_eq!(
        b.qp.state(),
        dataplane::rings::QpRingState::Rts,
        "{name}: B alive"
    );
    let al = env.pair.core_a.alignment();
    let out = Outcome {
        messages,
        octets: messages * SLOT as u64,
        reads: reads_done,
        seconds: start.elapsed().as_secs_f64(),
        new_whole: al.new_whole_ratio(),
        rtx_whole: al.rtx_whole_ratio(),
        rtx_segments: al.rtx_whole + al.rtx_split,
        ports: [env.pair.core_a.port_stats(), env.pair.core_b.port_stats()],
        placed_early: env.pair.core_a.stats().fpdus_placed_early,
        recovery_bursts: env.pair.core_a.stats().recovery_bursts
            + env.pair.core_b.stats().recovery_bursts,
    };
    println!(
        "{name}: {} MiB in {} messages (+{} reads) in {:.2} s ({:.0} MiB/s); \
         FPDU-aligned segments: new {:.4}, retransmitted {:.4} of {}; {} FPDUs placed early",
        out.octets >> 20,
        out.messages,
        out.reads,
        out.seconds,
        (out.octets >> 20) as f64 / out.seconds,
        out.new_whole,
        out.rtx_whole,
        out.rtx_segments,
        out.placed_early
    );
    drop(listener);
    out
}

fn wire(seed: u64) -> WireConfig {
    WireConfig::default().with_seed(seed)
}

macro_rules! fault_test {
    ($($name:ident: $wire:expr, $markers:expr, $min_whole:expr, $must_retransmit:expr;)*) => {$(
        #[test]
        #[cfg_attr(debug_assertions, ignore = "256 MiB: run with --release (scripts/test.sh does)")]
        fn $name() {
            let o = run(stringify!($name), $wire, $markers);
            // Loss must have reached TCP, or the case proved nothing.
            if $must_retransmit {
                assert!(o.rtx_segments > 0, "no segment was retransmitted");
            }
            // With markers, Read Response FPDUs that arrived after a gap were placed
            // before it filled (every octet is still checked in `run`); without, none.
            if $markers && ($wire.faults.loss > 0.0 || $wire.faults.reorder > 0.0) {
                assert!(o.placed_early > 0, "no FPDU placed early");
            }
            if !$markers {
                assert_eq!(o.placed_early, 0);
            }
            // Loss and reordering put a connection into recovery, and its core then takes
            // small receive bursts (the ACK clock of a small window); a clean wire never.
            let f = &$wire.faults;
            if f.loss > 0.0 || f.reorder > 0.0 {
                assert!(o.recovery_bursts > 0, "no receive burst taken small");
            }
            if f.loss == 0.0
                && f.reorder == 0.0
                && f.duplicate == 0.0
                && f.resegment == 0.0
                && f.corrupt == 0.0
            {
                assert_eq!(o.recovery_bursts, 0, "small bursts on a clean wire");
            }
            // With emulated checksum offload the devices did the checksums: every TCP
            // frame was queued with the offload, and corruption was caught by a device.
            if $wire.checksum_offload {
                for (side, s) in ["A", "B"].iter().zip(&o.ports) {
                    assert!(s.tx_checksum_offloaded > 0, "{side}: nothing offloaded");
                    assert!(
                        s.tx_frames - s.tx_checksum_offloaded - s.tx_tso_frames < 8,
                        "{side}: only ARP goes without: {s:?}"
                    );
                    assert!(s.rx_checksum_good > 0, "{side}: no device verdict");
                }
                if $wire.faults.corrupt > 0.0 {
                    assert!(
                        o.ports.iter().map(|s| s.rx_checksum_bad).sum::<u64>() > 0,
                        "corruption never reached a device check"
                    );
                }
            }
            // With an emulated zero-copy device, A's full-size FPDUs (the Writes) went
            // out without a copy, read by the device only when the frame was received (or
            // on a faulty wire, when queued), and B's Read Responses did too.
            if $wire.zero_copy {
                let [a, b] = &o.ports;
                let full_frames = o.octets / ($wire.mtu as u64);
                assert!(
                    a.tx_zero_copy >= full_frames * 9 / 10,
                    "A: {} zero-copy frames for {} octets: {a:?}",
                    a.tx_zero_copy,
                    o.octets
                );
                assert!(b.tx_zero_copy > 0, "B: {b:?}");
            }
            // With an emulated TSO device, A's Writes left as frames of several segments
            // each, which the wire cut into exactly the segments A's TCP planned (whole
            // FPDUs each, as `new_whole` below counts them; that the cuts fall there is
            // dataplane's net::tests::tso_cuts_exactly_the_segments_planned), and every
            // cut segment then met the faults on its own.
            if $wire.tso {
                let [a, _] = &o.ports;
                assert!(a.tx_tso_frames > 0, "A: no TSO frame: {a:?}");
                let full_frames = o.octets / ($wire.mtu as u64);
                assert!(
                    a.tx_tso_segments >= full_frames / 2,
                    "A: {} of about {} segments went through TSO: {a:?}",
                    a.tx_tso_segments,
                    full_frames
                );
            }
            assert!(
                o.new_whole >= $min_whole,
                "new-data segments holding whole FPDUs: {} < {}",
                o.new_whole,
                $min_whole
            );
        }
    )*};
}

fault_test! {
    lossless: wire(1), false, 0.99, false;
    lossless_markers_jumbo: WireConfig { mtu: 9000, ..wire(2) }, true, 0.99, false;
    loss_1_percent: wire(3).with_loss(0.01), false, 0.99, true;
    loss_5_percent: wire(4).with_loss(0.05), false, 0.99, true;
    loss_5_percent_markers: wire(5).with_loss(0.05), true, 0.99, true;
    reordering: wire(6).with_reorder(0.02, std::time::Duration::from_micros(200)), false, 0.99, true;
    // Duplicates and re-segmented pieces need no retransmission; the receive side must
    // cope (every octet and message is checked in `run`).
    duplication: wire(7).with_duplicate(0.02), false, 0.99, false;
    resegmentation: wire(8).with_resegment(0.1), true, 0.99, false;
    corruption_caught_by_checksums: wire(9).with_corrupt(0.01), false, 0.99, true;
    corruption_caught_by_checksum_offload: wire(11).with_corrupt(0.01).with_checksum_offload(true), false, 0.99, true;
    zero_copy_delayed: WireConfig {
        zero_copy: true, delay: std::time::Duration::from_micros(50), ..wire(12)
    }, false, 0.99, false;
    zero_copy_offload_loss_markers: wire(13).with_zero_copy(true).with_checksum_offload(true).with_loss(0.01), true, 0.99, true;
    tso_loss: wire(14).with_tso(true).with_loss(0.01), false, 0.99, true;
    tso_markers_jumbo_reordering: WireConfig {
        mtu: 9000, ..wire(15).with_tso(true).with_reorder(0.02, std::time::Duration::from_micros(200))
    }, true, 0.99, true;
    tso_everything_at_once: WireConfig {
        faults: FaultConfig {
            loss: 0.01, reorder: 0.01, duplicate: 0.01, resegment: 0.05, corrupt: 0.005, seed: 16,
            ..FaultConfig::default()
        },
        ..wire(16).with_tso(true)
    }, true, 0.99, true;
    everything_at_once: WireConfig {
        faults: FaultConfig {
            loss: 0.01, reorder: 0.01, duplicate: 0.01, resegment: 0.05, corrupt: 0.005, seed: 10,
            ..FaultConfig::default()
        },
        ..wire(10)
    }, true, 0.99, true;
}
