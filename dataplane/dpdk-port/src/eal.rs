//! [`Eal`]: the process's DPDK Environment Abstraction Layer.

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fastpath::regmem::{FreeFn, RegionMemory};

use crate::error::{DpdkError, EALREADY, EINVAL, ENOMEM};

/// Set by the first [`Eal::init`]: `rte_eal_init` runs at most once per process.
static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// The initialised DPDK EAL of this process.
///
/// [`Eal::init`] succeeds at most once per process (DPDK cannot initialise twice, even
/// after `rte_eal_cleanup`); later calls return an error. The handle is shared by every
/// [`DpdkPort`](crate::DpdkPort) opened with it: `rte_eal_cleanup` runs when the `Eal`
/// and all those ports have been dropped, and the empty runtime directory EAL leaves
/// behind with `--no-shconf` is removed then. Do not keep other DPDK objects (made
/// through `dpdk-sys` directly) alive past that point.
#[derive(Debug, Clone)]
pub struct Eal {
    pub(crate) inner: Arc<EalInner>,
}

#[derive(Debug)]
pub(crate) struct EalInner {
    runtime_dir: Option<PathBuf>,
}

impl Eal {
    /// Initialises EAL with `argv`, program name first as in C (`["iwarp", "--no-huge",
    /// "-m", "256", "--no-pci", "-l", "0", "--vdev=net_af_packet0,iface=eth1"]`;
    /// `appconfig::Config::eal_argv` builds one). The calling thread becomes the EAL main
    /// lcore.
    ///
    /// Errors: `rte_eal_init` failing (bad argument, no memory, a device that cannot be
    /// probed), an argument containing a NUL byte (`EINVAL`), or EAL already initialised
    /// in this process (`EALREADY`, without calling DPDK again).
    pub fn init(argv: &[String]) -> Result<Eal, DpdkError> {
        if argv.is_empty() {
            return Err(DpdkError::invalid(
                "rte_eal_init",
                "",
                "argv is empty (argv[0] is the program name)",
            ));
        }
        if EAL_STARTED.swap(true, Ordering::AcqRel) {
            return Err(DpdkError::new(
                "rte_eal_init",
                "",
                EALREADY,
                "EAL is already initialised in this process (it can be initialised only once)",
            ));
        }
        // SAFETY: EAL_STARTED guarantees this is the only rte_eal_init of the process (a
        // failed one included: DPDK cannot retry either), so it cannot race another DPDK
        // call made through this crate; the thread calling it becomes the main lcore.
        let ret = unsafe { dpdk_sys::eal_init(argv) };
        if let Err(code) = ret {
            return Err(DpdkError::new(
                "rte_eal_init",
                "",
                code,
                format!(
                    "{} (EAL arguments: {})",
                    dpdk_sys::strerror(code),
                    argv[1..].join(" ")
                ),
            ));
        }
        // SAFETY: EAL is initialised; the returned string is owned by EAL and copied here.
        let runtime_dir = unsafe {
            let p = dpdk_sys::rte_eal_get_runtime_dir();
            (!p.is_null()).then(|| PathBuf::from(CStr::from_ptr(p).to_string_lossy().as_ref()))
        };
        Ok(Eal {
            inner: Arc::new(EalInner { runtime_dir }),
        })
    }

    /// Whether [`Eal::init`] has been called in this process (successfully or not).
    pub fn initialised() -> bool {
        EAL_STARTED.load(Ordering::Acquire)
    }

    /// `len` zeroed octets of DPDK's heap for a memory region (`rte_zmalloc_socket`,
    /// page-aligned, on any socket): hugepage-backed when EAL runs with hugepages, so a
    /// large region costs few TLB entries. The region keeps EAL alive and gives the
    /// memory back (`rte_free`) when it is dropped. [`Eal::heap_allocated`] counts it.
    ///
    /// Errors: the heap has no room (`ENOMEM`).
    pub fn region_memory(&self, len: usize) -> Result<RegionMemory, DpdkError> {
        if len == 0 {
            return Ok(RegionMemory::from_boxed(Box::default()));
        }
        // SAFETY: EAL is initialised (self exists); a null type string and any socket
        // are allowed; the result is checked for null below.
        let p = unsafe {
            dpdk_sys::rte_zmalloc_socket(std::ptr::null(), len, 4096, dpdk_sys::SOCKET_ID_ANY)
        };
        if p.is_null() {
            return Err(DpdkError::new(
                "rte_zmalloc_socket",
                format!("{len} octets"),
                ENOMEM,
                "DPDK's heap has no room for the memory region (raise [eal] memory_mb, or \
                 reserve more hugepages)",
            ));
        }
        let eal = self.clone();
        let free: FreeFn = Box::new(move |p, _| {
            // SAFETY: `p` came from rte_zmalloc_socket above and is freed once (the
            // region calls this once, after its last access); EAL is still up, kept
            // alive by `eal`.
            unsafe { dpdk_sys::rte_free(p.cast()) };
            drop(eal);
        });
        // SAFETY: `p` is valid for `len` octets until `free` runs, which only the region
        // calls, after revocation and its last access.
        Ok(unsafe { RegionMemory::from_raw_parts_with_free(p.cast(), len, free) })
    }

