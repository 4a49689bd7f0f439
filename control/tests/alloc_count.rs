//! The fast path allocates nothing per message: a counting global allocator watches a
//! steady stream of RDMA Writes (8 octets, packed many to a segment, and 4 KiB, several
//! segments each) between two cores on the in-memory wire, both pumped by this thread,
//! and allows a handful of allocations for the whole run (queues growing to their
//! working size), not one per FPDU, segment or message.

mod e2e;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use control::verbs::*;
use e2e::*;
use proto::qp::Access;
use proto::rtr::{RtrType, RtrTypes};

/// Counts allocations (and reallocations) while [`COUNTING`] is on.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation here
        // goes through `System`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as for `dealloc`; the new size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Writes `n` messages of `len` octets from A to B, `depth` outstanding, polling A's
/// completions in batches; returns the allocations counted during the run.
fn stream(env: &mut Env, conn: &Conn, len: usize, n: u64, depth: u64) -> u64 {
    let src = conn
        .a
        .pd
        .reg_mr(len * depth as usize, Access::LOCAL_WRITE)
        .unwrap();
    let dst = conn
        .b
        .pd
        .reg_mr(
            len * depth as usize,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let mut done: Vec<Completion> = Vec::with_capacity(depth as usize);
    let mut wrs: Vec<SendWr> = Vec::with_capacity(depth as usize);
    let run = |env: &mut Env, done: &mut Vec<Completion>, wrs: &mut Vec<SendWr>, n: u64| {
        let (mut posted, mut completed) = (0u64, 0u64);
        while completed < n {
            wrs.clear();
            while posted + (wrs.len() as u64) < n && posted + (wrs.len() as u64) - completed < depth
            {
                let slot = (posted + wrs.len() as u64) % depth;
                let off = slot * len as u64;
                wrs.push(SendWr {
                    wr_id: posted + wrs.len() as u64,
                    op: SendOp::Write {
                        remote_stag: dst.key(),
                        remote_to: dst.base_to() + off,
                    },
                    local: src.sge(off, len as u32),
                    signaled: true,
                });
            }
            if !wrs.is_empty() {
                posted += conn.a.qp.post_send_list(wrs).unwrap() as u64;
            }
            env.pump();
            done.clear();
            conn.a.cq.poll(done, depth as usize);
            for c in done.iter() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
            }
            completed += done.len() as u64;
        }
    };
    // Warm up: queues, spare buffers and tables reach their working size.
    run(env, &mut done, &mut wrs, 4 * depth);
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    run(env, &mut done, &mut wrs, n);
    COUNTING.store(false, Ordering::Relaxed);
    ALLOCS.load(Ordering::Relaxed)
}

#[test]
fn a_stream_of_writes_allocates_nothing_per_message() {
    // A handful for the whole run at most (0 when measured): one per message, per
    // segment or per FPDU would be thousands.
    writes_allocate_nothing_per_message(Env::perfect, |_| 16);
}

/// The same over a wire that duplicates one frame in twenty (each way): the copies take
/// the sender's spare frame buffers, not new ones. The wire is seeded, so the figures
/// repeat: 7 allocations for 20,000 writes of 8 octets and 38 for 5,000 of 4 KiB (about
/// 1,000 copies), against 21 and 69 when the copies took new buffers; the bounds sit
/// between.
#[test]
fn a_stream_of_writes_over_a_duplicating_wire_allocates_nothing_per_message() {
    let wire = dataplane::port::mem::WireConfig::default()
        .with_duplicate(0.05)
        .with_seed(9);
    writes_allocate_nothing_per_message(
        || Env::new(wire.clone(), wire, 1500),
        |len| if len == 8 { 14 } else { 50 },
    );
}

/// The allocator counts every thread's allocations: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Streams writes of 8 octets and of 4 KiB, allowing at most `max(len)` allocations for
/// each.
fn writes_allocate_nothing_per_message(env: impl FnOnce() -> Env, max: impl Fn(usize) -> u64) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut env = env();
    let i = InitiatorConfig {
        peer_to_peer: true,
        rtr_types: RtrTypes::NONE.with(RtrType::Write),
        ..Default::default()
    };
    let conn = connect(
        &mut env,
        i,
        ResponderConfig::default(),
        AcceptParams::default(),
        |_, _, _| {},
    )
    .unwrap();
    env.until("B's QP published", |_| {
        (conn.b.qp.state() == QpRingState::Rts).then_some(())
    });
    for (len, n) in [(8usize, 20_000u64), (4096, 5_000)] {
        let allocs = stream(&mut env, &conn, len, n, 128);
        eprintln!("{n} writes of {len} octets: {allocs} allocations");
        assert!(
            allocs <= max(len),
            "{allocs} allocations for {n} writes of {len} octets: the fast path allocates per message"
        );
    }
}
