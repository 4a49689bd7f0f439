//! Memory regions: registered buffers that the consumer and the core share.
//!
//! A [`MemoryRegion`] is the tagged buffer of RFC 5040/5041: a run of octets named by an
//! STag, whose first octet has the Tagged Offset (TO) [`MemoryRegion::base_to`] (like a
//! verbs virtual address). Its storage is a [`RegionMemory`] (crate `fastpath`, where the
//! `unsafe` lives): real memory, page-aligned when we allocate it, or the consumer's own
//! buffer registered in place, as `ibv_reg_mr` does ([`MrTable::register_memory`]; the
//! caller keeps it alive and unmoved until deregistration, which waits for any copy in
//! progress). Placement and reads are plain copies.
//!
//! Ordering: RDMA gives no ordering guarantee on the octets of a placement except that a
//! poller watching the last octet of an RDMA Write sees the rest once it sees that one.
//! [`MemoryRegion::write_last_visible_last`] provides exactly that (the final octet stored
//! last, with Release), and [`MemoryRegion::load_u8_acquire`] is its reading side.
//!
//! An STag is a 24-bit index and an 8-bit key (`index << 8 | key`). [`MrTable`] draws
//! both at random from a generator seeded by the operating system (ChaCha12), so a peer
//! that learns some STags cannot guess another (the ReDMArk attacks, USENIX Security
//! 2021, guess STags that count up); index 0 is never used (so STags 0 and 1, the latter
//! used by RFC 6581 RTRs, are never issued), and a stale STag matches a new region with
//! probability 2^-32.
//!
//! Nothing here panics on bad offsets or lengths: every access is checked and returns
//! [`MrError`].

use std::collections::HashMap;
use std::fmt;
use std::ops::BitOr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

pub use fastpath::regmem::{AccessError, RegionMemory};
use rand::rngs::{StdRng, SysRng};
use rand::{RngExt, SeedableRng};
use wire::mpa::deframe::UlpduRuns;

/// Access rights of a memory region (a bit set).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// The local consumer lets the core write the region (receive buffers, RDMA Read
    /// sinks).
    pub const LOCAL_WRITE: Access = Access(0x01);
    /// The peer may read the region with RDMA Read.
    pub const REMOTE_READ: Access = Access(0x02);
    /// The peer may write the region with RDMA Write.
    pub const REMOTE_WRITE: Access = Access(0x04);

    /// No rights (local read is always allowed).
    pub const fn empty() -> Access {
        Access(0)
    }

    /// Every right.
    pub const fn all() -> Access {
        Access(0x07)
    }

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        f.write_str("Access(")?;
        for (bit, name) in [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        ] {
            if self.contains(bit) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("empty")?;
        }
        f.write_str(")")
    }
}

/// Why a memory access or registration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MrError {
    /// No region has this STag (never registered, deregistered, or the key is stale).
    InvalidStag,
    /// The region was invalidated (Send with Invalidate, local invalidate, deregister).
    Invalidated,
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The region lacks a needed access right.
    AccessDenied,
    /// TO + length overflows 64 bits.
    ToWrap,
    /// The range is not inside the region.
    OutOfBounds,
    /// The table has no free STag index left.
    NoStag,
    /// Storage for the region could not be allocated.
    AllocFailed,
}

impl fmt::Display for MrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MrError::InvalidStag => "invalid STag",
            MrError::Invalidated => "STag invalidated",
            MrError::PdMismatch => "memory region in another protection domain",
            MrError::AccessDenied => "access rights violation",
            MrError::ToWrap => "TO wrap",
            MrError::OutOfBounds => "base or bounds violation",
            MrError::NoStag => "no STag available",
            MrError::AllocFailed => "memory region allocation failed",
        })
    }
}

impl std::error::Error for MrError {}

