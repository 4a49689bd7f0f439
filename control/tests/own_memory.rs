//! Registered memory as real memory, end to end over the in-memory wire: a consumer
//! registers its own buffer in place (as `ibv_reg_mr` does) or hands one over, the peer
//! writes into it and reads from it with RDMA, and once the region is deregistered the
//! buffer is the consumer's again, untouched by anything after.

mod e2e;

use control::verbs::*;
use e2e::*;
use proto::qp::Access;
use proto::rtr::{RtrType, RtrTypes};

fn connected(env: &mut Env) -> Conn {
    let i = InitiatorConfig {
        crc: true,
        enhanced: true,
        ird: 8,
        ord: 8,
        peer_to_peer: true,
        rtr_types: RtrTypes::NONE.with(RtrType::Write),
        ..Default::default()
    };
    let r = ResponderConfig {
        crc: true,
        ..Default::default()
    };
    let conn = connect(env, i, r, AcceptParams::default(), |_, _, _| {}).unwrap();
    env.until("B's QP published", |_| {
        (conn.b.qp.state() == QpRingState::Rts).then_some(())
    });
    conn
}

/// A Write, then a Send after it (delivered after it: everything before has landed).
fn write(env: &mut Env, conn: &Conn, src: &Mr, off: u64, len: u32, dst_stag: u32, dst_to: u64) {
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_stag: dst_stag,
                remote_to: dst_to,
            },
            local: src.sge(off, len),
            signaled: true,
        })
        .unwrap();
    let c = env.completion("write completion", &conn.a.cq);
    assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Write));
    let fence = conn.b.pd.reg_mr(8, Access::LOCAL_WRITE).unwrap();
    conn.b
        .qp
        .post_recv(RecvWr {
            wr_id: 2,
            local: fence.sge(0, 8),
        })
        .unwrap();
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 3,
            op: SendOp::Send,
            local: src.sge(0, 1),
            signaled: false,
        })
        .unwrap();
    let c = env.completion("fence receive", &conn.b.cq);
    assert_eq!(c.status, WcStatus::Success);
}

#[test]
fn the_peer_writes_into_and_reads_from_the_consumers_own_buffers() {
    let mut env = Env::perfect();
    let conn = connected(&mut env);
    const LEN: usize = 200_000;
    let data = pattern(11, 150_000);

    // A's source: a buffer A hands over. B's sink: B's own buffer, registered in place.
    let src = conn
        .a
        .pd
        .reg_mr_memory(
            RegionMemory::from_boxed(data.clone().into_boxed_slice()),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    let mut mine = vec![0xEEu8; LEN];
    // SAFETY: `mine` is not touched (nor moved) until the region is dropped below, after
    // which it is ours again (deregistration waits for any copy in progress).
    let mem = unsafe { RegionMemory::from_raw_parts(mine.as_mut_ptr(), mine.len()) };
    assert_eq!(mem.as_ptr(), mine.as_mut_ptr());
    let dst = conn
        .b
        .pd
        .reg_mr_memory(
            mem,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let dst_stag = dst.key();
    write(
        &mut env,
        &conn,
        &src,
        0,
        data.len() as u32,
        dst_stag,
        dst.base_to() + 1000,
    );

    // A reads back part of B's own buffer into a page-aligned region we allocate.
    let sink = conn.a.pd.reg_mr(60_000, Access::LOCAL_WRITE).unwrap();
    assert_eq!(sink.memory().as_ptr() as usize % 4096, 0);
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 4,
            op: SendOp::Read {
                remote_stag: dst_stag,
                remote_to: dst.base_to() + 51_000,
            },
            local: sink.sge(0, 60_000),
            signaled: true,
        })
        .unwrap();
    let c = env.completion("read completion", &conn.a.cq);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 60_000));
    assert_eq!(sink.to_vec(), data[50_000..110_000]);

    // Deregistered: the buffer is the consumer's again, with exactly the Write in it.
    drop(dst);
    assert!(mine[..1000].iter().all(|&b| b == 0xEE));
    assert_eq!(&mine[1000..1000 + data.len()], &data[..]);
    assert!(mine[1000 + data.len()..].iter().all(|&b| b == 0xEE));

    // A Write to the deregistered STag is refused (DDP Invalid STag) and places nothing.
    mine.fill(0x11);
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 5,
            op: SendOp::Write {
                remote_stag: dst_stag,
                remote_to: 0x1_0000_0000,
            },
            local: src.sge(0, 4096),
            signaled: true,
        })
        .unwrap();
    let t = env.until("B's Terminate", |_| conn.b.qp.terminates());
    assert_eq!(t.sent.map(|t| t.error.triple()), Some((1, 1, 0)), "{t:?}");
    assert!(mine.iter().all(|&b| b == 0x11));
}
