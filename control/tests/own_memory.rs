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

/// A consumer's own buffer deregistered while the peer's Write is streaming into it: from
/// the moment the `Mr` is dropped no octet of the buffer changes, and the rest of the
/// Write is refused with a Terminate (DDP Invalid STag).
#[test]
fn deregistration_in_the_middle_of_a_write_stops_every_placement() {
    let mut env = Env::perfect();
    let conn = connected(&mut env);
    const LEN: usize = 4 << 20;
    let src = conn
        .a
        .pd
        .reg_mr_memory(
            RegionMemory::from_boxed(pattern(5, LEN).into_boxed_slice()),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    let mut mine = vec![0xEEu8; LEN];
    // SAFETY: `mine` is neither moved nor touched until the region is dropped below.
    let mem = unsafe { RegionMemory::from_raw_parts(mine.as_mut_ptr(), LEN) };
    let dst = conn
        .b
        .pd
        .reg_mr_memory(mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_stag: dst.key(),
                remote_to: dst.base_to(),
            },
            local: src.sge(0, LEN as u32),
            signaled: true,
        })
        .unwrap();
    // Pump until the first octets have landed, then deregister in the middle.
    env.until("the first placement", |_| {
        (dst.load_u8_acquire(0) != Some(0xEE)).then_some(())
    });
    drop(dst);
    let snapshot = mine.clone();
    let placed = snapshot.iter().take_while(|&&b| b != 0xEE).count();
    assert!(
        placed > 0 && placed < LEN,
        "{placed} octets placed before the drop"
    );
    let t = env.until("B's Terminate", |_| conn.b.qp.terminates());
    assert_eq!(t.sent.map(|t| t.error.triple()), Some((1, 1, 0)), "{t:?}");
    assert!(mine == snapshot, "an octet changed after deregistration");
    assert_eq!(&mine[..placed], &pattern(5, LEN)[..placed]);
}

/// `Pd::reg_mr` takes its memory from the device's allocator once one is set: every
/// region, with the length asked (an allocator that gives another length, or fails, makes
/// the registration fail); a second allocator is refused.
#[test]
fn reg_mr_takes_memory_from_the_device_allocator() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let env = Env::perfect();
    let dev = &env.pair.a;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let alloc: RegionAllocator = Arc::new(move |len| {
        seen.fetch_add(1, Ordering::SeqCst);
        match len {
            13 => Ok(RegionMemory::from_boxed(vec![0; 12].into_boxed_slice())),
            14 => Err("no room".into()),
            _ => Ok(RegionMemory::from_boxed(vec![0; len].into_boxed_slice())),
        }
    });
    let pd = dev.alloc_pd();
    let before = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(dev.set_region_allocator(alloc.clone()));
    assert!(!dev.set_region_allocator(alloc));
    let mr = pd.reg_mr(100, Access::LOCAL_WRITE).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(mr.len(), 100);
    mr.write(99, &[7]).unwrap();
    assert_eq!(mr.load_u8_acquire(99), Some(7));
    assert_eq!(
        pd.reg_mr(13, Access::LOCAL_WRITE).unwrap_err(),
        MrError::AllocFailed
    );
    assert_eq!(
        pd.reg_mr(14, Access::LOCAL_WRITE).unwrap_err(),
        MrError::AllocFailed
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    drop(before);
}
