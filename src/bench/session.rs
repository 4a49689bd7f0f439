//! The session setup of `iwarp bench` between two processes, carried in the MPA startup
//! frames' private data (RFC 5044 7.1: private data is the ULP's), plus the server's
//! result message at the end.
//!
//! * [`Hello`], in the MPA Request: the test, its sizes, length, depth, `--verify`, and
//!   the client's own sink buffer (write-lat answers land there).
//! * [`RemoteBuffer`] ([`encode_buffer`]), in the MPA Reply: the STag and tagged offset of the
//!   server's buffer.
//! * [`ServerResult`], a Send from the server after the last size: the octets it checked
//!   and how many were wrong, so a client sees a verification failure of the far end.
//! * During a run, Sends of fixed lengths: the server's *ready* for each size (0 octets),
//!   its credit grants ([`CREDIT_LEN`], the count as a `u64`), the client's *done* at the
//!   end of each size ([`DONE_LEN`], the number of messages it sent, for tests where the
//!   server cannot count them itself; 0 octets otherwise).
//!
//! All integers are big-endian (network order). Every message starts with an 8-octet
//! magic whose last octet is the protocol version (2: write-bw `--verify` returns each
//! slot to the client once checked; reads come from moving offsets; 3: the `--verify`
//! contents are made eight octets at a time, so neither end may be older).

use std::time::Duration;

use super::{Length, Test};

/// Magic and version of the Request's private data.
pub const HELLO_MAGIC: [u8; 8] = *b"iwbench\x03";
/// Magic and version of the Reply's private data.
pub const BUFFER_MAGIC: [u8; 8] = *b"iwbuffr\x03";
/// Magic and version of the result Send.
pub const RESULT_MAGIC: [u8; 8] = *b"iwreslt\x03";
/// Length of [`ServerResult`] on the wire.
pub const RESULT_LEN: usize = 24;
/// Longest reason a server puts in an MPA Reject's private data (512 octets less the
/// RFC 6581 enhanced word).
pub const MAX_REJECT_REASON: usize = 508;
/// Length of a credit grant (a `u64` count).
pub const CREDIT_LEN: usize = 8;
/// Length of a *done* that carries a count (a `u64`).
pub const DONE_LEN: usize = 8;

/// A count as a credit grant or *done* carries it.
pub fn encode_count(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// The count of a credit grant or *done*.
pub fn decode_count(b: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(b.try_into().ok()?))
}
/// Fixed part of a [`Hello`].
const HELLO_FIXED: usize = 44;
/// Most sizes a [`Hello`] carries: its private data must fit in 508 octets (512 less the
/// RFC 6581 enhanced word).
pub const MAX_SIZES: usize = (508 - HELLO_FIXED) / 4;

/// A buffer in the peer's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuffer {
    /// Its STag.
    pub stag: u32,
    /// Tagged offset of its first octet.
    pub to: u64,
}

/// What the client asks for (MPA Request private data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The test.
    pub test: Test,
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Iterations or duration per size.
    pub length: Length,
    /// Messages in flight.
    pub tx_depth: usize,
    /// The server checks what it receives.
    pub verify: bool,
    /// The client's sink (write-lat), else `None`.
    pub client_sink: Option<RemoteBuffer>,
}

/// Why private data is not a bench message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn test_code(t: Test) -> u8 {
    match t {
        Test::WriteBw => 0,
        Test::WriteLat => 1,
        Test::ReadBw => 2,
        Test::ReadLat => 3,
        Test::SendBw => 4,
        Test::SendLat => 5,
    }
}

fn test_from(c: u8) -> Option<Test> {
    Some(match c {
        0 => Test::WriteBw,
        1 => Test::WriteLat,
        2 => Test::ReadBw,
        3 => Test::ReadLat,
        4 => Test::SendBw,
        5 => Test::SendLat,
        _ => return None,
    })
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 octets"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 octets"))
}

