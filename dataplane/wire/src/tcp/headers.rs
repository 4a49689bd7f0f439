//! The headers of the data path, written and read field by field.
//!
//! Nearly every segment of an established connection has the same shape: a 20-octet
//! IPv4 header (no options, DF set) and a TCP header with at most the timestamp option
//! (RFC 7323). For that shape this module writes the headers with their checksums
//! computed from the field values, not read back from the buffer, and parses the TCP
//! header without walking the options. Everything else falls back to smoltcp's
//! `Repr::emit` and `Repr::parse`, which are the reference: the tests check that both
//! ways give the same octets and the same `TcpRepr` (property tests over every field).
//!
//! Reading back what was just written costs more than it looks: the header was written
//! in 1-, 2- and 4-octet stores, and a wider load of them waits for the stores to reach
//! the cache (the store-forwarding stall). On the transmit path the buffer is also the
//! port's, whose lines may still be on the core that received the frame last.

use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::checksum::{fold, pseudo_header};

/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of a TCP header without options.
const TCP_BASE_LEN: usize = 20;
/// Length of a TCP header carrying the timestamp option alone (10 octets and two of
/// end-of-list padding, as smoltcp writes it).
const TCP_TS_LEN: usize = 32;
const PROTO_TCP: u16 = 6;
/// Flags as they sit in the low octet of the TCP header's 13th-14th octets.
const FIN: u16 = 0x01;
const SYN: u16 = 0x02;
const RST: u16 = 0x04;
const PSH: u16 = 0x08;
const ACK: u16 = 0x10;
const OPT_TSTAMP: u8 = 8;
const OPT_TSTAMP_LEN: u8 = 10;
const OPT_NOP: u8 = 1;

/// The sum of the two 16-bit halves of `v`.
fn halves(v: u32) -> u64 {
    u64::from(v >> 16) + u64::from(v & 0xffff)
}

fn addr(a: Ipv4Address) -> u32 {
    u32::from_be_bytes(a.octets())
}

fn put16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes the 20-octet IPv4 header of a TCP datagram from `src` to `dst` carrying
/// `payload_len` octets, with `ttl`, DF set, identification 0 and its checksum: the same
/// octets as smoltcp's `Ipv4Repr::emit` followed by the checksum fill. The checksum is
/// computed from the values; `buf` is only written. `false` (nothing written) when `buf`
/// is shorter than 20 octets or the datagram would exceed 65535 octets.
pub fn emit_ipv4_header(
    src: Ipv4Address,
    dst: Ipv4Address,
    payload_len: usize,
    ttl: u8,
    buf: &mut [u8],
) -> bool {
    let Some(total) = payload_len
        .checked_add(IPV4_HEADER_LEN)
        .and_then(|t| u16::try_from(t).ok())
    else {
        return false;
    };
    let Some(h) = buf.get_mut(..IPV4_HEADER_LEN) else {
        return false;
    };
    let (s, d) = (addr(src), addr(dst));
    const VERSION_IHL_TOS: u16 = 0x4500;
    const DONT_FRAG: u16 = 0x4000;
    let ttl_proto = u16::from(ttl) << 8 | PROTO_TCP;
    let sum = u64::from(VERSION_IHL_TOS)
        + u64::from(total)
        + u64::from(DONT_FRAG)
        + u64::from(ttl_proto)
        + halves(s)
        + halves(d);
    put16(h, 0, VERSION_IHL_TOS);
    put16(h, 2, total);
    put16(h, 4, 0);
    put16(h, 6, DONT_FRAG);
    put16(h, 8, ttl_proto);
    put16(h, 10, !fold(sum));
    put32(h, 12, s);
    put32(h, 16, d);
    true
}

/// Whether `repr` has the shape [`emit_tcp_header`] writes: no MSS, window scale,
/// SACK-permitted or SACK blocks; the timestamp option or nothing.
fn common_shape(repr: &TcpRepr) -> bool {
    repr.max_seg_size.is_none()
        && repr.window_scale.is_none()
        && !repr.sack_permitted
        && repr.sack_ranges.iter().all(Option::is_none)
}

/// The TCP header length of `repr` when it has the common shape.
pub fn common_header_len(repr: &TcpRepr) -> Option<usize> {
    common_shape(repr).then_some(if repr.timestamp.is_some() {
        TCP_TS_LEN
    } else {
        TCP_BASE_LEN
    })
}

