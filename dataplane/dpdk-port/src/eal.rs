//! [`Eal`]: the process's DPDK Environment Abstraction Layer.

use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{DpdkError, EALREADY};

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

    /// Ethernet devices available to open (`rte_eth_dev_count_avail`).
    pub fn port_count(&self) -> u16 {
        // SAFETY: EAL is initialised (self exists); the call only reads ethdev state.
        unsafe { dpdk_sys::rte_eth_dev_count_avail() }
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
