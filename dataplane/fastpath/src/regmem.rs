//! Registered memory as real memory: the storage of an RDMA memory region.
//!
//! A [`RegionMemory`] is a run of octets that two threads share: the poll-mode core places
//! the peer's data into it (RDMA Write, Read Response, Send) and reads from it (RDMA Read,
//! Send and Write sources), while the consumer reads and writes it too. It is one of
//!
//! * memory we allocate ([`RegionMemory::allocate`]): zeroed and page-aligned;
//! * a buffer the consumer hands over ([`RegionMemory::from_boxed`]), freed with the region;
//! * a consumer's own buffer registered in place ([`RegionMemory::from_raw_parts`], as
//!   `ibv_reg_mr` does): the caller keeps it alive, unmoved, until the region is
//!   deregistered ([`RegionMemory::revoke`]), and revocation waits for any copy in
//!   progress, so once it returns no thread touches the buffer again;
//! * memory of another allocator, hugepages for instance, with the function that frees it
//!   ([`RegionMemory::from_raw_parts_with_free`]).
//!
//! Every copy is a plain copy through raw pointers (one pass of the [`crate::kernels`] when
//! a CRC32c and a sum are wanted too); no Rust reference to the memory is ever made.
//!
//! # The RDMA contract, and what it means for Rust
//!
//! Registered memory is shared with the peer as it is with a NIC's DMA: the core copies
//! into a region when the peer writes it (RDMA Write, Read Response, Send) and out of it
//! when the peer reads it. The verbs contract holds here as with any RNIC, and the consumer
//! keeps it: it does not write octets that an outstanding operation reads (a posted Send,
//! Write or Read Response source, a region the peer may RDMA Read), and it does not read
//! octets that the peer may be placing into until the message that places them has
//! completed. Kept, no two threads ever touch the same octet at once and every copy is
//! well-defined. Broken (the consumer writing a region while the peer reads it, say), the
//! copies race: the octets read have no defined value, as with a NIC, and in terms of the
//! Rust memory model the racing copies are a data race. This module does not make that
//! impossible in safe code, on purpose: ruling it out would take atomic accesses to every
//! octet on both sides, which is the per-word cost the fast path exists to remove. The one
//! concurrent access RDMA does define is honoured: [`RegionMemory::write_last_visible_last`]
//! stores the final octet of a placement last, with an atomic Release store, so a poller
//! that watches it with [`RegionMemory::load_u8_acquire`] (an atomic Acquire load) sees
//! every octet before it once it sees that one. A poller watches only octets it expects
//! the peer to write once, as RDMA pollers do.
//!
//! Offsets and lengths are checked on every access: nothing here panics or touches memory
//! outside the region on bad input; accesses return [`AccessError`].

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};

use crate::kernels;

/// The page size regions we allocate are aligned to.
pub const PAGE: usize = 4096;

/// Why an access to region memory was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessError {
    /// The range is not inside the region.
    OutOfBounds,
    /// The region was revoked (deregistered): its memory is no longer ours to touch.
    Revoked,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessError::OutOfBounds => "range outside the memory region",
            AccessError::Revoked => "memory region deregistered",
        })
    }
}

impl std::error::Error for AccessError {}

/// The region's storage could not be allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocError {
    /// Octets asked for.
    pub len: usize,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "could not allocate {} octets of region memory", self.len)
    }
}

impl std::error::Error for AllocError {}

/// A function that frees memory of another allocator, given its address and length.
pub type FreeFn = Box<dyn FnOnce(*mut u8, usize) + Send + Sync>;

/// Who owns the octets, and so how they are given back.
enum Owner {
    /// `std::alloc` with this layout (len > 0).
    Allocated(Layout),
    /// A `Box<[u8]>` taken apart (rebuilt and dropped at the end).
    Boxed,
    /// The consumer's; nothing to free.
    Borrowed,
    /// Another allocator's, freed by this function.
    Foreign(Option<FreeFn>),
    /// Nothing (a region of no octets).
    Empty,
}

/// The gate of a region whose memory can be revoked: the count of copies in progress, and
/// the revoked bit.
const REVOKED: u32 = 1 << 31;

/// The storage of one memory region (see the module docs).
pub struct RegionMemory {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
    /// Copies in progress and the revoked bit. Only borrowed and foreign memory pass
    /// through it ([`RegionMemory::gated`]): memory the region owns lives as long as the
    /// region does.
    gate: AtomicU32,
    gated: bool,
}