/// Writes the TCP header of `repr` from `src` to `dst`, for a payload of `payload_len`
/// octets whose one's complement sum (as [`super::checksum::data`] gives it) is
/// `payload_sum`, checksum included: the same octets as smoltcp's `Repr::emit` of the
/// header followed by the checksum fill. The checksum is computed from the values; `buf`
/// is only written. `false` (nothing written) when `repr` has options other than the
/// timestamp, or `buf` is not exactly the header's length.
pub fn emit_tcp_header(
    src: Ipv4Address,
    dst: Ipv4Address,
    repr: &TcpRepr,
    payload_len: usize,
    payload_sum: u16,
    buf: &mut [u8],
) -> bool {
    let Some(len) = common_header_len(repr) else {
        return false;
    };
    if buf.len() != len {
        return false;
    }
    let flags = match repr.control {
        TcpControl::None => 0,
        TcpControl::Psh => PSH,
        TcpControl::Syn => SYN,
        TcpControl::Fin => FIN,
        TcpControl::Rst => RST,
    } | if repr.ack_number.is_some() { ACK } else { 0 };
    let off_flags = ((len / 4) as u16) << 12 | flags;
    let seq = repr.seq_number.0 as u32;
    let ack = repr.ack_number.map_or(0, |a| a.0 as u32);
    // The pseudo header (RFC 9293 3.1), the header's words, the payload's sum.
    let mut sum = pseudo_header(src, dst, len + payload_len)
        + u64::from(repr.src_port)
        + u64::from(repr.dst_port)
        + halves(seq)
        + halves(ack)
        + u64::from(off_flags)
        + u64::from(repr.window_len)
        + u64::from(payload_sum);
    put16(buf, 0, repr.src_port);
    put16(buf, 2, repr.dst_port);
    put32(buf, 4, seq);
    put32(buf, 8, ack);
    put16(buf, 12, off_flags);
    put16(buf, 14, repr.window_len);
    put16(buf, 18, 0);
    if let Some(ts) = repr.timestamp {
        let kind_len = u16::from(OPT_TSTAMP) << 8 | u16::from(OPT_TSTAMP_LEN);
        sum += u64::from(kind_len) + halves(ts.tsval) + halves(ts.tsecr);
        put16(buf, 20, kind_len);
        put32(buf, 22, ts.tsval);
        put32(buf, 26, ts.tsecr);
        // End of option list, and padding.
        put16(buf, 30, 0);
    }
    put16(buf, 16, !fold(sum));
    true
}

