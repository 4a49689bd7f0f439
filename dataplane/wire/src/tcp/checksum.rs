//! The Internet checksum (RFC 1071) of TCP segments over IPv4, eight octets at a time.
//!
//! smoltcp's `checksum::data` adds 16-bit words one by one; this sums 32-bit words into a
//! 64-bit sum in a loop the compiler vectorizes (RFC 1071 section 2: the one's complement
//! sum may be computed on any word size and in either byte order, then folded and
//! byte-swapped), several times faster on full-size segments. The results are
//! bit-identical.

use smoltcp::wire::Ipv4Address;

/// IP protocol number of TCP.
const PROTO_TCP: u64 = 6;

/// One's complement sum of `data` read as little-endian words, not yet folded: 32-bit
/// words widened into eight 64-bit sums (no carry is lost below 2^32 words), a loop the
/// compiler vectorizes.
fn sum_le(data: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (k, a) in acc.iter_mut().enumerate() {
            let i = 4 * k;
            *a += u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
        }
    }
    let mut s: u64 = acc.iter().sum();
    let mut words = blocks.remainder().chunks_exact(4);
    for w in &mut words {
        s += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for w in &mut pairs {
        s += u64::from(u16::from_le_bytes([w[0], w[1]]));
    }
    if let [last] = pairs.remainder() {
        // A trailing octet is the high octet of a big-endian word: the low octet of a
        // little-endian one.
        s += u64::from(*last);
    }
    s
}

/// Folds a 64-bit one's complement sum to 16 bits.
pub(crate) fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The one's complement sum (folded, not complemented) of `data` in network byte order:
/// the same value as smoltcp's `checksum::data`.
pub fn data(data: &[u8]) -> u16 {
    fold(sum_le(data)).swap_bytes()
}

/// The one's complement sum (as [`data`] gives it) of the concatenation of a run of
/// octets whose sum is `a` followed by one whose sum is `b`, the second starting
/// `offset` octets after the first (RFC 1071 section 2: a run at an odd offset adds
/// byte-swapped).
pub fn combine(a: u16, b: u16, offset: usize) -> u16 {
    let b = if offset % 2 == 1 { b.swap_bytes() } else { b };
    fold(u64::from(a) + u64::from(b))
}