/// One registered memory region.
pub struct MemoryRegion {
    mem: RegionMemory,
    stag: u32,
    pd: u32,
    base_to: u64,
    access: Access,
    valid: AtomicBool,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("stag", &format_args!("{:#010x}", self.stag))
            .field("pd", &self.pd)
            .field("base_to", &format_args!("{:#x}", self.base_to))
            .field("len", &self.len())
            .field("access", &self.access)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl From<AccessError> for MrError {
    fn from(e: AccessError) -> MrError {
        match e {
            AccessError::OutOfBounds => MrError::OutOfBounds,
            AccessError::Revoked => MrError::Invalidated,
        }
    }
}

impl MemoryRegion {
    /// A zeroed, page-aligned region outside any table (tests, or a caller with its own
    /// STag scheme).
    pub fn new(
        stag: u32,
        pd: u32,
        base_to: u64,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, MrError> {
        let mem = RegionMemory::allocate(len).map_err(|_| MrError::AllocFailed)?;
        Ok(MemoryRegion::with_memory(stag, pd, base_to, mem, access))
    }

    /// A region over `mem` (memory we allocated, a buffer the consumer handed over, or
    /// one it registered in place: see [`RegionMemory`]) outside any table.
    pub fn with_memory(
        stag: u32,
        pd: u32,
        base_to: u64,
        mem: RegionMemory,
        access: Access,
    ) -> MemoryRegion {
        MemoryRegion {
            mem,
            stag,
            pd,
            base_to,
            access,
            valid: AtomicBool::new(true),
        }
    }

    /// The STag (24-bit index, 8-bit key).
    pub fn stag(&self) -> u32 {
        self.stag
    }

    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// The TO of the first octet.
    pub fn base_to(&self) -> u64 {
        self.base_to
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Whether the region has no octets.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// The access rights.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The region's memory (its address, for a consumer that registered its own buffer).
    pub fn memory(&self) -> &RegionMemory {
        &self.mem
    }

    /// Whether the STag is still valid (not invalidated, its memory not revoked).
    pub fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire) && !self.mem.is_revoked()
    }

    /// Invalidates the STag; true if it was valid.
    pub fn invalidate(&self) -> bool {
        self.valid.swap(false, Ordering::AcqRel)
    }

    /// Invalidates the STag and ends every access to the memory, waiting for a copy in
    /// progress (deregistration: once this returns, a consumer's own buffer is its own
    /// again).
    pub fn revoke(&self) {
        self.invalidate();
        self.mem.revoke();
    }

    /// Checks an access of `len` octets at Tagged Offset `to` needing `need`, and returns
    /// the offset in the region. Checks, in order: validity ([`MrError::Invalidated`]),
    /// access rights, TO wrap, bounds. The protection domain is the caller's to check
    /// (it knows its own).
    pub fn check(&self, to: u64, len: usize, need: Access) -> Result<usize, MrError> {
        if !self.is_valid() {
            return Err(MrError::Invalidated);
        }
        if !self.access.contains(need) {
            return Err(MrError::AccessDenied);
        }
        let len64 = u64::try_from(len).map_err(|_| MrError::ToWrap)?;
        let end = to.checked_add(len64).ok_or(MrError::ToWrap)?;
        if to < self.base_to {
            return Err(MrError::OutOfBounds);
        }
        let off = to - self.base_to;
        let region_end = self.base_to.saturating_add(self.len() as u64);
        if end > region_end {
            return Err(MrError::OutOfBounds);
        }
        usize::try_from(off).map_err(|_| MrError::OutOfBounds)
    }

    /// Copies `data` to region offset `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), MrError> {
        Ok(self.mem.write(offset, data)?)
    }

    /// Copies `data` to `offset` so that the final octet is stored last, with Release: a
    /// poller that sees the final octet ([`load_u8_acquire`](Self::load_u8_acquire)) sees
    /// all of `data`.
    pub fn write_last_visible_last(&self, offset: usize, data: &[u8]) -> Result<(), MrError> {
        Ok(self.mem.write_last_visible_last(offset, data)?)
    }

    /// Copies a ULPDU's payload as it lies in received octets, run after run between
    /// markers, to region offset `offset`; with `last_visible_last` its final octet is
    /// stored last, as [`write_last_visible_last`](Self::write_last_visible_last) does.
    pub fn write_runs(
        &self,
        offset: usize,
        data: &UlpduRuns<'_>,
        last_visible_last: bool,
    ) -> Result<(), MrError> {
        Ok(data.write_to(&self.mem, offset, last_visible_last)?)
    }