// SAFETY: the region owns its memory, or its creator promised (from_raw_parts*) that the
// memory stays valid until revocation; every access goes through raw pointers or atomics
// (never a reference), so sharing the pointer between threads adds no aliasing claim.
unsafe impl Send for RegionMemory {}
// SAFETY: as for Send: `&RegionMemory` only allows raw-pointer copies and atomic accesses.
unsafe impl Sync for RegionMemory {}

impl fmt::Debug for RegionMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.owner {
            Owner::Allocated(_) => "allocated",
            Owner::Boxed => "boxed",
            Owner::Borrowed => "borrowed",
            Owner::Foreign(_) => "foreign",
            Owner::Empty => "empty",
        };
        f.debug_struct("RegionMemory")
            .field("kind", &kind)
            .field("len", &self.len)
            .field("revoked", &self.is_revoked())
            .finish()
    }
}

/// A copy in progress: holds the gate open (see [`RegionMemory::enter`]).
struct Pass<'a>(Option<&'a AtomicU32>);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.0 {
            g.fetch_sub(1, Ordering::Release);
        }
    }
}

impl RegionMemory {
    fn with(ptr: NonNull<u8>, len: usize, owner: Owner, gated: bool) -> Self {
        RegionMemory {
            ptr,
            len,
            owner,
            gate: AtomicU32::new(0),
            gated,
        }
    }

    /// `len` zeroed octets, page-aligned.
    pub fn allocate(len: usize) -> Result<Self, AllocError> {
        if len == 0 {
            return Ok(Self::with(NonNull::dangling(), 0, Owner::Empty, false));
        }
        let layout = Layout::from_size_align(len, PAGE).map_err(|_| AllocError { len })?;
        // SAFETY: the layout has a nonzero size (len > 0).
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(AllocError { len })?;
        Ok(Self::with(ptr, len, Owner::Allocated(layout), false))
    }

    /// The consumer's buffer, handed over: the region owns it from now on and frees it
    /// when dropped.
    pub fn from_boxed(buf: Box<[u8]>) -> Self {
        let len = buf.len();
        if len == 0 {
            return Self::with(NonNull::dangling(), 0, Owner::Empty, false);
        }
        let p = Box::into_raw(buf).cast::<u8>();
        // SAFETY: Box::into_raw never returns null.
        let ptr = unsafe { NonNull::new_unchecked(p) };
        Self::with(ptr, len, Owner::Boxed, false)
    }

    /// A consumer's own buffer registered in place, as `ibv_reg_mr` registers one.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` octets, and stay so (allocated,
    /// not moved, not freed) until [`RegionMemory::revoke`] has returned or the region is
    /// dropped, whichever comes first. While registered, the octets may be changed at any
    /// time by the peer (through the core) as a NIC's DMA would change them: the caller
    /// must not hold a Rust reference (`&[u8]`, `&mut [u8]`) to them across such a time,
    /// and reads them through this region (or raw pointers) instead.
    ///
    /// # Panics
    ///
    /// If `ptr` is null and `len` is not 0 (a caller's bug: no buffer is there).
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Self {
        assert!(
            len == 0 || !ptr.is_null(),
            "RegionMemory::from_raw_parts: a null pointer for {len} octets"
        );
        match NonNull::new(ptr) {
            Some(p) if len > 0 => Self::with(p, len, Owner::Borrowed, true),
            _ => Self::with(NonNull::dangling(), 0, Owner::Empty, false),
        }
    }

    /// Memory of another allocator (hugepages from DPDK, say), freed by `free(ptr, len)`
    /// once the region is revoked and dropped.
    ///
    /// # Safety
    ///
    /// As for [`RegionMemory::from_raw_parts`], and `free` must be the right way to give
    /// this memory back; it is called once, after the last access.
    ///
    /// # Panics
    ///
    /// As [`RegionMemory::from_raw_parts`].
    pub unsafe fn from_raw_parts_with_free(ptr: *mut u8, len: usize, free: FreeFn) -> Self {
        assert!(
            len == 0 || !ptr.is_null(),
            "RegionMemory::from_raw_parts_with_free: a null pointer for {len} octets"
        );
        match NonNull::new(ptr) {
            Some(p) if len > 0 => Self::with(p, len, Owner::Foreign(Some(free)), true),
            _ => {
                free(ptr, len);
                Self::with(NonNull::dangling(), 0, Owner::Empty, false)
            }
        }
    }