impl Hello {
    /// The private data. Errors if there are more than [`MAX_SIZES`] sizes or a size does
    /// not fit in 32 bits.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        if self.sizes.is_empty() || self.sizes.len() > MAX_SIZES {
            return Err(ProtoError(format!(
                "{} message sizes: 1..={MAX_SIZES} fit in the MPA Request",
                self.sizes.len()
            )));
        }
        let mut b = Vec::with_capacity(HELLO_FIXED + 4 * self.sizes.len());
        b.extend_from_slice(&HELLO_MAGIC);
        b.push(test_code(self.test));
        b.push(u8::from(self.verify));
        b.extend_from_slice(&(self.sizes.len() as u16).to_be_bytes());
        let depth = u32::try_from(self.tx_depth)
            .map_err(|_| ProtoError(format!("tx depth {} too large", self.tx_depth)))?;
        b.extend_from_slice(&depth.to_be_bytes());
        let (iters, ms) = match self.length {
            Length::Iterations(n) => (n, 0),
            Length::Duration(d) => (0, d.as_millis().max(1) as u64),
        };
        b.extend_from_slice(&iters.to_be_bytes());
        b.extend_from_slice(&ms.to_be_bytes());
        let sink = self.client_sink.unwrap_or(RemoteBuffer { stag: 0, to: 0 });
        b.extend_from_slice(&sink.stag.to_be_bytes());
        b.extend_from_slice(&sink.to.to_be_bytes());
        for &s in &self.sizes {
            let s = u32::try_from(s)
                .map_err(|_| ProtoError(format!("message size {s} does not fit in 32 bits")))?;
            b.extend_from_slice(&s.to_be_bytes());
        }
        Ok(b)
    }

    /// Parses the private data of a Request; every field is checked.
    pub fn decode(b: &[u8]) -> Result<Hello, ProtoError> {
        if b.len() >= 8 && b[..7] == HELLO_MAGIC[..7] && b[7] != HELLO_MAGIC[7] {
            return Err(ProtoError(format!(
                "`iwarp bench` protocol version {} (this server speaks {}): use the same \
                 iwarp on both ends",
                b[7], HELLO_MAGIC[7]
            )));
        }
        if b.len() < HELLO_FIXED || b[..8] != HELLO_MAGIC {
            return Err(ProtoError(
                "the MPA Request's private data is not an `iwarp bench` hello".into(),
            ));
        }
        let test = test_from(b[8]).ok_or_else(|| ProtoError(format!("unknown test {}", b[8])))?;
        if b[9] > 1 {
            return Err(ProtoError(format!("unknown flags {:#04x}", b[9])));
        }
        let n = usize::from(u16::from_be_bytes([b[10], b[11]]));
        if n == 0 || n > MAX_SIZES || b.len() != HELLO_FIXED + 4 * n {
            return Err(ProtoError(format!(
                "hello of {} octets does not hold {n} sizes",
                b.len()
            )));
        }
        let tx_depth = be32(b, 12) as usize;
        if tx_depth == 0 || tx_depth > 65536 {
            return Err(ProtoError(format!("tx depth {tx_depth} not in 1..=65536")));
        }
        let length = match (be64(b, 16), be64(b, 24)) {
            (0, 0) => return Err(ProtoError("no iterations and no duration".into())),
            (0, ms) => Length::Duration(Duration::from_millis(ms)),
            (n, 0) => Length::Iterations(n),
            _ => return Err(ProtoError("both iterations and a duration".into())),
        };
        let stag = be32(b, 32);
        let client_sink = (stag != 0).then(|| RemoteBuffer {
            stag,
            to: be64(b, 36),
        });
        let sizes: Vec<usize> = (0..n)
            .map(|i| be32(b, HELLO_FIXED + 4 * i) as usize)
            .collect();
        if let Some(s) = sizes.iter().find(|&&s| s > super::MAX_SIZE) {
            return Err(ProtoError(format!(
                "message size {s} above {}",
                super::MAX_SIZE
            )));
        }
        if test.is_send() {
            if let Some(s) = sizes.iter().find(|&&s| s == 0) {
                return Err(ProtoError(format!(
                    "{} needs sizes of at least 1 (got {s}): zero-length Sends are its control",
                    test.name()
                )));
            }
        }
        if test == Test::WriteLat && client_sink.is_none() {
            return Err(ProtoError("write-lat without the client's buffer".into()));
        }
        Ok(Hello {
            test,
            sizes,
            length,
            tx_depth,
            verify: b[9] == 1,
            client_sink,
        })
    }
}

/// The server's buffer (MPA Reply private data).
pub fn encode_buffer(r: RemoteBuffer) -> Vec<u8> {
    let mut b = BUFFER_MAGIC.to_vec();
    b.extend_from_slice(&r.stag.to_be_bytes());
    b.extend_from_slice(&r.to.to_be_bytes());
    b
}