    /// Copies `out.len()` octets at region offset `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MrError> {
        Ok(self.mem.read(offset, out)?)
    }

    /// Appends `len` octets from region offset `offset` to `out`.
    pub fn append_to(&self, offset: usize, len: usize, out: &mut Vec<u8>) -> Result<(), MrError> {
        Ok(self.mem.append_to(offset, len, out)?)
    }

    /// The octet at `offset`, loaded with Acquire (for pollers; see
    /// [`write_last_visible_last`](Self::write_last_visible_last)); `None` out of range.
    pub fn load_u8_acquire(&self, offset: usize) -> Option<u8> {
        self.mem.load_u8_acquire(offset).ok()
    }

    /// Sets every octet to `byte`.
    pub fn fill(&self, byte: u8) {
        let _ = self.mem.fill(byte);
    }

    /// The whole region as a new vector (tests and diagnostics).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        let _ = self.read(0, &mut v);
        v
    }
}

/// The table of registered regions, shared by the consumer and the core through an `Arc`.
#[derive(Debug)]
pub struct MrTable {
    inner: RwLock<Slots>,
}

#[derive(Debug)]
struct Slots {
    /// By STag index (never 0).
    regions: HashMap<u32, Arc<MemoryRegion>, foldhash::fast::RandomState>,
    rng: StdRng,
}

/// The largest STag index (24 bits).
pub const MAX_STAG_INDEX: u32 = 0x00FF_FFFF;

impl Default for MrTable {
    fn default() -> Self {
        MrTable::new()
    }
}

impl MrTable {
    /// An empty table with a generator seeded by the operating system.
    pub fn new() -> MrTable {
        let rng = StdRng::try_from_rng(&mut SysRng).unwrap_or_else(|_| {
            // No OS randomness (should not happen on Linux): fall back to std's
            // randomly keyed hasher, still unpredictable from outside the process.
            let h = std::collections::hash_map::RandomState::new();
            let mut seed = [0u8; 32];
            for (i, c) in seed.chunks_mut(8).enumerate() {
                c.copy_from_slice(&std::hash::BuildHasher::hash_one(&h, i).to_le_bytes());
            }
            StdRng::from_seed(seed)
        });
        MrTable::with_rng(rng)
    }

    /// An empty table whose STags come from a generator with this seed (reproducible
    /// tests only: production tables use [`MrTable::new`]).
    pub fn with_seed(seed: [u8; 32]) -> MrTable {
        MrTable::with_rng(StdRng::from_seed(seed))
    }

    fn with_rng(rng: StdRng) -> MrTable {
        MrTable {
            inner: RwLock::new(Slots {
                regions: HashMap::default(),
                rng,
            }),
        }
    }

