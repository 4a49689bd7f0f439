//! The resource model: every resource a peer (or a consumer) can make a core or the
//! control thread hold has a cap, and every wait a timeout, here, with safe defaults.
//!
//! | resource | limit | beyond it |
//! |---|---|---|
//! | TCP connections of one core (handshake to close) | [`Limits::max_connections`] | SYN answered with a RST, active open refused |
//! | SYN-RECEIVED connections of one listener | [`Limits::syn_backlog`] | SYN cookies (RFC 4987 3.6): no state kept |
//! | time from SYN (or connect) to FPDU mode | [`Limits::startup_timeout`] | RST; the startup fails |
//! | octets handed to the MPA startup before FPDU mode | [`Limits::startup_octets`] | RST; the startup fails |
//! | time data may wait for an acknowledgment | [`Limits::user_timeout`] | RST; the QP flushes |
//! | time a graceful close may take | [`Limits::linger`] | RST |
//! | TIME-WAIT tuples of one core | [`Limits::time_wait`] | the oldest is forgotten |
//! | control messages queued each way (core, control thread, consumers) | [`Limits::control_queue`] (and 4 times that waiting in the core) | new connections refused; consumer requests answered "busy" |
//! | connection requests waiting for the consumer's accept | [`Limits::listener_queue`] | MPA Reject with "listener queue full" |
//!
//! Why SYN cookies rather than refusing SYNs beyond the backlog: a SYN flood fills any
//! backlog, and refusing would then turn away every good client for as long as the flood
//! lasts; a cookie costs no memory, and a client that completes the handshake gets its
//! connection whatever the flood does.

use std::time::Duration;

use wire::mpa::fpdu::{CRC_LEN, MARKER_INTERVAL, MARKER_LEN, ULPDU_LENGTH_LEN};
use wire::mpa::startup_frame::{HEADER_LEN, MAX_PD_LENGTH};

/// The largest FPDU a peer can send: a 65535-octet ULPDU (the largest ULPDU_Length),
/// PAD, CRC, and a marker in every 512 octets.
pub const MAX_FPDU_WIRE_LEN: usize = {
    let fpdu = ULPDU_LENGTH_LEN + 65535 + 3 + CRC_LEN;
    let interval = MARKER_INTERVAL as usize - MARKER_LEN;
    fpdu + (fpdu.div_ceil(interval) + 1) * MARKER_LEN
};

/// The most octets an MPA startup can legitimately consume before FPDU mode: the
/// largest Request or Reply (20-octet header and 512 octets of private data) and one
/// whole FPDU (a client-server Responder completes its startup on the Initiator's first
/// FPDU, RFC 5044 7.1.2 rule 4).
pub const MAX_STARTUP_OCTETS: usize = HEADER_LEN + MAX_PD_LENGTH + MAX_FPDU_WIRE_LEN;

/// Caps and timeouts of one core and its control thread (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most TCP connections a core holds, from SYN-RECEIVED (or SYN-SENT) to CLOSED
    /// (TIME-WAIT tuples are counted apart). Default 16384.
    pub max_connections: usize,
    /// Most SYN-RECEIVED connections per listener; further SYNs get SYN cookies.
    /// Default 1024.
    pub syn_backlog: usize,
    /// Longest MPA startup, from the SYN (passive) or the connect (active) to FPDU mode;
    /// every startup wait of RFC 5044 and RFC 6581 (Request, Reply, RTR, first FPDU) ends
    /// within it. Default 20 s.
    pub startup_timeout: Duration,
    /// Most octets received before FPDU mode: a peer that sends more has broken MPA.
    /// Default [`MAX_STARTUP_OCTETS`]; lower values refuse valid but large first FPDUs.
    pub startup_octets: usize,
    /// TCP USER TIMEOUT (RFC 9293 3.8.3, RFC 5482): how long data or a FIN may wait for an
    /// acknowledgment that makes progress. Default 30 s.
    pub user_timeout: Duration,
    /// Longest graceful close: from our FIN (or the close request) until both FINs are
    /// acknowledged. Default 5 s.
    pub linger: Duration,
    /// Most TIME-WAIT tuples a core remembers. Default 16384.
    pub time_wait: usize,
    /// Capacity of each control channel (core to control thread, control thread to core,
    /// consumers to control thread). Default 4096.
    pub control_queue: usize,
    /// Connection requests per listener waiting for the consumer. Default 128.
    pub listener_queue: usize,
    /// Most QPs the device's connections hold at once (connecting, accepted or
    /// established); beyond, a connect fails "busy" and a connection request is rejected
    /// with the reason. Default 65536.
    pub max_qps: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16384,
            syn_backlog: 1024,
            startup_timeout: Duration::from_secs(20),
            startup_octets: MAX_STARTUP_OCTETS,
            user_timeout: Duration::from_secs(30),
            linger: Duration::from_secs(5),
            time_wait: 16384,
            control_queue: 4096,
            listener_queue: 128,
            max_qps: 65536,
        }
    }
}

/// A limit out of its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    /// The field.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

impl std::fmt::Display for LimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for LimitError {}

impl Limits {
    /// Checks every field is in its range.
    pub fn validate(&self) -> Result<(), LimitError> {
        let count = |field: &'static str, v: usize, lo: usize, hi: usize| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(LimitError {
                    field,
                    message: format!("{v} is outside {lo}..={hi}"),
                })
            }
        };
        let time = |field: &'static str, v: Duration, lo: Duration, hi: Duration| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(LimitError {
                    field,
                    message: format!("{v:?} is outside {lo:?}..={hi:?}"),
                })
            }
        };
        count("max_connections", self.max_connections, 1, 1 << 20)?;
        count("syn_backlog", self.syn_backlog, 1, 1 << 20)?;
        time(
            "startup_timeout",
            self.startup_timeout,
            Duration::from_millis(10),
            Duration::from_secs(600),
        )?;
        count(
            "startup_octets",
            self.startup_octets,
            HEADER_LEN + MAX_PD_LENGTH,
            16 << 20,
        )?;
        time(
            "user_timeout",
            self.user_timeout,
            Duration::from_millis(10),
            Duration::from_secs(3600),
        )?;
        time(
            "linger",
            self.linger,
            Duration::from_millis(1),
            Duration::from_secs(600),
        )?;
        count("time_wait", self.time_wait, 0, 1 << 22)?;
        count("control_queue", self.control_queue, 16, 1 << 20)?;
        count("listener_queue", self.listener_queue, 1, 1 << 16)?;
        count("max_qps", self.max_qps, 1, 1 << 20)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_fit_the_largest_startup() {
        Limits::default().validate().unwrap();
        const { assert!(MAX_STARTUP_OCTETS > 532 + 65535) };
        const { assert!(MAX_STARTUP_OCTETS < 532 + 65535 + 1024) };
    }

    #[test]
    fn out_of_range_names_the_field() {
        let l = Limits {
            syn_backlog: 0,
            ..Limits::default()
        };
        assert_eq!(l.validate().unwrap_err().field, "syn_backlog");
        let l = Limits {
            startup_octets: 100,
            ..Limits::default()
        };
        let e = l.validate().unwrap_err();
        assert_eq!(e.field, "startup_octets");
        assert!(e.to_string().contains("100 is outside 532"), "{e}");
    }
}