/// Parses the Reply's private data.
pub fn decode_buffer(b: &[u8]) -> Result<RemoteBuffer, ProtoError> {
    if b.len() != 20 || b[..8] != BUFFER_MAGIC {
        return Err(ProtoError(
            "the MPA Reply's private data is not an `iwarp bench` server (is the peer `iwarp serve`?)"
                .into(),
        ));
    }
    Ok(RemoteBuffer {
        stag: be32(b, 8),
        to: be64(b, 12),
    })
}

/// What the server checked (`--verify`), sent after the last size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerResult {
    /// Octets found wrong.
    pub errors: u64,
    /// Octets checked.
    pub verified: u64,
}

impl ServerResult {
    /// The Send's payload ([`RESULT_LEN`] octets).
    pub fn encode(&self) -> [u8; RESULT_LEN] {
        let mut b = [0; RESULT_LEN];
        b[..8].copy_from_slice(&RESULT_MAGIC);
        b[8..16].copy_from_slice(&self.errors.to_be_bytes());
        b[16..].copy_from_slice(&self.verified.to_be_bytes());
        b
    }

    /// Parses a received result; `None` if `b` is not one.
    pub fn decode(b: &[u8]) -> Option<ServerResult> {
        (b.len() == RESULT_LEN && b[..8] == RESULT_MAGIC).then(|| ServerResult {
            errors: be64(b, 8),
            verified: be64(b, 16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            test: Test::WriteLat,
            sizes: super::super::all_sizes(),
            length: Length::Iterations(1000),
            tx_depth: 128,
            verify: true,
            client_sink: Some(RemoteBuffer {
                stag: 0x1234_5678,
                to: 0xdead_beef_0000,
            }),
        }
    }

    #[test]
    fn hello_round_trips_and_fits_the_request() {
        let h = hello();
        let b = h.encode().unwrap();
        assert!(b.len() <= 508);
        assert_eq!(Hello::decode(&b).unwrap(), h);
        let d = Hello {
            length: Length::Duration(Duration::from_millis(1500)),
            test: Test::SendBw,
            client_sink: None,
            ..h
        };
        assert_eq!(Hello::decode(&d.encode().unwrap()).unwrap(), d);
    }

    #[test]
    fn bad_hellos_are_refused_with_a_reason() {
        let good = hello().encode().unwrap();
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (b"hello".to_vec(), "not an `iwarp bench` hello"),
            (good[..good.len() - 1].to_vec(), "does not hold"),
        ];
        let mut t = good.clone();
        t[8] = 9;
        cases.push((t, "unknown test"));
        let mut t = good.clone();
        t[12..16].copy_from_slice(&0u32.to_be_bytes());
        cases.push((t, "tx depth 0"));
        let mut t = good.clone();
        t[16..24].copy_from_slice(&0u64.to_be_bytes());
        cases.push((t, "no iterations"));
        let mut t = good.clone();
        t[32..36].copy_from_slice(&0u32.to_be_bytes());
        cases.push((t, "write-lat without"));
        let mut t = good.clone();
        let n = t.len();
        t[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
        cases.push((t, "message size"));
        for (b, want) in cases {
            let e = Hello::decode(&b).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        let too_many = Hello {
            sizes: vec![1; MAX_SIZES + 1],
            ..hello()
        };
        assert!(too_many.encode().is_err());
    }

    #[test]
    fn buffer_and_result_round_trip() {
        let r = RemoteBuffer {
            stag: 7,
            to: 1 << 40,
        };
        assert_eq!(decode_buffer(&encode_buffer(r)).unwrap(), r);
        assert!(decode_buffer(b"iwarp").is_err());
        let s = ServerResult {
            errors: 3,
            verified: 1 << 33,
        };
        assert_eq!(ServerResult::decode(&s.encode()), Some(s));
        assert_eq!(ServerResult::decode(&[0; 8]), None);
    }

    proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Hello::decode(&b);
            let _ = decode_buffer(&b);
            let _ = ServerResult::decode(&b);
        }

        #[test]
        fn hello_with_magic_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = HELLO_MAGIC.to_vec();
            b.extend(tail);
            let _ = Hello::decode(&b);
        }
    }
}