/// Parses the TCP header of `bytes` when it has the common shape: `Some` with what
/// smoltcp's `Repr::parse` (checksum not checked) gives for it, `Ok` or `Err`; `None`
/// when the header has another shape and the caller must parse it the general way.
pub fn parse_tcp_common(bytes: &[u8]) -> Option<Result<TcpRepr<'_>, ()>> {
    if bytes.len() < TCP_BASE_LEN {
        return Some(Err(()));
    }
    let off_flags = get16(bytes, 12);
    let header_len = usize::from(off_flags >> 12) * 4;
    let timestamp = match header_len {
        TCP_BASE_LEN => None,
        TCP_TS_LEN if bytes.len() >= TCP_TS_LEN => {
            let o = &bytes[TCP_BASE_LEN..TCP_TS_LEN];
            // As smoltcp writes it, or as Linux does (two NOPs first).
            let at = match o {
                [OPT_TSTAMP, OPT_TSTAMP_LEN, .., 0, 0] => TCP_BASE_LEN + 2,
                [OPT_NOP, OPT_NOP, OPT_TSTAMP, OPT_TSTAMP_LEN, ..] => TCP_BASE_LEN + 4,
                _ => return None,
            };
            Some(TcpTimestampRepr::new(
                get32(bytes, at),
                get32(bytes, at + 4),
            ))
        }
        _ => return None,
    };
    let (src_port, dst_port) = (get16(bytes, 0), get16(bytes, 2));
    if src_port == 0 || dst_port == 0 {
        return Some(Err(()));
    }
    let f = |bit: u16| off_flags & bit != 0;
    let control = match (f(SYN), f(FIN), f(RST), f(PSH)) {
        (false, false, false, false) => TcpControl::None,
        (false, false, false, true) => TcpControl::Psh,
        (true, false, false, _) => TcpControl::Syn,
        (false, true, false, _) => TcpControl::Fin,
        (false, false, true, _) => TcpControl::Rst,
        _ => return Some(Err(())),
    };
    Some(Ok(TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: TcpSeqNumber(get32(bytes, 4) as i32),
        ack_number: f(ACK).then(|| TcpSeqNumber(get32(bytes, 8) as i32)),
        window_len: get16(bytes, 14),
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp,
        payload: &bytes[header_len..],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpPacket};

    fn control() -> impl Strategy<Value = TcpControl> {
        prop_oneof![
            Just(TcpControl::None),
            Just(TcpControl::Psh),
            Just(TcpControl::Syn),
            Just(TcpControl::Fin),
            Just(TcpControl::Rst),
        ]
    }

    prop_compose! {
        /// Any repr, of the common shape or not.
        fn any_repr()(
            src_port in any::<u16>(),
            dst_port in any::<u16>(),
            control in control(),
            seq in any::<i32>(),
            ack in proptest::option::of(any::<i32>()),
            window_len in any::<u16>(),
            ts in proptest::option::of(any::<(u32, u32)>()),
            mss in proptest::option::weighted(0.1, any::<u16>()),
            ws in proptest::option::weighted(0.1, 0u8..15),
            sack_permitted in proptest::bool::weighted(0.1),
            sack in proptest::option::weighted(0.1, any::<(u32, u32)>()),
        ) -> TcpRepr<'static> {
            TcpRepr {
                src_port,
                dst_port,
                control,
                seq_number: TcpSeqNumber(seq),
                ack_number: ack.map(TcpSeqNumber),
                window_len,
                window_scale: ws,
                max_seg_size: mss,
                sack_permitted,
                sack_ranges: [sack, None, None],
                timestamp: ts.map(|(a, b)| TcpTimestampRepr::new(a, b)),
                payload: &[],
            }
        }
    }

    /// smoltcp's octets for the header of `repr` before `payload`, checksum filled.
    fn smoltcp_header(
        src: Ipv4Address,
        dst: Ipv4Address,
        repr: &TcpRepr,
        payload: &[u8],
    ) -> Vec<u8> {
        let full = TcpRepr { payload, ..*repr };
        // Garbage underneath: whatever smoltcp leaves unwritten shows.
        let mut seg = vec![0xa5; full.buffer_len()];
        full.emit(
            &mut TcpPacket::new_unchecked(&mut seg[..]),
            &IpAddress::Ipv4(src),
            &IpAddress::Ipv4(dst),
            &ChecksumCapabilities::default(),
        );
        seg.truncate(repr.header_len());
        seg
    }

    proptest! {
        /// The IPv4 header is smoltcp's, checksum included.
        #[test]
        fn ipv4_header_is_smoltcps(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            len in 0usize..65516,
            ttl in any::<u8>(),
        ) {
            let (src, dst) = (Ipv4Address::from(src), Ipv4Address::from(dst));
            let ip = Ipv4Repr { src_addr: src, dst_addr: dst, next_header: IpProtocol::Tcp, payload_len: len, hop_limit: ttl };
            let mut theirs = [0x5au8; 20];
            ip.emit(&mut Ipv4Packet::new_unchecked(&mut theirs[..]), &ChecksumCapabilities::default());
            let mut ours = [0xa5u8; 20];
            prop_assert!(emit_ipv4_header(src, dst, len, ttl, &mut ours));
            prop_assert_eq!(ours, theirs);
        }

        /// The TCP header of the common shape is smoltcp's, checksum included; any other
        /// shape is refused and nothing is written.
        #[test]
        fn tcp_header_is_smoltcps(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            repr in any_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let (src, dst) = (Ipv4Address::from(src), Ipv4Address::from(dst));
            let theirs = smoltcp_header(src, dst, &repr, &payload);
            let mut ours = vec![0xa5u8; repr.header_len()];
            let sum = crate::tcp::checksum::data(&payload);
            let wrote = emit_tcp_header(src, dst, &repr, payload.len(), sum, &mut ours);
            prop_assert_eq!(wrote, common_shape(&repr));
            prop_assert_eq!(common_header_len(&repr).is_some(), wrote);
            if wrote {
                prop_assert_eq!(common_header_len(&repr), Some(repr.header_len()));
                // Bit for bit, checksum included: the sum is never zero (the protocol
                // number is in it), so both folds give the same field.
                prop_assert_eq!(&ours, &theirs);
                let mut seg = ours.clone();
                seg.extend_from_slice(&payload);
                prop_assert!(crate::tcp::checksum::verify_tcp(src, dst, &seg));
            } else {
                prop_assert!(ours.iter().all(|&b| b == 0xa5));
            }
            // A buffer of another length is refused.
            let mut short = vec![0u8; repr.header_len() + 4];
            prop_assert!(!emit_tcp_header(src, dst, &repr, payload.len(), sum, &mut short));
        }

        /// Parsing any header smoltcp writes gives smoltcp's repr, or defers to it.
        #[test]
        fn parse_agrees_with_smoltcp_on_written_headers(
            repr in any_repr(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
            let mut seg = smoltcp_header(src, dst, &repr, &payload);
            seg.extend_from_slice(&payload);
            check_parse(&seg)?;
            // What the data path sends is parsed the fast way, and nothing else is.
            let r = parse_tcp_common(&seg);
            prop_assert_eq!(r.is_some(), common_shape(&repr));
            if let Some(r) = r {
                if repr.src_port != 0 && repr.dst_port != 0 {
                    prop_assert_eq!(r, Ok(TcpRepr { payload: &payload[..], ..repr }));
                } else {
                    prop_assert_eq!(r, Err(()));
                }
            }
        }

        /// Parsing arbitrary octets agrees with smoltcp wherever it does not defer.
        #[test]
        fn parse_agrees_with_smoltcp_on_any_octets(
            mut seg in proptest::collection::vec(any::<u8>(), 0..48),
            doff in prop_oneof![Just(5u8), Just(8u8), 0u8..16],
            linux in any::<bool>(),
        ) {
            if seg.len() > 12 {
                seg[12] = doff << 4 | (seg[12] & 0x0f);
            }
            if seg.len() >= 32 && doff == 8 {
                // Often the timestamp shapes, sometimes one octet off.
                let opt: &[u8] = if linux { &[1, 1, 8, 10] } else { &[8, 10] };
                seg[20..20 + opt.len()].copy_from_slice(opt);
                if !linux {
                    seg[30] = 0;
                    seg[31] = 0;
                }
            }
            check_parse(&seg)?;
        }

        /// The Linux form of the timestamp option (two NOPs first) parses to the same.
        #[test]
        fn linux_timestamp_form(
            ts in any::<(u32, u32)>(),
            flags in any::<u8>(),
        ) {
            let mut seg = vec![0u8; 40];
            seg[0..4].copy_from_slice(&[0x12, 0x34, 0x56, 0x78]);
            seg[12] = 8 << 4;
            seg[13] = flags;
            seg[20..24].copy_from_slice(&[1, 1, 8, 10]);
            seg[24..28].copy_from_slice(&ts.0.to_be_bytes());
            seg[28..32].copy_from_slice(&ts.1.to_be_bytes());
            let r = parse_tcp_common(&seg);
            prop_assert!(r.is_some());
            check_parse(&seg)?;
        }
    }

    /// `parse_tcp_common` and smoltcp agree on `seg` unless ours defers.
    fn check_parse(seg: &[u8]) -> Result<(), TestCaseError> {
        let theirs = TcpPacket::new_checked(seg).ok().and_then(|p| {
            TcpRepr::parse(
                &p,
                &IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1)),
                &IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2)),
                &ChecksumCapabilities::ignored(),
            )
            .ok()
        });
        if let Some(ours) = parse_tcp_common(seg) {
            prop_assert_eq!(ours.ok(), theirs);
        }
        Ok(())
    }

    #[test]
    fn refusals() {
        let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
        assert!(!emit_ipv4_header(src, dst, 0, 64, &mut [0u8; 19]));
        assert!(!emit_ipv4_header(src, dst, 65516, 64, &mut [0u8; 20]));
        assert!(emit_ipv4_header(src, dst, 65515, 64, &mut [0u8; 20]));
        assert_eq!(parse_tcp_common(&[0u8; 19]), Some(Err(())));
        // A header length past the octets: smoltcp refuses it too.
        let mut seg = [0u8; 24];
        seg[0] = 1;
        seg[2] = 1;
        seg[12] = 8 << 4;
        assert_eq!(parse_tcp_common(&seg), None);
        seg[12] = 5 << 4;
        assert!(matches!(parse_tcp_common(&seg), Some(Ok(_))));
        // A header length below 20: deferred (smoltcp refuses it).
        seg[12] = 4 << 4;
        assert_eq!(parse_tcp_common(&seg), None);
    }
}
