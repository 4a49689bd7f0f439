//! [`DpdkError`]: a failed DPDK call, with its error number and text.

use std::fmt;

/// `EINVAL` on Linux.
pub(crate) const EINVAL: i32 = 22;
/// `EBUSY` on Linux.
pub(crate) const EBUSY: i32 = 16;
/// `ENODEV` on Linux.
pub(crate) const ENODEV: i32 = 19;
/// `EALREADY` on Linux.
pub(crate) const EALREADY: i32 = 114;
/// `ENOMEM` (Linux value).
pub(crate) const ENOMEM: i32 = 12;

/// A DPDK call (or a check made before one) that failed.
///
/// Displays as `rte_eth_dev_configure(net_af_packet0): Invalid argument (errno 22)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function that failed (`"rte_eth_dev_configure"`), or the step that
    /// rejected the input before calling DPDK (`"PortConfig::validate"`).
    pub call: &'static str,
    /// What the call was applied to (the device name, a pool name); may be empty.
    pub target: String,
    /// The positive error number: `rte_errno` after the call, or the negated return code.
    pub code: i32,
    /// The error text: `rte_strerror(code)`, or an explanation for checks of our own.
    pub message: String,
}

impl DpdkError {
    /// An error with all its parts given.
    pub fn new(
        call: &'static str,
        target: impl Into<String>,
        code: i32,
        message: impl Into<String>,
    ) -> Self {
        DpdkError {
            call,
            target: target.into(),
            code,
            message: message.into(),
        }
    }

    /// `call` failed and left its reason in `rte_errno`.
    pub(crate) fn from_errno(call: &'static str, target: impl Into<String>) -> Self {
        let code = dpdk_sys::rte_errno();
        Self::from_code(call, target, code)
    }

    /// `call` returned `ret` (a negative errno value).
    pub(crate) fn from_ret(call: &'static str, target: impl Into<String>, ret: i32) -> Self {
        Self::from_code(call, target, ret.saturating_neg())
    }

    fn from_code(call: &'static str, target: impl Into<String>, code: i32) -> Self {
        DpdkError {
            call,
            target: target.into(),
            code,
            message: dpdk_sys::strerror(code),
        }
    }

    /// An invalid argument found before calling DPDK.
    pub(crate) fn invalid(
        call: &'static str,
        target: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(call, target, EINVAL, message)
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.target.is_empty() {
            write!(f, "{}: {} (errno {})", self.call, self.message, self.code)
        } else {
            write!(
                f,
                "{}({}): {} (errno {})",
                self.call, self.target, self.message, self.code
            )
        }
    }
}

impl std::error::Error for DpdkError {}

/// Maps a DPDK return code (`>= 0` success, negative errno failure) to a result.
pub(crate) fn check(call: &'static str, target: &str, ret: i32) -> Result<i32, DpdkError> {
    if ret < 0 {
        Err(DpdkError::from_ret(call, target, ret))
    } else {
        Ok(ret)
    }
}