/// Whether the IPv4 header `header` (its whole length, options included) has a right
/// checksum: its one's complement sum is all ones (RFC 1071). The same verdict as
/// smoltcp's `Ipv4Packet::verify_checksum`, from this module's sum.
pub fn ipv4_header_ok(header: &[u8]) -> bool {
    if let Ok(h) = <&[u8; 20]>::try_from(header) {
        // The header without options, nearly every one: five words, no loop.
        let w = |i: usize| u64::from(u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
        return fold(w(0) + w(4) + w(8) + w(12) + w(16)) == 0xffff;
    }
    data(header) == 0xffff
}

/// Writes the checksum of the IPv4 header `header` (its whole length) into its field
/// (offset 10).
pub fn fill_ipv4_header(header: &mut [u8]) {
    if header.len() < 20 {
        return;
    }
    header[10] = 0;
    header[11] = 0;
    let c = !data(header);
    header[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The sum of the IPv4 pseudo header of a TCP segment of `len` octets (RFC 9293 3.1).
pub(crate) fn pseudo_header(src: Ipv4Address, dst: Ipv4Address, len: usize) -> u64 {
    let be = |a: Ipv4Address| {
        let o = a.octets();
        u64::from(u16::from_be_bytes([o[0], o[1]])) + u64::from(u16::from_be_bytes([o[2], o[3]]))
    };
    be(src) + be(dst) + PROTO_TCP + (len as u64 & 0xffff) + ((len as u64) >> 16)
}

/// The checksum field value for TCP segment `segment` (its checksum field is taken as
/// zero) from `src` to `dst`.
pub fn tcp_field(src: Ipv4Address, dst: Ipv4Address, segment: &[u8]) -> u16 {
    let mut s = pseudo_header(src, dst, segment.len());
    s += u64::from(data(segment));
    // Remove the field's current content (offset 16).
    if segment.len() >= 18 {
        s += u64::from(!u16::from_be_bytes([segment[16], segment[17]]));
    }
    !fold(s)
}

/// Writes the checksum of TCP segment `segment` (header and payload) into its field.
pub fn fill_tcp(src: Ipv4Address, dst: Ipv4Address, segment: &mut [u8]) {
    if segment.len() < 20 {
        return;
    }
    segment[16] = 0;
    segment[17] = 0;
    let c = tcp_field(src, dst, segment);
    segment[16..18].copy_from_slice(&c.to_be_bytes());
}

/// Writes the checksum of the TCP segment made of `header` (TCP header and options, an
/// even number of octets) followed by `payload` into the header's field.
pub fn fill_tcp_parts(src: Ipv4Address, dst: Ipv4Address, header: &mut [u8], payload: &[u8]) {
    fill_tcp_parts_with_sum(src, dst, header, payload.len(), data(payload));
}

/// [`fill_tcp_parts`] for a payload of `payload_len` octets whose sum (as [`data`]
/// gives it) is already known: the payload is not read.
pub fn fill_tcp_parts_with_sum(
    src: Ipv4Address,
    dst: Ipv4Address,
    header: &mut [u8],
    payload_len: usize,
    payload_sum: u16,
) {
    if header.len() < 20 {
        return;
    }
    header[16] = 0;
    header[17] = 0;
    // The payload starts at an even offset, so its words line up with the header's and
    // the two sums add.
    debug_assert!(header.len().is_multiple_of(2));
    let s = pseudo_header(src, dst, header.len() + payload_len)
        + u64::from(data(header))
        + u64::from(payload_sum);
    header[16..18].copy_from_slice(&(!fold(s)).to_be_bytes());
}

/// Writes the sum of the pseudo header (folded, not complemented) into the checksum field
/// of TCP segment `segment`: what a device with TCP checksum offload expects there
/// (DPDK's `rte_ipv4_phdr_cksum`).
pub fn fill_tcp_pseudo_header(src: Ipv4Address, dst: Ipv4Address, segment: &mut [u8]) {
    let len = segment.len();
    fill_tcp_pseudo_header_len(src, dst, segment, len);
}

/// [`fill_tcp_pseudo_header`] for a segment of `len` octets of which `header` holds the
/// first (the rest lies in other buffers).
pub fn fill_tcp_pseudo_header_len(
    src: Ipv4Address,
    dst: Ipv4Address,
    header: &mut [u8],
    len: usize,
) {
    if header.len() < 20 {
        return;
    }
    let p = fold(pseudo_header(src, dst, len));
    header[16..18].copy_from_slice(&p.to_be_bytes());
}

/// What a device with TCP checksum offload does to a segment prepared by
/// [`fill_tcp_pseudo_header`]: complements the sum over the segment, pseudo-header sum
/// included, into the field.
pub fn complete_tcp_offload(segment: &mut [u8]) {
    if segment.len() < 20 {
        return;
    }
    let c = !data(segment);
    segment[16..18].copy_from_slice(&c.to_be_bytes());
}

/// True when the checksum of the TCP segment made of `header` (TCP header and options)
/// followed by a payload of `payload_len` octets whose sum (as [`data`] gives it) is
/// `payload_sum` is right: the payload is not read here (the receive path sums it in the
/// pass that takes its FPDUs' CRCs).
pub fn verify_tcp_parts(
    src: Ipv4Address,
    dst: Ipv4Address,
    header: &[u8],
    payload_len: usize,
    payload_sum: u16,
) -> bool {
    // The TCP header is a whole number of 32-bit words: the payload's words line up.
    let s = pseudo_header(src, dst, header.len() + payload_len)
        + u64::from(data(header))
        + u64::from(payload_sum);
    header.len().is_multiple_of(2) && fold(s) == 0xffff
}

/// True when the checksum of TCP segment `segment` from `src` to `dst` is right.
pub fn verify_tcp(src: Ipv4Address, dst: Ipv4Address, segment: &[u8]) -> bool {
    let s = pseudo_header(src, dst, segment.len()) + u64::from(data(segment));
    fold(s) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::wire::{IpAddress, TcpPacket};

    /// RFC 1071 word by word, as smoltcp computes it.
    fn reference(bytes: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for w in bytes.chunks(2) {
            s += u64::from(w[0]) << 8 | u64::from(w.get(1).copied().unwrap_or(0));
        }
        fold(s)
    }

    proptest! {
        /// The IPv4 header checksum agrees with smoltcp's, filled and checked.
        #[test]
        fn ipv4_header_checksum_agrees_with_smoltcp(
            mut h in proptest::collection::vec(any::<u8>(), 20..=60),
            flip in any::<usize>(),
        ) {
            use smoltcp::wire::Ipv4Packet;
            let len = h.len() / 4 * 4;
            h.truncate(len);
            h[0] = 0x40 | (len / 4) as u8;
            fill_ipv4_header(&mut h);
            prop_assert!(ipv4_header_ok(&h));
            let p = Ipv4Packet::new_unchecked(&h[..]);
            prop_assert!(p.verify_checksum());
            let mut theirs = h.clone();
            Ipv4Packet::new_unchecked(&mut theirs[..]).fill_checksum();
            prop_assert_eq!(&theirs[10..12], &h[10..12]);
            // One flipped bit (past the version/IHL octet, which smoltcp reads the
            // length from): both refuse it.
            let bit = 8 + flip % ((len - 1) * 8);
            h[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(ipv4_header_ok(&h), Ipv4Packet::new_unchecked(&h[..]).verify_checksum());
            prop_assert!(!ipv4_header_ok(&h));
        }

        #[test]
        fn pseudo_header_then_device_completion_gives_the_checksum(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            mut seg in proptest::collection::vec(any::<u8>(), 20..3000),
        ) {
            let (src, dst) = (Ipv4Address::from(src), Ipv4Address::from(dst));
            let mut offloaded = seg.clone();
            fill_tcp(src, dst, &mut seg);
            fill_tcp_pseudo_header(src, dst, &mut offloaded);
            complete_tcp_offload(&mut offloaded);
            // A zero sum may come out as 0x0000 or 0xffff (both are the one's complement
            // zero); everything else must agree bit for bit.
            prop_assert!(verify_tcp(src, dst, &offloaded));
            if seg[16..18] != [0, 0] && seg[16..18] != [0xff, 0xff] {
                prop_assert_eq!(&seg[..], &offloaded[..]);
            }
        }

        #[test]
        fn header_and_payload_summed_apart_give_the_whole_checksum(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            words in 5usize..16,
            mut seg in proptest::collection::vec(any::<u8>(), 64..3000),
        ) {
            let (src, dst) = (Ipv4Address::from(src), Ipv4Address::from(dst));
            let h = 4 * words;
            let mut whole = seg.clone();
            fill_tcp(src, dst, &mut whole);
            let (header, payload) = seg.split_at_mut(h);
            fill_tcp_parts(src, dst, header, payload);
            prop_assert_eq!(&seg[..], &whole[..]);
            // And the offload form over a header alone matches the whole segment's.
            let mut head = whole[..h].to_vec();
            let mut full = whole.clone();
            fill_tcp_pseudo_header_len(src, dst, &mut head, whole.len());
            fill_tcp_pseudo_header(src, dst, &mut full);
            prop_assert_eq!(&head[..], &full[..h]);
        }

        #[test]
        fn data_matches_rfc1071(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(data(&bytes), reference(&bytes));
        }

        #[test]
        fn tcp_checksum_matches_smoltcp(
            payload in proptest::collection::vec(any::<u8>(), 0..2000),
            a in any::<[u8; 4]>(),
            b in any::<[u8; 4]>(),
            noise in any::<u16>(),
        ) {
            let (src, dst) = (Ipv4Address::from(a), Ipv4Address::from(b));
            let mut seg = vec![0u8; 20 + payload.len()];
            seg[12] = 5 << 4;
            seg[20..].copy_from_slice(&payload);
            seg[16..18].copy_from_slice(&noise.to_be_bytes());
            let mut theirs = seg.clone();
            TcpPacket::new_unchecked(&mut theirs)
                .fill_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst));
            fill_tcp(src, dst, &mut seg);
            prop_assert_eq!(&seg, &theirs);
            prop_assert!(verify_tcp(src, dst, &seg));
            prop_assert!(verify_tcp_parts(src, dst, &seg[..20], payload.len(), data(&seg[20..])));
            let at = 20 + payload.len() / 2;
            if at < seg.len() {
                seg[at] ^= 0x10;
            }
            prop_assert_eq!(
                verify_tcp_parts(src, dst, &seg[..20], payload.len(), data(&seg[20..])),
                verify_tcp(src, dst, &seg)
            );
            prop_assert_eq!(
                verify_tcp(src, dst, &seg),
                TcpPacket::new_unchecked(&seg)
                    .verify_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst))
            );
        }
    }
}
