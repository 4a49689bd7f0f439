//! TCP segments on the wire: the 4-tuple, serialization with the IPv4 pseudo-header
//! checksum (or its pseudo-header part, for a device that completes it), parsing with
//! every check, and the checksum arithmetic itself ([`checksum`]). The engine that runs
//! the protocol is elsewhere (`proto::tcp`); this is what it sends and receives.

pub mod checksum;
pub mod headers;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber,
};

/// The 4-tuple that names a connection (RFC 9293 section 3.3.1 "socket pair").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    /// Our IPv4 address.
    pub local_addr: Ipv4Address,
    /// Our port.
    pub local_port: u16,
    /// The peer's IPv4 address.
    pub remote_addr: Ipv4Address,
    /// The peer's port.
    pub remote_port: u16,
}

impl FourTuple {
    /// The same pair seen from the other end.
    pub fn reversed(&self) -> FourTuple {
        FourTuple {
            local_addr: self.remote_addr,
            local_port: self.remote_port,
            remote_addr: self.local_addr,
            remote_port: self.local_port,
        }
    }
}

/// A segment from `src_port` to `dst_port` with the given control and sequence number and
/// nothing else: no ACK, zero window, no options, no payload. Callers fill in the rest.
pub fn bare_repr(
    src_port: u16,
    dst_port: u16,
    control: TcpControl,
    seq_number: TcpSeqNumber,
) -> TcpRepr<'static> {
    TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number,
        ack_number: None,
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    }
}

/// Serializes `repr` (header, options, `repr.payload`) as a TCP segment from
/// `tuple.local_*` to `tuple.remote_*`, checksum included, appending it to `out`.
pub fn segment_to_bytes(tuple: &FourTuple, repr: &TcpRepr, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + repr.buffer_len(), 0);
    emit_segment(tuple.local_addr, tuple.remote_addr, repr, &mut out[start..]);
}

/// Writes `repr` as a TCP segment from `src` to `dst` into `buf` (exactly
/// `repr.buffer_len()` octets), checksum included.
pub fn emit_segment(src: Ipv4Address, dst: Ipv4Address, repr: &TcpRepr, buf: &mut [u8]) {
    emit_without_checksum(src, dst, repr, buf);
    checksum::fill_tcp(src, dst, buf);
}

/// Writes `repr` into `buf`, leaving the checksum field to the caller.
fn emit_without_checksum(src: Ipv4Address, dst: Ipv4Address, repr: &TcpRepr, buf: &mut [u8]) {
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut *buf),
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &ChecksumCapabilities::ignored(),
    );
}

/// Like [`emit_segment`], but with the pseudo-header sum in the checksum field instead of
/// the checksum, for a device with TCP checksum offload to complete.
pub fn emit_segment_offload(src: Ipv4Address, dst: Ipv4Address, repr: &TcpRepr, buf: &mut [u8]) {
    emit_without_checksum(src, dst, repr, buf);
    checksum::fill_tcp_pseudo_header(src, dst, buf);
}

/// Writes the TCP header (options included) of `repr` from `src` to `dst` into `buf`
/// (exactly `repr.header_len()` octets) for a segment whose payload, `payload`, the port
/// sends from another buffer. With `offload` the checksum field holds the pseudo-header
/// sum for the device to complete (as [`emit_segment_offload`]); otherwise the checksum
/// over header and payload.
pub fn emit_segment_header(
    src: Ipv4Address,
    dst: Ipv4Address,
    repr: &TcpRepr,
    payload: &[u8],
    offload: bool,
    buf: &mut [u8],
) {
    emit_segment_header_with_sum(src, dst, repr, payload, None, offload, buf);
}

/// [`emit_segment_header`] for a payload whose one's complement sum (as
/// [`checksum::data`] gives it) may be known, `payload_sum`: then the payload is not read.
pub fn emit_segment_header_with_sum(
    src: Ipv4Address,
    dst: Ipv4Address,
    repr: &TcpRepr,
    payload: &[u8],
    payload_sum: Option<u16>,
    offload: bool,
    buf: &mut [u8],
) {
    if !offload {
        let sum = payload_sum.unwrap_or_else(|| checksum::data(payload));
        if headers::emit_tcp_header(src, dst, repr, payload.len(), sum, buf) {
            return;
        }
    }
    let header = TcpRepr {
        payload: &[],
        ..*repr
    };
    emit_without_checksum(src, dst, &header, buf);
    if offload {
        checksum::fill_tcp_pseudo_header_len(src, dst, buf, buf.len() + payload.len());
    } else if let Some(sum) = payload_sum {
        checksum::fill_tcp_parts_with_sum(src, dst, buf, payload.len(), sum);
    } else {
        checksum::fill_tcp_parts(src, dst, buf, payload);
    }
}