    /// Octets allocated from DPDK's heap, all sockets (`rte_malloc_get_socket_stats`).
    pub fn heap_allocated(&self) -> u64 {
        let mut total = 0u64;
        for socket in 0..dpdk_sys::RTE_MAX_NUMA_NODES as i32 {
            // SAFETY: EAL is initialised; the stats struct is plain data written by DPDK
            // (a socket without a heap returns an error and is skipped).
            let mut st: dpdk_sys::rte_malloc_socket_stats = unsafe { std::mem::zeroed() };
            let r = unsafe { dpdk_sys::rte_malloc_get_socket_stats(socket, &mut st) };
            if r == 0 {
                total += st.heap_allocsz_bytes as u64;
            }
        }
        total
    }

    /// Ethernet devices available to open (`rte_eth_dev_count_avail`).
    pub fn port_count(&self) -> u16 {
        // SAFETY: EAL is initialised (self exists); the call only reads ethdev state.
        unsafe { dpdk_sys::rte_eth_dev_count_avail() }
    }
}

impl Eal {
    /// The EAL main lcore (the thread that called [`Eal::init`]).
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: EAL is initialised (self exists); the call reads a value set at init.
        unsafe { dpdk_sys::rte_get_main_lcore() }
    }

    /// Whether `lcore` is one of this process's EAL lcores (`-l`).
    pub fn lcore_enabled(&self, lcore: u32) -> bool {
        // SAFETY: EAL is initialised; the call only reads the lcore table (and checks
        // the bound itself).
        unsafe { dpdk_sys::rte_lcore_is_enabled(lcore) != 0 }
    }

    /// Runs `f` on the EAL worker lcore `lcore` (`rte_eal_remote_launch`): the thread
    /// DPDK created and pinned for it at init, where `rte_lcore_id()` is `lcore` and
    /// mempools use their per-lcore cache. [`Launched::join`] waits for the result
    /// without spinning.
    ///
    /// Errors (`f` is dropped unrun): `lcore` is not an enabled lcore or is the main
    /// lcore (`EINVAL`), or it is already running something (`EBUSY`).
    pub fn launch<F, T>(&self, lcore: u32, f: F) -> Result<Launched<T>, DpdkError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let target = format!("lcore {lcore}");
        if !self.lcore_enabled(lcore) {
            return Err(DpdkError::new(
                "rte_eal_remote_launch",
                target,
                EINVAL,
                "not an EAL lcore of this process (add it to -l / [eal] lcores)",
            ));
        }
        if lcore == self.main_lcore() {
            return Err(DpdkError::new(
                "rte_eal_remote_launch",
                target,
                EINVAL,
                "the main lcore cannot be launched on (it is the calling thread)",
            ));
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r.map_err(|_| ()));
        });
        let arg = Box::into_raw(Box::new(job));
        // SAFETY: `trampoline` matches lcore_function_t and takes ownership of `arg` (a
        // leaked Box<Job>) exactly once when it runs. The job is Send, so running it on
        // the worker thread is sound; it cannot unwind into C (catch_unwind above).
        let ret = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg.cast(), lcore) };
        if ret < 0 {
            // SAFETY: DPDK refused, so the trampoline will never run: `arg` is still
            // ours, from Box::into_raw above, and freed once here.
            drop(unsafe { Box::from_raw(arg) });
            return Err(DpdkError::from_ret("rte_eal_remote_launch", target, ret));
        }
        Ok(Launched {
            lcore,
            rx,
            _eal: self.clone(),
        })
    }
}

type Job = Box<dyn FnOnce() + Send>;

extern "C" fn trampoline(arg: *mut std::ffi::c_void) -> std::ffi::c_int {
    // SAFETY: `arg` is the Box<Job> leaked by Eal::launch for this one launch; DPDK calls
    // the function once, so ownership is taken back exactly once.
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    // The job catches panics of the user's function itself; its channel send cannot
    // panic.
    job();
    0
}

/// A function running on an EAL worker lcore ([`Eal::launch`]).
#[derive(Debug)]
pub struct Launched<T> {
    lcore: u32,
    rx: std::sync::mpsc::Receiver<Result<T, ()>>,
    _eal: Eal,
}

impl<T> Launched<T> {
    /// The lcore it runs on.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// Waits (blocking, not spinning) for the function to return and gives its result;
    /// `Err` if it panicked (the panic message was printed on the worker).
    pub fn join(self) -> Result<T, DpdkError> {
        let r = self.rx.recv();
        // SAFETY: EAL is initialised (self holds it); the function has returned (or its
        // job was dropped), so this only waits for the worker's state to go back to WAIT,
        // a few instructions away.
        unsafe {
            dpdk_sys::rte_eal_wait_lcore(self.lcore);
        }
        match r {
            Ok(Ok(v)) => Ok(v),
            _ => Err(DpdkError::new(
                "rte_eal_remote_launch",
                format!("lcore {}", self.lcore),
                EINVAL,
                "the launched function panicked",
            )),
        }
    }
}

impl Drop for EalInner {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone: every DpdkPort (which holds an Arc of this)
        // has stopped and closed its device and freed its mempool, so no object made by
        // this crate is alive. EAL was initialised (this value exists only then).
        unsafe {
            dpdk_sys::rte_eal_cleanup();
        }
        if let Some(dir) = &self.runtime_dir {
            // Only succeeds when empty (what --no-shconf leaves behind).
            let _ = std::fs::remove_dir(dir);
        }
    }
}
