//! Value types written as strings in the file: IPv4 prefixes, Ethernet addresses,
//! durations and hex octet strings. Each parses with `FromStr` and deserializes from the
//! same text, so a bad value is reported at its own position in the file.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// An IPv4 address with a prefix length: `"10.77.0.3/24"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Prefix {
    /// The address (of the host, not masked).
    pub addr: Ipv4Addr,
    /// The prefix length, 0..=32.
    pub len: u8,
}

impl Ipv4Prefix {
    /// The netmask, e.g. 255.255.255.0 for /24.
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.mask())
    }

    fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    /// The broadcast address (host bits set).
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }

    /// Whether `addr` is inside this prefix.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask() == u32::from(self.addr) & self.mask()
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid IPv4 prefix {s:?}: {why}");
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| bad("expected ADDRESS/LENGTH, e.g. \"10.77.0.3/24\""))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| bad("the address is not a dotted-quad IPv4 address"))?;
        if len.is_empty() || len.len() > 2 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the prefix length is not a number"));
        }
        let len: u8 = len
            .parse()
            .map_err(|_| bad("the prefix length is not a number"))?;
        if len > 32 {
            return Err(bad("prefix length must be at most 32"));
        }
        Ok(Ipv4Prefix { addr, len })
    }
}

impl<'de> Deserialize<'de> for Ipv4Prefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<Ipv4Prefix>::new(
            "an IPv4 prefix such as \"10.77.0.3/24\"",
        ))
    }
}

/// An Ethernet (MAC) address: `"02:00:00:00:00:01"` (`-` also accepted as separator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Whether the group (multicast/broadcast) bit is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid MAC address {s:?}: expected six hex octets such as \"02:00:00:00:00:01\""
            )
        };
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for octet in out.iter_mut() {
            let part = parts.next().ok_or_else(bad)?;
            if part.len() != 2 {
                return Err(bad());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<MacAddr>::new(
            "a MAC address such as \"02:00:00:00:00:01\"",
        ))
    }
}

/// A duration: a string with a unit (`"500ms"`, `"10s"`, `"2m"`, `"250us"`) or an
/// integer number of milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Millis(pub Duration);

impl Millis {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<Millis> for Duration {
    fn from(m: Millis) -> Duration {
        m.0
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.as_micros();
        if us.is_multiple_of(1_000_000) {
            write!(f, "{}s", us / 1_000_000)
        } else if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{us}us")
        }
    }
}

impl FromStr for Millis {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid duration {s:?}: expected a whole number with a unit (us, ms, s, m), \
                 e.g. \"500ms\" or \"10s\", or an integer number of milliseconds"
            )
        };
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (num, unit) = s.split_at(digits);
        if num.is_empty() {
            return Err(bad());
        }
        let n: u64 = num.parse().map_err(|_| bad())?;
        let d = match unit {
            "us" => Some(Duration::from_micros(n)),
            "ms" => Duration::from_millis(n).checked_mul(1),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            _ => return Err(bad()),
        };
        d.map(Millis).ok_or_else(bad)
    }
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"500ms\" or \"10s\", or integer milliseconds")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                u64::try_from(v)
                    .map(|ms| Millis(Duration::from_millis(ms)))
                    .map_err(|_| E::custom(format!("invalid duration {v}: must not be negative")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Millis, E> {
                Ok(Millis(Duration::from_millis(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Octets written as a hex string: `"c0ffee"`, `"c0 ff ee"` or `"c0:ff:ee"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HexBytes(pub Vec<u8>);

impl FromStr for HexBytes {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let digits: Vec<u8> = s
            .bytes()
            .filter(|b| !b.is_ascii_whitespace() && *b != b':')
            .collect();
        if let Some(bad) = digits.iter().find(|b| !b.is_ascii_hexdigit()) {
            return Err(format!(
                "invalid hex string {s:?}: {:?} is not a hex digit",
                char::from(*bad)
            ));
        }
        if !digits.len().is_multiple_of(2) {
            return Err(format!(
                "invalid hex string {s:?}: odd number of hex digits"
            ));
        }
        let nibble = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        Ok(HexBytes(
            digits
                .chunks(2)
                .map(|p| nibble(p[0]) << 4 | nibble(p[1]))
                .collect(),
        ))
    }
}

impl<'de> Deserialize<'de> for HexBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<HexBytes>::new(
            "a hex string such as \"c0ffee\"",
        ))
    }
}

struct FromStrVisitor<T> {
    expecting: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> FromStrVisitor<T> {
    fn new(expecting: &'static str) -> Self {
        FromStrVisitor {
            expecting,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: FromStr<Err = String>> Visitor<'_> for FromStrVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix() {
        let p: Ipv4Prefix = "10.77.0.3/24".parse().unwrap();
        assert_eq!(p.network(), Ipv4Addr::new(10, 77, 0, 0));
        assert_eq!(p.broadcast(), Ipv4Addr::new(10, 77, 0, 255));
        assert_eq!(p.netmask(), Ipv4Addr::new(255, 255, 255, 0));
        assert!(p.contains(Ipv4Addr::new(10, 77, 0, 200)));
        assert!(!p.contains(Ipv4Addr::new(10, 77, 1, 1)));
        let all: Ipv4Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(
            "10.0.0.1/33".parse::<Ipv4Prefix>().unwrap_err(),
            "invalid IPv4 prefix \"10.0.0.1/33\": prefix length must be at most 32"
        );
        for bad in ["10.0.0.1", "10.0.0/8", "10.0.0.1/", "10.0.0.1/+8", "x/8"] {
            assert!(bad.parse::<Ipv4Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn mac() {
        let m: MacAddr = "02:00:0a:4D:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0x4d, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:4d:00:01");
        assert!("01-00-5e-00-00-01"
            .parse::<MacAddr>()
            .unwrap()
            .is_multicast());
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "2:0:0:0:0:1",
            "zz:00:00:00:00:01",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        let d = |s: &str| s.parse::<Millis>().map(Millis::get);
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(d("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(d("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "10", "s", "1.5s", "-1s", "10 s", "10h"] {
            assert!(d(bad).is_err(), "{bad}");
        }
        assert_eq!(Millis(Duration::from_millis(1500)).to_string(), "1500ms");
        assert_eq!(Millis(Duration::from_secs(3)).to_string(), "3s");
    }

    #[test]
    fn hex() {
        assert_eq!(
            "c0 ff:EE".parse::<HexBytes>().unwrap().0,
            vec![0xc0, 0xff, 0xee]
        );
        assert_eq!("".parse::<HexBytes>().unwrap().0, Vec::<u8>::new());
        assert!("abc".parse::<HexBytes>().is_err());
        assert!("zz".parse::<HexBytes>().is_err());
    }
}
