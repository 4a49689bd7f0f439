//! Hand-written helpers over the generated bindings.

use core::ffi::{c_char, c_int, CStr};
use std::ffi::CString;

use crate::{dpdk_sys_errno, rte_eal_init, rte_mbuf, rte_strerror};

/// `rte_errno` of the calling thread (DPDK's per-thread error number, set by most
/// functions that return `NULL` or `-1`).
#[inline]
pub fn rte_errno() -> i32 {
    // SAFETY: dpdk_sys_errno only reads the calling thread's `rte_errno` thread-local,
    // which exists (zero-initialised) in every thread, EAL initialised or not.
    unsafe { dpdk_sys_errno() }
}

/// `rte_strerror(errnum)` as an owned string: the text for an errno or `rte_errno`
/// value, including DPDK's own codes (`E_RTE_SECONDARY`, `E_RTE_NO_CONFIG`).
pub fn strerror(errnum: i32) -> String {
    // SAFETY: rte_strerror accepts any value and returns a pointer to a NUL-terminated
    // string (a static one or the calling thread's buffer), valid until the next call on
    // this thread; it is copied out before returning.
    unsafe {
        let s = rte_strerror(errnum);
        if s.is_null() {
            return format!("unknown error {errnum}");
        }
        CStr::from_ptr(s).to_string_lossy().into_owned()
    }
}

/// Calls `rte_eal_init` with `args` as `argv` (`args[0]` is the program name, as in C).
///
/// Returns the number of arguments EAL consumed, or `Err(rte_errno)` (also
/// `Err(EINVAL)` when an argument contains a NUL byte). The argument strings are leaked
/// on purpose: EAL may keep pointers into `argv`, and it is initialised once per process.
///
/// # Safety
///
/// The usual `rte_eal_init` contract: call it from the thread that is to become the
/// main lcore, at most once per process (a second call fails with `EALREADY`, even after
/// `rte_eal_cleanup`), not concurrently with any other DPDK call. EAL installs threads,
/// CPU affinity and memory mappings for the whole process.
pub unsafe fn eal_init<S: AsRef<str>>(args: &[S]) -> Result<c_int, c_int> {
    const EINVAL: c_int = 22;
    let mut argv: Vec<*mut c_char> = Vec::with_capacity(args.len() + 1);
    for a in args {
        let c = CString::new(a.as_ref()).map_err(|_| EINVAL)?;
        argv.push(c.into_raw());
    }
    argv.push(core::ptr::null_mut());
    let argc = c_int::try_from(args.len()).map_err(|_| EINVAL)?;
    let argv = argv.leak();
    // SAFETY: argv holds argc valid NUL-terminated strings followed by NULL, all leaked
    // so they outlive the process's use of them; the caller upholds rte_eal_init's
    // threading contract (see # Safety).
    let ret = unsafe { rte_eal_init(argc, argv.as_mut_ptr()) };
    if ret < 0 {
        Err(rte_errno())
    } else {
        Ok(ret)
    }
}

/// `rte_pktmbuf_mtod(m, T *)`: pointer to the start of the data in the first segment,
/// computed inline (`buf_addr + data_off`) without calling the C shim.
///
/// # Safety
///
/// `m` must point to a valid, initialised `rte_mbuf`.
#[inline(always)]
pub unsafe fn pktmbuf_mtod<T>(m: *const rte_mbuf) -> *mut T {
    // SAFETY: the caller guarantees `m` is a valid mbuf, so reading its fields is sound;
    // `data_off <= buf_len` for a valid mbuf, so the offset stays inside its buffer.
    unsafe {
        (*m).buf_addr
            .cast::<u8>()
            .add(usize::from((*m).data_off))
            .cast()
    }
}

/// `rte_pktmbuf_mtod_offset(m, T *, off)`: [`pktmbuf_mtod`] plus `off` bytes.
///
/// # Safety
///
/// `m` must point to a valid, initialised `rte_mbuf`, and `off` must stay within its
/// first segment's buffer.
#[inline(always)]
pub unsafe fn pktmbuf_mtod_offset<T>(m: *const rte_mbuf, off: usize) -> *mut T {
    // SAFETY: as for pktmbuf_mtod; the caller keeps `off` inside the buffer.
    unsafe { pktmbuf_mtod::<u8>(m).add(off).cast() }
}

/// `rte_pktmbuf_data_len(m)`: bytes of data in this segment.
///
/// # Safety
///
/// `m` must point to a valid, initialised `rte_mbuf`.
#[inline(always)]
pub unsafe fn pktmbuf_data_len(m: *const rte_mbuf) -> u16 {
    // SAFETY: the caller guarantees `m` is a valid mbuf.
    unsafe { (*m).data_len }
}

/// `rte_pktmbuf_pkt_len(m)`: bytes of data in the whole chain (valid on the first
/// segment).
///
/// # Safety
///
/// `m` must point to a valid, initialised `rte_mbuf`.
#[inline(always)]
pub unsafe fn pktmbuf_pkt_len(m: *const rte_mbuf) -> u32 {
    // SAFETY: the caller guarantees `m` is a valid mbuf.
    unsafe { (*m).pkt_len }
}