pub use checksum::{complete_tcp_offload, verify_tcp};

/// Parses a TCP segment sent from `src` to `dst`, checking its length, options and
/// checksum. `None` for anything malformed (never panics).
pub fn segment_from_bytes<'a>(
    src: Ipv4Address,
    dst: Ipv4Address,
    bytes: &'a [u8],
) -> Option<TcpRepr<'a>> {
    segment_from_bytes_with(src, dst, bytes, true)
}

/// [`segment_from_bytes`] that skips the checksum when `check_checksum` is false (the
/// device already found it right).
pub fn segment_from_bytes_with<'a>(
    src: Ipv4Address,
    dst: Ipv4Address,
    bytes: &'a [u8],
    check_checksum: bool,
) -> Option<TcpRepr<'a>> {
    if let Some(r) = headers::parse_tcp_common(bytes) {
        if check_checksum && !checksum::verify_tcp(src, dst, bytes) {
            return None;
        }
        return r.ok();
    }
    let packet = TcpPacket::new_checked(bytes).ok()?;
    if check_checksum && !checksum::verify_tcp(src, dst, bytes) {
        return None;
    }
    TcpRepr::parse(
        &packet,
        &IpAddress::Ipv4(src),
        &IpAddress::Ipv4(dst),
        &ChecksumCapabilities::ignored(),
    )
    .ok()
}

/// Serializes `repr` as an IPv4 datagram (20-octet header, DF set, TTL `hop_limit`, both
/// checksums) from `tuple.local_addr` to `tuple.remote_addr`, appending it to `out`.
pub fn ipv4_segment_to_bytes(tuple: &FourTuple, repr: &TcpRepr, hop_limit: u8, out: &mut Vec<u8>) {
    let ip = Ipv4Repr {
        src_addr: tuple.local_addr,
        dst_addr: tuple.remote_addr,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit,
    };
    let start = out.len();
    out.resize(start + ip.buffer_len(), 0);
    let mut packet = Ipv4Packet::new_unchecked(&mut out[start..]);
    ip.emit(&mut packet, &ChecksumCapabilities::default());
    segment_to_bytes(tuple, repr, out);
}

/// Parses an IPv4 datagram carrying a TCP segment: `(source, destination, segment)`.
/// Fragments, options-bearing headers that do not fit, other protocols and bad checksums
/// give `None` (never a panic).
pub fn ipv4_segment_from_bytes(bytes: &[u8]) -> Option<(Ipv4Address, Ipv4Address, TcpRepr<'_>)> {
    let packet = Ipv4Packet::new_checked(bytes).ok()?;
    let ip = Ipv4Repr::parse(&packet, &ChecksumCapabilities::default()).ok()?;
    if ip.next_header != IpProtocol::Tcp {
        return None;
    }
    let tcp = segment_from_bytes(ip.src_addr, ip.dst_addr, packet.payload())?;
    Some((ip.src_addr, ip.dst_addr, tcp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::TcpTimestampRepr;

    const ADDR_A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const ADDR_B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    #[test]
    fn ipv4_round_trip() {
        let tuple = FourTuple {
            local_addr: ADDR_A,
            local_port: 40000,
            remote_addr: ADDR_B,
            remote_port: 4791,
        };
        let mut r = bare_repr(40000, 4791, TcpControl::None, TcpSeqNumber(42));
        r.window_len = 1000;
        r.ack_number = Some(TcpSeqNumber(7));
        r.timestamp = Some(TcpTimestampRepr::new(1, 2));
        r.payload = b"payload";
        let mut bytes = Vec::new();
        ipv4_segment_to_bytes(&tuple, &r, 64, &mut bytes);
        assert_eq!(bytes.len(), 20 + 32 + 7);
        let (src, dst, back) = ipv4_segment_from_bytes(&bytes).unwrap();
        assert_eq!((src, dst), (ADDR_A, ADDR_B));
        assert_eq!(back, r);
        // Corruption anywhere is caught by a checksum (TTL included: the IPv4 header
        // checksum covers it).
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            if let Some((_, _, t)) = ipv4_segment_from_bytes(&bad) {
                panic!("byte {i} flipped still parsed: {t:?}");
            }
        }
        // Truncation.
        for n in 0..bytes.len() {
            assert!(ipv4_segment_from_bytes(&bytes[..n]).is_none());
        }
        // The short form round-trips too.
        let mut seg = Vec::new();
        segment_to_bytes(&tuple, &r, &mut seg);
        assert_eq!(segment_from_bytes(ADDR_A, ADDR_B, &seg), Some(r));
        // A segment checked against another pseudo-header fails (swapping the two
        // addresses would not: the one's complement sum is commutative).
        let other = Ipv4Address::new(10, 0, 0, 3);
        assert_eq!(segment_from_bytes(ADDR_A, other, &seg), None);
    }
}