    /// Octets in the region.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no octets.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first octet (for the consumer that registered its own buffer,
    /// or to hand to a device). Use it only as the [`RegionMemory::from_raw_parts`]
    /// contract allows.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the region was revoked.
    pub fn is_revoked(&self) -> bool {
        self.gate.load(Ordering::Acquire) & REVOKED != 0
    }

    /// Ends every access to the memory: later copies fail with
    /// [`AccessError::Revoked`], and this returns only once copies in progress have
    /// finished, so that the owner of borrowed memory may free it right after. Returns
    /// whether this call revoked it (false if it was already).
    pub fn revoke(&self) -> bool {
        let before = self.gate.fetch_or(REVOKED, Ordering::AcqRel);
        // A copy takes a few microseconds at most; spin, then yield.
        let mut spins = 0u32;
        while self.gate.load(Ordering::Acquire) & !REVOKED != 0 {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        before & REVOKED == 0
    }

    /// Opens the gate for one copy of `len` octets at `offset`: checks the range and that
    /// the region is not revoked, and keeps it from being revoked until the pass drops.
    fn enter(&self, offset: usize, len: usize) -> Result<Pass<'_>, AccessError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {}
            _ => return Err(AccessError::OutOfBounds),
        }
        if !self.gated {
            if self.gate.load(Ordering::Relaxed) & REVOKED != 0 {
                return Err(AccessError::Revoked);
            }
            return Ok(Pass(None));
        }
        if self.gate.load(Ordering::Relaxed) & REVOKED != 0 {
            // Revoked: no need to touch the count (a caller retrying in a loop would keep
            // `revoke` waiting).
            return Err(AccessError::Revoked);
        }
        let prev = self.gate.fetch_add(1, Ordering::Acquire);
        let pass = Pass(Some(&self.gate));
        if prev & REVOKED != 0 {
            return Err(AccessError::Revoked);
        }
        Ok(pass)
    }

    /// The address of octet `offset` (in bounds, checked by the caller).
    fn at(&self, offset: usize) -> *mut u8 {
        // SAFETY: callers pass offsets at most `len` (checked by `enter`), so the result
        // is inside the allocation or one past its end.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// Copies `data` to region offset `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        let _pass = self.enter(offset, data.len())?;
        // SAFETY: the range is inside the region (checked by `enter`), which stays valid
        // while the pass is held; `data` is a slice of other memory (a `&[u8]` cannot
        // point into a region, which hands out no references).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.at(offset), data.len()) };
        Ok(())
    }

    /// Copies `data` to region offset `offset` so that its final octet is stored last,
    /// with Release: a poller that sees it ([`RegionMemory::load_u8_acquire`]) sees all of
    /// `data`.
    pub fn write_last_visible_last(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        let _pass = self.enter(offset, data.len())?;
        let Some((&last, body)) = data.split_last() else {
            return Ok(());
        };
        // SAFETY: as in `write`, for the first `len - 1` octets.
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), self.at(offset), body.len()) };
        // SAFETY: octet offset + len - 1 is inside the region, valid while the pass is
        // held; an AtomicU8 has the size and alignment of a u8. The access that may run
        // at the same time as this store is a poller's atomic load of the same octet
        // (`load_u8_acquire`); non-atomic accesses to it at the same time are what the
        // contract in the module docs rules out.
        let cell = unsafe { AtomicU8::from_ptr(self.at(offset + body.len())) };
        cell.store(last, Ordering::Release);
        Ok(())
    }

    /// Copies the octets of `runs`, one run after the other, to region offset `offset`
    /// (a ULPDU placed from between the markers it arrived with): `len` octets in all,
    /// the range checked once, before anything is written. With `last_visible_last`, the
    /// final octet is stored last, with Release, as
    /// [`RegionMemory::write_last_visible_last`] does. Runs that add up to more or less
    /// than `len` are a caller's error: nothing is written outside the range, and the
    /// result is [`AccessError::OutOfBounds`].
    pub fn write_gather<'d, I>(
        &self,
        offset: usize,
        len: usize,
        runs: I,
        last_visible_last: bool,
    ) -> Result<(), AccessError>
    where
        I: IntoIterator<Item = &'d [u8]>,
    {
        let _pass = self.enter(offset, len)?;
        let end = offset + len;
        let mut at = offset;
        for run in runs {
            if run.is_empty() {
                continue;
            }
            if run.len() > end - at {
                return Err(AccessError::OutOfBounds);
            }
            let last = last_visible_last && at + run.len() == end;
            let body = if last { &run[..run.len() - 1] } else { run };
            // SAFETY: `at .. at + run.len()` is inside the range `enter` checked, so inside
            // the region, valid while the pass is held; `run` is other memory (a `&[u8]`
            // cannot point into a region, which hands out no references).
            unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), self.at(at), body.len()) };
            at += run.len();
            if last {
                // SAFETY: as in `write_last_visible_last`: octet `at - 1` is inside the
                // region, valid while the pass is held, and the only access that may meet
                // this store is a poller's atomic load of the same octet.
                let cell = unsafe { AtomicU8::from_ptr(self.at(at - 1)) };
                cell.store(run[run.len() - 1], Ordering::Release);
            }
        }
        if at != end {
            return Err(AccessError::OutOfBounds);
        }
        Ok(())
    }

    /// Copies `len` octets to region offset `offset` from `src`, where they lie in runs
    /// with `gap` octets between them that are not copied: the first run is `first`
    /// octets long, every later one `run` octets, the last what is left. This is a
    /// ULPDU between MPA markers (RFC 5044 section 4.3: runs of 508 octets between
    /// 4-octet markers) placed in one call, without a run iterator between the copies.
    /// `src` must hold exactly the runs and the gaps between them (none after the
    /// last), `run` must be at least 1, and `first` too unless `len` is 0: otherwise
    /// nothing is written and the result is
    /// [`AccessError::OutOfBounds`]. The range is checked once, before anything is
    /// written; `last_visible_last` as in [`RegionMemory::write_gather`].
    #[allow(clippy::too_many_arguments)]
    pub fn write_strided(
        &self,
        offset: usize,
        len: usize,
        src: &[u8],
        first: usize,
        run: usize,
        gap: usize,
        last_visible_last: bool,
    ) -> Result<(), AccessError> {
        let src_len = if run == 0 || (first == 0 && len > 0) {
            None
        } else if len <= first {
            Some(len)
        } else {
            (len - first)
                .div_ceil(run)
                .checked_mul(gap)
                .and_then(|g| g.checked_add(len))
        };
        if src_len != Some(src.len()) {
            return Err(AccessError::OutOfBounds);
        }
        let _pass = self.enter(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let body = if last_visible_last { len - 1 } else { len };
        // SAFETY: `offset .. offset + len` is inside the range `enter` checked, so inside
        // the region, valid while the pass is held; `src` holds exactly the runs and
        // gaps of `len` octets (checked above), so those of the first `body` octets too;
        // `src` is other memory (a `&[u8]` cannot point into a region, which hands out
        // no references); `first` and `run` are at least 1 for a nonempty copy
        // (checked above).
        unsafe { kernels::copy_strided_raw(self.at(offset), src.as_ptr(), body, first, run, gap) };
        if last_visible_last {
            // SAFETY: as in `write_last_visible_last`: octet `offset + len - 1` is inside
            // the region, valid while the pass is held, and the only access that may meet
            // this store is a poller's atomic load of the same octet.
            let cell = unsafe { AtomicU8::from_ptr(self.at(offset + len - 1)) };
            cell.store(src[src.len() - 1], Ordering::Release);
        }
        Ok(())
    }

    /// Copies `out.len()` octets from region offset `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), AccessError> {
        let _pass = self.enter(offset, out.len())?;
        // SAFETY: the range is inside the region, valid while the pass is held; `out` is
        // other memory.
        unsafe { std::ptr::copy_nonoverlapping(self.at(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// The part the `append_*` copies share: checks `[offset, offset + len)` and holds a
    /// pass on the region, makes room for `wire` octets at the end of `out`, has
    /// `fill(dst, src)` write them from the region's octets, and makes them part of `out`.
    ///
    /// # Safety
    ///
    /// `fill` writes exactly `wire` octets at `dst` and reads at most `len` octets at
    /// `src` (raw pointers only: other threads may access the region meanwhile).
    unsafe fn append_with<R>(
        &self,
        offset: usize,
        len: usize,
        wire: usize,
        out: &mut Vec<u8>,
        fill: impl FnOnce(*mut u8, *const u8) -> R,
    ) -> Result<R, AccessError> {
        let _pass = self.enter(offset, len)?;
        out.reserve(wire);
        let start = out.len();
        // SAFETY: `reserve` made room for `wire` octets past `start` (the pointer comes
        // from the vector's buffer, not from a reference to its spare capacity); the
        // source range is inside the region, valid while the pass is held, and is not
        // `out`'s memory. `fill` writes all `wire` octets (the caller's promise) before
        // `set_len` makes them part of the vector.
        unsafe {
            let r = fill(out.as_mut_ptr().add(start), self.at(offset));
            out.set_len(start + wire);
            Ok(r)
        }
    }

    /// Appends `len` octets from region offset `offset` to `out`.
    pub fn append_to(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), AccessError> {
        // SAFETY: the copy writes `len` octets from `len` octets of the source.
        unsafe {
            self.append_with(offset, len, len, out, |dst, src| {
                std::ptr::copy_nonoverlapping(src, dst, len)
            })
        }
    }

    /// Appends `len` octets from region offset `offset` to `out` in one pass that also
    /// advances the CRC32c `crc` and takes the octets' one's complement sum
    /// ([`kernels::copy_crc32c_sum`]'s conventions): returns the new CRC and the sum.
    pub fn append_crc32c_sum(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
        crc: u32,
    ) -> Result<(u32, u64), AccessError> {
        // SAFETY: the kernel writes `len` octets from `len` octets of the source.
        unsafe {
            self.append_with(offset, len, len, out, |dst, src| {
                kernels::copy_crc32c_sum_raw(dst, src, len, crc)
            })
        }
    }

    /// Appends `len` octets from region offset `offset` to `out` with markers between them
    /// as `markers` places them ([`kernels::copy_marked_raw`]: `markers.wire_len(len)`
    /// octets appended), in one pass that advances the CRC32c `crc` over every octet
    /// appended and takes their sum if `sum` (else 0): returns the new CRC and the sum.
    pub fn append_marked(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
        markers: kernels::Markers,
        crc: u32,
        sum: bool,
    ) -> Result<(u32, u64), AccessError> {
        // SAFETY: the marked copy writes `markers.wire_len(len)` octets from `len` octets
        // of the source.
        unsafe {
            self.append_with(offset, len, markers.wire_len(len), out, |dst, src| {
                kernels::copy_marked_raw(dst, src, len, markers, crc, sum)
            })
        }
    }

    /// [`RegionMemory::append_crc32c_sum`] without the sum (for a port that fills TCP
    /// checksums itself): returns the new CRC.
    pub fn append_crc32c(
        &self,
        offset: usize,
        len: usize,
        out: &mut Vec<u8>,
        crc: u32,
    ) -> Result<u32, AccessError> {
        // SAFETY: the kernel writes `len` octets from `len` octets of the source.
        unsafe {
            self.append_with(offset, len, len, out, |dst, src| {
                kernels::copy_crc32c_raw(dst, src, len, crc)
            })
        }
    }

    /// The octet at `offset`, loaded with Acquire (the reading side of
    /// [`RegionMemory::write_last_visible_last`]).
    pub fn load_u8_acquire(&self, offset: usize) -> Result<u8, AccessError> {
        let _pass = self.enter(offset, 1)?;
        // SAFETY: the octet is inside the region, valid while the pass is held; an
        // AtomicU8 has the size and alignment of a u8; the store it may meet at the same
        // time is `write_last_visible_last`'s atomic one (see the module docs).
        let cell = unsafe { AtomicU8::from_ptr(self.at(offset)) };
        Ok(cell.load(Ordering::Acquire))
    }

    /// Sets every octet to `byte`.
    pub fn fill(&self, byte: u8) -> Result<(), AccessError> {
        let _pass = self.enter(0, self.len)?;
        // SAFETY: the whole region, valid while the pass is held.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len) };
        // Fills are the consumer's set-up; order them before what the consumer does next
        // with the region (posting a work request that names it).
        fence(Ordering::Release);
        Ok(())
    }
}

impl Drop for RegionMemory {
    fn drop(&mut self) {
        self.revoke();
        let (ptr, len) = (self.ptr.as_ptr(), self.len);
        match std::mem::replace(&mut self.owner, Owner::Empty) {
            // SAFETY: allocated by `allocate` with this layout, freed once.
            Owner::Allocated(layout) => unsafe { alloc::dealloc(ptr, layout) },
            Owner::Boxed => {
                // SAFETY: taken apart by `from_boxed` from a Box<[u8]> of `len` octets;
                // rebuilt once.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
            }
            Owner::Foreign(Some(free)) => free(ptr, len),
            Owner::Foreign(None) | Owner::Borrowed | Owner::Empty => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn allocated_is_zeroed_and_page_aligned() {
        let m = RegionMemory::allocate(10_000).unwrap();
        assert_eq!(m.as_ptr() as usize % PAGE, 0);
        let mut v = vec![1u8; 10_000];
        m.read(0, &mut v).unwrap();
        assert!(v.iter().all(|&b| b == 0));
        assert!(RegionMemory::allocate(0).unwrap().is_empty());
        assert!(RegionMemory::allocate(usize::MAX).is_err());
    }

    #[test]
    fn bounds_are_checked() {
        let m = RegionMemory::allocate(100).unwrap();
        assert_eq!(m.write(90, &[0; 11]), Err(AccessError::OutOfBounds));
        assert_eq!(m.write(usize::MAX, &[0; 2]), Err(AccessError::OutOfBounds));
        assert_eq!(m.read(101, &mut []), Err(AccessError::OutOfBounds));
        assert_eq!(m.load_u8_acquire(100), Err(AccessError::OutOfBounds));
        let mut out = Vec::new();
        assert_eq!(m.append_to(50, 51, &mut out), Err(AccessError::OutOfBounds));
        assert_eq!(
            m.append_crc32c_sum(99, 2, &mut out, 0),
            Err(AccessError::OutOfBounds)
        );
        assert!(out.is_empty());
        assert_eq!(m.write(100, &[]), Ok(()));
    }

    #[test]
    fn last_octet_and_fill() {
        let m = RegionMemory::allocate(37).unwrap();
        m.fill(0xAA).unwrap();
        let data: Vec<u8> = (0..30).collect();
        m.write_last_visible_last(3, &data).unwrap();
        assert_eq!(m.load_u8_acquire(32), Ok(29));
        let mut all = vec![0; 37];
        m.read(0, &mut all).unwrap();
        assert_eq!(&all[..3], &[0xAA; 3]);
        assert_eq!(&all[3..33], &data[..]);
        assert_eq!(&all[33..], &[0xAA; 4]);
        m.write_last_visible_last(5, &[]).unwrap();
    }

    /// A strided copy whose run (or first run, for a copy that is not empty) is empty is
    /// refused, whatever the source holds.
    #[test]
    fn strided_copies_need_runs() {
        let m = RegionMemory::allocate(16).unwrap();
        let src = [1u8; 8];
        let refused = Err(AccessError::OutOfBounds);
        assert_eq!(m.write_strided(0, 5, &src[..5], 5, 0, 0, false), refused);
        assert_eq!(m.write_strided(0, 5, &src[..5], 0, 5, 0, false), refused);
        assert_eq!(m.write_strided(0, 0, &[], 0, 1, 4, true), Ok(()));
        assert_eq!(m.load_u8_acquire(4), Ok(0));
        assert_eq!(m.write_strided(0, 5, &src[..5], 5, 1, 4, true), Ok(()));
        assert_eq!(m.load_u8_acquire(4), Ok(1));
    }

    /// Runs that do not add up to the length given cannot make a gathered write leave
    /// the range checked, and are refused.
    #[test]
    fn gather_stays_in_the_checked_range() {
        let m = RegionMemory::allocate(16).unwrap();
        let run = &[7u8; 4][..];
        assert_eq!(
            m.write_gather(0, 4, [run, run, run], true),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            m.write_gather(8, 8, [run], false),
            Err(AccessError::OutOfBounds)
        );
        let mut all = [0u8; 16];
        m.read(0, &mut all).unwrap();
        assert_eq!(&all[..4], &[7; 4]);
        assert_eq!(&all[4..8], &[0; 4]);
        assert_eq!(&all[8..12], &[7; 4]);
        assert_eq!(&all[12..], &[0; 4]);
        let m = RegionMemory::allocate(8).unwrap();
        assert_eq!(
            m.write_gather(5, 4, [&[1u8, 2][..], &[3, 4][..]], false),
            Err(AccessError::OutOfBounds)
        );
        m.write_gather(4, 4, [&[1u8, 2][..], &[], &[3, 4][..]], true)
            .unwrap();
        assert_eq!(m.load_u8_acquire(7), Ok(4));
    }

    #[test]
    fn boxed_and_borrowed_memory() {
        let m = RegionMemory::from_boxed(vec![7u8; 64].into_boxed_slice());
        let mut out = Vec::new();
        m.append_to(60, 4, &mut out).unwrap();
        assert_eq!(out, [7; 4]);

        let mut mine = vec![0u8; 256];
        // SAFETY: `mine` outlives the region, is not moved, and is not referenced while
        // the region is alive (read back only after it is dropped).
        let m = unsafe { RegionMemory::from_raw_parts(mine.as_mut_ptr(), mine.len()) };
        m.write(10, b"placed").unwrap();
        assert!(m.revoke());
        assert!(!m.revoke());
        assert_eq!(m.write(0, b"x"), Err(AccessError::Revoked));
        assert_eq!(m.read(0, &mut [0]), Err(AccessError::Revoked));
        assert_eq!(m.load_u8_acquire(0), Err(AccessError::Revoked));
        drop(m);
        assert_eq!(&mine[10..16], b"placed");
        assert_eq!(mine[0], 0);
    }

    #[test]
    fn foreign_memory_is_freed_once_by_its_function() {
        use std::sync::atomic::AtomicUsize;
        static FREED: AtomicUsize = AtomicUsize::new(0);
        let b = vec![0u8; 128].into_boxed_slice();
        let len = b.len();
        let p = Box::into_raw(b).cast::<u8>();
        let free: FreeFn = Box::new(|p, len| {
            FREED.fetch_add(1, Ordering::SeqCst);
            // SAFETY: rebuilds the box taken apart above, once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) });
        });
        // SAFETY: `p` is a live allocation of `len` octets, freed only by `free`.
        let m = unsafe { RegionMemory::from_raw_parts_with_free(p, len, free) };
        m.write(0, &[1; 128]).unwrap();
        assert_eq!(FREED.load(Ordering::SeqCst), 0);
        drop(m);
        assert_eq!(FREED.load(Ordering::SeqCst), 1);
    }

    /// Revocation waits for a copy in progress and stops every later one, with another
    /// thread copying all along.
    #[test]
    fn revoke_waits_for_copies_in_progress() {
        let mut mine = vec![0u8; 1 << 20];
        let ptr = mine.as_mut_ptr();
        // SAFETY: `mine` outlives the region (revoked before `mine` is touched again).
        let m = Arc::new(unsafe { RegionMemory::from_raw_parts(ptr, 1 << 20) });
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (m, started) = (m.clone(), started.clone());
            std::thread::spawn(move || {
                let src = vec![0x5Au8; 1 << 20];
                let mut n = 0u64;
                while m.write(0, &src).is_ok() {
                    n += 1;
                    started.store(true, Ordering::Release);
                }
                n
            })
        };
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        m.revoke();
        // No copy runs now: the buffer is ours again.
        mine[0] = 1;
        let n = writer.join().unwrap();
        assert!(n > 0);
        assert_eq!(mine[0], 1);
        assert_eq!(mine[1], 0x5A);
    }

    proptest! {
        /// Every copy agrees with a plain vector used as the model.
        #[test]
        fn copies_agree_with_a_model(
            len in 0usize..300,
            ops in proptest::collection::vec((0usize..320, proptest::collection::vec(any::<u8>(), 0..80), 0u8..8), 0..20),
        ) {
            let m = RegionMemory::allocate(len).unwrap();
            let mut model = vec![0u8; len];
            for (off, data, kind) in ops {
                let fits = off + data.len() <= len;
                match kind {
                    0 => prop_assert_eq!(m.write(off, &data).is_ok(), fits),
                    1 => prop_assert_eq!(m.write_last_visible_last(off, &data).is_ok(), fits),
                    4 | 5 => {
                        // In runs cut where the data's own octets say (some empty).
                        let mut runs = Vec::new();
                        let mut rest = &data[..];
                        while !rest.is_empty() {
                            let mut n = usize::from(rest[0] % 9).min(rest.len());
                            if n == 0 {
                                runs.push(&rest[..0]);
                                n = 1;
                            }
                            runs.push(&rest[..n]);
                            rest = &rest[n..];
                        }
                        let r = m.write_gather(off, data.len(), runs.iter().copied(), kind == 5);
                        prop_assert_eq!(r.is_ok(), fits);
                        if fits && kind == 5 && !data.is_empty() {
                            prop_assert_eq!(m.load_u8_acquire(off + data.len() - 1), Ok(data[data.len() - 1]));
                        }
                    }
                    6 | 7 => {
                        // Strided: runs of 1 to 9 octets with gaps of 0 to 3 between
                        // them, as the data's own octets say.
                        let first = data.first().map_or(0, |&b| usize::from(b % 9) + 1);
                        let run = data.last().map_or(1, |&b| usize::from(b % 9) + 1);
                        let gap = data.len() % 4;
                        let mut src = Vec::new();
                        let mut runs = Vec::new();
                        let mut at = 0;
                        let mut take = first.min(data.len());
                        while at < data.len() {
                            if at > 0 {
                                src.extend(std::iter::repeat_n(0xee, gap));
                            }
                            src.extend_from_slice(&data[at..at + take]);
                            runs.push(&data[at..at + take]);
                            at += take;
                            take = run.min(data.len() - at);
                        }
                        let r = m.write_strided(off, data.len(), &src, first, run, gap, kind == 7);
                        prop_assert_eq!(r.is_ok(), fits);
                        if fits && kind == 7 && !data.is_empty() {
                            prop_assert_eq!(m.load_u8_acquire(off + data.len() - 1), Ok(data[data.len() - 1]));
                        }
                        // A source one octet too long or too short is refused, and writes
                        // nothing.
                        if !src.is_empty() {
                            let snapshot = || {
                                let mut v = vec![0u8; len];
                                m.read(0, &mut v).unwrap();
                                v
                            };
                            let before = snapshot();
                            prop_assert_eq!(m.write_strided(off, data.len(), &src[1..], first, run, gap, false), Err(AccessError::OutOfBounds));
                            let mut longer = src.clone();
                            longer.push(0);
                            prop_assert_eq!(m.write_strided(off, data.len(), &longer, first, run, gap, false), Err(AccessError::OutOfBounds));
                            prop_assert_eq!(snapshot(), before);
                        }
                    }
                    2 => {
                        let mut out = vec![9u8; 3];
                        let r = m.append_crc32c_sum(off, data.len(), &mut out, 0);
                        prop_assert_eq!(r.is_ok(), fits);
                        if fits {
                            let want = &model[off..off + data.len()];
                            prop_assert_eq!(&out[3..], want);
                            let (crc, sum) = r.unwrap();
                            prop_assert_eq!(crc, kernels::crc32c_append(0, want));
                            prop_assert_eq!(kernels::fold_sum(sum), kernels::fold_sum(kernels::crc32c_sum(0, want).1));
                            let mut plain = Vec::new();
                            prop_assert_eq!(m.append_crc32c(off, data.len(), &mut plain, 7), Ok(kernels::crc32c_append(7, want)));
                            prop_assert_eq!(&plain[..], want);
                            // Marked, from the region: what the kernel makes of the slice.
                            let markers = kernels::Markers { before: off % 509, fpduptr: off as u16 };
                            let mut marked = vec![1u8];
                            let r = m.append_marked(off, data.len(), &mut marked, markers, 7, off % 2 == 0);
                            let mut direct = vec![1u8];
                            let want_marked = kernels::append_marked(&mut direct, want, markers, 7, off % 2 == 0);
                            prop_assert_eq!(r, Ok(want_marked));
                            prop_assert_eq!(marked, direct);
                        } else {
                            let mut marked = Vec::new();
                            let markers = kernels::Markers { before: 0, fpduptr: 0 };
                            prop_assert_eq!(m.append_marked(off, data.len(), &mut marked, markers, 0, true), Err(AccessError::OutOfBounds));
                            prop_assert!(marked.is_empty());
                        }
                        continue;
                    }
                    _ => {
                        let mut out = Vec::new();
                        prop_assert_eq!(m.append_to(off, data.len(), &mut out).is_ok(), fits);
                        if fits {
                            prop_assert_eq!(&out[..], &model[off..off + data.len()]);
                        }
                        continue;
                    }
                }
                if fits {
                    model[off..off + data.len()].copy_from_slice(&data);
                }
            }
            let mut all = vec![0u8; len];
            m.read(0, &mut all).unwrap();
            prop_assert_eq!(all, model);
        }
    }
}
