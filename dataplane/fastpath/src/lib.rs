//! The fast path's machine-level pieces: the one crate of the dataplane (besides the DPDK
//! bindings) where `unsafe` lives, each block with a `SAFETY:` comment, behind a safe API,
//! and tested against a safe reference.
//!
//! * [`kernels`]: one pass over a run of octets that copies it, advances a CRC32c and
//!   takes its one's complement sum (RFC 1071), with the kernel chosen at run time for the
//!   CPU (VPCLMULQDQ + AVX-512, VPCLMULQDQ + AVX2, PCLMULQDQ + SSE4.2, SSE4.2, or a
//!   portable one), MPA markers put in by the same pass, the strided copy that takes
//!   them out on receive ([`kernels::copy_strided_raw`]: runs between markers in
//!   64-octet vectors with AVX-512), and a prefetch for writing (`PREFETCHW`) for
//!   buffers another core touched last.
//! * [`regmem`]: registered memory as real memory: page-aligned regions we allocate, or a
//!   consumer's own buffer registered in place (as `ibv_reg_mr` does).

#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod kernels;
pub mod regmem;