    /// Registers a zeroed, page-aligned region of `len` octets whose first octet has TO
    /// `base_to`, under a fresh random STag.
    pub fn register(
        &self,
        pd: u32,
        base_to: u64,
        len: usize,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MrError> {
        let mem = RegionMemory::allocate(len).map_err(|_| MrError::AllocFailed)?;
        self.register_memory(pd, base_to, mem, access)
    }

    /// Registers `mem` (see [`RegionMemory`]: memory we allocated, a buffer the consumer
    /// handed over, or its own buffer registered in place) whose first octet has TO
    /// `base_to`, under a fresh random STag.
    pub fn register_memory(
        &self,
        pd: u32,
        base_to: u64,
        mem: RegionMemory,
        access: Access,
    ) -> Result<Arc<MemoryRegion>, MrError> {
        let mut s = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if s.regions.len() >= MAX_STAG_INDEX as usize / 2 {
            // Half the index space in use: random draws would start to collide often.
            return Err(MrError::NoStag);
        }
        let index = loop {
            let i = s.rng.random_range(1..=MAX_STAG_INDEX);
            if !s.regions.contains_key(&i) {
                break i;
            }
        };
        let key: u8 = s.rng.random();
        let stag = (index << 8) | u32::from(key);
        let mr = Arc::new(MemoryRegion::with_memory(stag, pd, base_to, mem, access));
        s.regions.insert(index, mr.clone());
        Ok(mr)
    }

    /// The region with this STag (index and key), valid or not.
    pub fn lookup(&self, stag: u32) -> Option<Arc<MemoryRegion>> {
        let s = self.inner.read().unwrap_or_else(|e| e.into_inner());
        match s.regions.get(&(stag >> 8)) {
            Some(mr) if mr.stag == stag => Some(mr.clone()),
            _ => None,
        }
    }

    /// Removes the region, invalidates it (so holders of its `Arc` see it gone) and ends
    /// every access to its memory, waiting for a copy in progress
    /// ([`MemoryRegion::revoke`]); false if no region has this STag.
    pub fn deregister(&self, stag: u32) -> bool {
        let mut s = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let index = stag >> 8;
        match s.regions.get(&index) {
            Some(mr) if mr.stag == stag => {
                let mr = mr.clone();
                s.regions.remove(&index);
                drop(s);
                // Waits for a copy in progress: a consumer's own buffer is its own again
                // once this returns.
                mr.revoke();
                true
            }
            _ => false,
        }
    }

    /// Invalidates the region `stag` on behalf of protection domain `pd` (Send with
    /// Invalidate, local invalidate). Errors: no such STag ([`MrError::InvalidStag`]),
    /// another PD ([`MrError::PdMismatch`]), already invalid ([`MrError::Invalidated`]).
    pub fn invalidate(&self, stag: u32, pd: u32) -> Result<(), MrError> {
        let mr = self.lookup(stag).ok_or(MrError::InvalidStag)?;
        if mr.pd != pd {
            return Err(MrError::PdMismatch);
        }
        if mr.invalidate() {
            Ok(())
        } else {
            Err(MrError::Invalidated)
        }
    }

    /// How many regions are registered.
    pub fn len(&self) -> usize {
        let s = self.inner.read().unwrap_or_else(|e| e.into_inner());
        s.regions.len()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn access_bits() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert!(a.contains(Access::LOCAL_WRITE));
        assert!(a.contains(Access::REMOTE_WRITE));
        assert!(!a.contains(Access::REMOTE_READ));
        assert!(a.contains(Access::empty()));
        assert_eq!(format!("{a:?}"), "Access(LOCAL_WRITE | REMOTE_WRITE)");
        assert_eq!(format!("{:?}", Access::empty()), "Access(empty)");
        assert!(Access::all().contains(a | Access::REMOTE_READ));
    }

    #[test]
    fn table_stags() {
        let t = MrTable::new();
        let a = t.register(1, 0x1000, 100, Access::all()).unwrap();
        assert!(a.stag() > 1);
        assert_eq!(t.lookup(a.stag()).unwrap().stag(), a.stag());
        assert!(t.lookup(a.stag() ^ 1).is_none());
        assert!(t.lookup(0).is_none() && t.lookup(1).is_none());
        let old = a.stag();
        assert!(t.deregister(old));
        assert!(!t.deregister(old));
        assert!(!a.is_valid());
        let b = t.register(1, 0, 8, Access::empty()).unwrap();
        assert_ne!(b.stag(), old, "a fresh STag");
        assert!(t.lookup(old).is_none());
        assert_eq!(t.invalidate(b.stag(), 2), Err(MrError::PdMismatch));
        assert_eq!(t.invalidate(b.stag(), 1), Ok(()));
        assert_eq!(t.invalidate(b.stag(), 1), Err(MrError::Invalidated));
        assert_eq!(t.invalidate(0x7777_7700, 1), Err(MrError::InvalidStag));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn stags_are_unpredictable_and_unique() {
        let a = MrTable::new();
        let b = MrTable::new();
        let sa: Vec<u32> = (0..64)
            .map(|_| a.register(1, 0, 1, Access::empty()).unwrap().stag())
            .collect();
        let sb: Vec<u32> = (0..64)
            .map(|_| b.register(1, 0, 1, Access::empty()).unwrap().stag())
            .collect();
        assert_ne!(sa, sb, "two tables draw different STags");
        let mut u = sa.clone();
        u.sort_unstable();
        u.dedup();
        assert_eq!(u.len(), sa.len());
        assert!(sa.iter().all(|s| s >> 8 != 0));
        // Neither counting up nor evenly spaced: consecutive differences vary.
        let d: std::collections::HashSet<u32> =
            sa.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(d.len() > 60, "differences {d:?}");
        // The index space is spread: the high index bit is set about half the time.
        let high = sa.iter().filter(|s| *s & 0x8000_0000 != 0).count();
        assert!((10..=54).contains(&high), "{high} of 64 with the high bit");
        // Seeded tables repeat (for tests).
        let x = MrTable::with_seed([7; 32])
            .register(1, 0, 1, Access::empty())
            .unwrap();
        let y = MrTable::with_seed([7; 32])
            .register(1, 0, 1, Access::empty())
            .unwrap();
        assert_eq!(x.stag(), y.stag());
    }

    #[test]
    fn check_rules() {
        let mr = MemoryRegion::new(0x100, 1, 1000, 100, Access::REMOTE_WRITE).unwrap();
        assert_eq!(mr.check(1000, 100, Access::REMOTE_WRITE), Ok(0));
        assert_eq!(mr.check(1050, 50, Access::REMOTE_WRITE), Ok(50));
        assert_eq!(mr.check(1100, 0, Access::REMOTE_WRITE), Ok(100));
        assert_eq!(
            mr.check(1050, 51, Access::REMOTE_WRITE),
            Err(MrError::OutOfBounds)
        );
        assert_eq!(
            mr.check(999, 1, Access::REMOTE_WRITE),
            Err(MrError::OutOfBounds)
        );
        assert_eq!(
            mr.check(u64::MAX, 2, Access::REMOTE_WRITE),
            Err(MrError::ToWrap)
        );
        assert_eq!(
            mr.check(1000, 1, Access::REMOTE_READ),
            Err(MrError::AccessDenied)
        );
        mr.invalidate();
        assert_eq!(
            mr.check(1000, 1, Access::REMOTE_WRITE),
            Err(MrError::Invalidated)
        );
        assert_eq!(mr.write(90, &[0; 11]), Err(MrError::OutOfBounds));
        assert_eq!(mr.read(usize::MAX, &mut [0; 2]), Err(MrError::OutOfBounds));
        assert_eq!(mr.load_u8_acquire(100), None);
    }

    #[test]
    fn last_visible_last_and_fill() {
        let mr = MemoryRegion::new(0x100, 1, 0, 37, Access::all()).unwrap();
        mr.fill(0xAA);
        assert_eq!(mr.to_vec(), vec![0xAA; 37]);
        let data: Vec<u8> = (0..30).collect();
        mr.write_last_visible_last(3, &data).unwrap();
        assert_eq!(mr.load_u8_acquire(32), Some(29));
        let v = mr.to_vec();
        assert_eq!(&v[..3], &[0xAA; 3]);
        assert_eq!(&v[3..33], &data[..]);
        assert_eq!(&v[33..], &[0xAA; 4]);
    }

    proptest! {
        #[test]
        fn write_read_round_trip(len in 0usize..80, off in 0usize..80, n in 0usize..80, last in any::<bool>()) {
            let mr = MemoryRegion::new(0x100, 1, 0, len, Access::all()).unwrap();
            mr.fill(0x5A);
            let data: Vec<u8> = (0..n).map(|i| i as u8 ^ 0xC3).collect();
            let r = if last { mr.write_last_visible_last(off, &data) } else { mr.write(off, &data) };
            let mut model = vec![0x5Au8; len];
            if off + n <= len {
                prop_assert!(r.is_ok());
                model[off..off + n].copy_from_slice(&data);
                let mut back = vec![0u8; n];
                mr.read(off, &mut back).unwrap();
                prop_assert_eq!(&back, &data);
                let mut appended = vec![9u8];
                mr.append_to(off, n, &mut appended).unwrap();
                prop_assert_eq!(&appended[1..], &data[..]);
            } else {
                prop_assert_eq!(r, Err(MrError::OutOfBounds));
            }
            prop_assert_eq!(mr.to_vec(), model);
        }
    }
}
