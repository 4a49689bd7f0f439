//! The wire formats: iWARP's (MPA, DDP, RDMAP) and the TCP/IP segment they ride in.
//!
//! Codecs over octets only: no connection state, no timers, no I/O. Everything above
//! (the protocol machines of `proto`, the I/O of `dataplane`) speaks through these types.
//!
//! * [`crc`]: CRC32c (Castagnoli) as MPA uses it, SIMD-accelerated.
//! * [`mpa`]: MPA (RFC 5044): the startup frames with the RFC 6581 enhanced word
//!   ([`mpa::startup_frame`]), FPDU layout, markers and MULPDU with the transmit
//!   [`mpa::fpdu::Framer`], the streaming receive [`mpa::deframe::Deframer`], the MPA
//!   error codes.
//! * [`ddp`]: DDP (RFC 5041): tagged and untagged segment headers, DDP errors.
//! * [`rdmap`]: RDMAP (RFC 5040): opcodes, the RDMA Read Request header, Terminate, the
//!   Terminate error triplet of every layer ([`rdmap::TermError`]), and the whole
//!   ULPDUs connection setup needs (the RFC 6581 RTR messages).
//! * [`rss`]: receive-side scaling: the Toeplitz hash and indirection table NICs steer
//!   flows to queues with.
//! * [`tcp`]: the TCP segment in IPv4: 4-tuple, serialization, parsing, checksums.
#![forbid(unsafe_code)]

/// A table of codes an RFC assigns (error codes, opcodes): the enum (`repr(u8)`, one
/// variant per code) with `ALL` (every code, in table order), `code()`, `from_code()`
/// (`None` for a code the RFC leaves undefined) and the RFC's name of each code through
/// the method named after `=>`. Every code table of this crate is declared with it.
macro_rules! code_table {
    (
        $(#[$meta:meta])*
        pub enum $name:ident => $text:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $code:literal => $desc:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $( $(#[doc = $doc])* $variant = $code, )+
        }

        impl $name {
            /// Every code, in table order.
            pub const ALL: [$name; [$($code),+].len()] = [$($name::$variant),+];

            /// The code as carried on the wire.
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The value of a code from the wire; `None` for a code the RFC does not
            /// define.
            pub const fn from_code(code: u8) -> Option<Self> {
                match code {
                    $( $code => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// The name of the code.
            pub const fn $text(self) -> &'static str {
                match self {
                    $( $name::$variant => $desc, )+
                }
            }
        }
    };
}

pub mod crc;
pub mod ddp;
pub mod mpa;
pub mod rdmap;
pub mod rss;
pub mod tcp;

/// Hex text (white space ignored) to octets, for this crate's unit tests.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
