//! Transmit segmentation offload in software: what a device with TCP TSO does to one
//! large Ethernet/IPv4/TCP frame (DPDK's `RTE_MBUF_F_TX_TCP_SEG`). The in-memory wire
//! uses it to emulate such a device; tests use it as the reference a device is held to.
//!
//! The frame's headers are those of the first segment: an IPv4 header (any length, its
//! checksum ignored) whose total length may exceed the MTU, and a TCP header whose
//! checksum field is ignored (a device finds the pseudo-header sum without the length
//! there). Segment `i` carries payload octets `[i * mss, (i + 1) * mss)`, the sequence
//! number advanced by `i * mss`, the IPv4 identification by `i`, FIN and PSH only on the
//! last segment, and both checksums filled.

use smoltcp::wire::{Ipv4Packet, TcpPacket};

/// Octets of an Ethernet header.
const ETH_LEN: usize = 14;

/// Where the parts of a TSO frame lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsoLayout {
    /// Offset of the TCP header.
    pub tcp: usize,
    /// Offset of the payload (the end of the headers).
    pub payload: usize,
}

/// The layout of an Ethernet/IPv4/TCP frame to be segmented, or `None` when it is not
/// one (too short, not IPv4, a fragment, not TCP, a header length beyond the frame).
pub fn layout(frame: &[u8]) -> Option<TsoLayout> {
    if frame.len() < ETH_LEN + 40 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    // The total length is not compared with the frame: each segment gets its own.
    let ihl = usize::from(frame[ETH_LEN] & 0x0f) * 4;
    if frame[ETH_LEN] >> 4 != 4 || ihl < 20 || frame.len() < ETH_LEN + ihl + 20 {
        return None;
    }
    let frag = u16::from_be_bytes([frame[ETH_LEN + 6], frame[ETH_LEN + 7]]);
    if frag & 0x3fff != 0 || frame[ETH_LEN + 9] != 6 {
        return None;
    }
    let tcp = ETH_LEN + ihl;
    let thl = usize::from(frame[tcp + 12] >> 4) * 4;
    if thl < 20 || frame.len() < tcp + thl {
        return None;
    }
    Some(TsoLayout {
        tcp,
        payload: tcp + thl,
    })
}

/// How many segments a payload of `len` octets makes at `mss` (at least one).
pub fn segments(len: usize, mss: usize) -> usize {
    len.div_ceil(mss.max(1)).max(1)
}

/// Cuts `frame` into segments of at most `mss` payload octets, calling `emit` with each
/// whole segment (built in `scratch`). Returns how many segments were emitted, or `None`
/// (nothing emitted) when `frame` is not an Ethernet/IPv4/TCP frame or `mss` is 0.
pub fn segment(
    frame: &[u8],
    mss: usize,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Option<usize> {
    let l = layout(frame)?;
    if mss == 0 {
        return None;
    }
    let n = segments(frame.len() - l.payload, mss);
    for i in 0..n {
        scratch.clear();
        scratch.resize(segment_len(frame, &l, mss, i), 0);
        write_segment(frame, &l, mss, i, scratch);
        emit(scratch);
    }
    Some(n)
}

/// The length of segment `i` of `frame` (laid out as `l`) cut at `mss` (not 0).
pub fn segment_len(frame: &[u8], l: &TsoLayout, mss: usize, i: usize) -> usize {
    let payload = frame.len() - l.payload;
    let lo = (i * mss).min(payload);
    let hi = ((i + 1) * mss).min(payload);
    l.payload + hi - lo
}

/// Writes segment `i` of `frame` (laid out as `l`) cut at `mss` (not 0) into `out`,
/// exactly [`segment_len`] octets long.
pub fn write_segment(frame: &[u8], l: &TsoLayout, mss: usize, i: usize, out: &mut [u8]) {
    let payload = &frame[l.payload..];
    let n = segments(payload.len(), mss);
    let lo = (i * mss).min(payload.len());
    let hi = ((i + 1) * mss).min(payload.len());
    out[..l.payload].copy_from_slice(&frame[..l.payload]);
    out[l.payload..].copy_from_slice(&payload[lo..hi]);
    let total = (out.len() - ETH_LEN) as u16;
    out[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
    let id0 = u16::from_be_bytes([frame[ETH_LEN + 4], frame[ETH_LEN + 5]]);
    out[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
    let (src, dst) = {
        let mut ip = Ipv4Packet::new_unchecked(&mut out[ETH_LEN..l.tcp]);
        ip.fill_checksum();
        (ip.src_addr(), ip.dst_addr())
    };
    let t = l.tcp;
    let seq0 = u32::from_be_bytes([frame[t + 4], frame[t + 5], frame[t + 6], frame[t + 7]]);
    out[t + 4..t + 8].copy_from_slice(&seq0.wrapping_add(lo as u32).to_be_bytes());
    // FIN (0x01) and PSH (0x08) only on the last segment.
    let flags = frame[t + 13];
    out[t + 13] = if i + 1 == n { flags } else { flags & !0x09 };
    wire::tcp::checksum::fill_tcp(src, dst, &mut out[t..]);
    debug_assert!(TcpPacket::new_checked(&out[t..]).is_ok());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::wire::{Ipv4Address, TcpControl, TcpSeqNumber};
    use wire::tcp::FourTuple;

    fn tso_frame(payload: &[u8], fin: bool) -> Vec<u8> {
        let tuple = FourTuple {
            local_addr: Ipv4Address::new(10, 0, 0, 1),
            local_port: 4000,
            remote_addr: Ipv4Address::new(10, 0, 0, 2),
            remote_port: 5000,
        };
        let mut repr = wire::tcp::bare_repr(
            4000,
            5000,
            if fin {
                TcpControl::Fin
            } else {
                TcpControl::Psh
            },
            TcpSeqNumber(-5),
        );
        repr.ack_number = Some(TcpSeqNumber(77));
        repr.payload = payload;
        let mut ip = Vec::new();
        // A frame of at most 64 KiB builds with the ordinary helper; the TSO frame's
        // header is that of its first segment with the total length of all.
        wire::tcp::ipv4_segment_to_bytes(&tuple, &repr, 64, &mut ip);
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&ip);
        f
    }

    proptest! {
        #[test]
        fn segments_reassemble_to_the_frame(len in 1usize..9000, mss in 1usize..3000, fin: bool) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let frame = tso_frame(&payload, fin);
            let mut got = Vec::new();
            let mut scratch = Vec::new();
            let mut k = 0usize;
            let n = segment(&frame, mss, &mut scratch, |seg| {
                let (src, dst, repr) = wire::tcp::ipv4_segment_from_bytes(&seg[ETH_LEN..])
                    .expect("a valid segment, checksums included");
                assert_eq!((src, dst), (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2)));
                assert_eq!(repr.seq_number, TcpSeqNumber(-5) + got.len());
                assert_eq!(repr.ack_number, Some(TcpSeqNumber(77)));
                assert!(repr.payload.len() <= mss && !repr.payload.is_empty());
                let last = got.len() + repr.payload.len() == len;
                let want = match (last, fin) {
                    (true, true) => TcpControl::Fin,
                    (true, false) => TcpControl::Psh,
                    (false, _) => TcpControl::None,
                };
                assert_eq!(repr.control, want);
                let ip = Ipv4Packet::new_checked(&seg[ETH_LEN..]).unwrap();
                assert!(ip.verify_checksum());
                assert_eq!(ip.ident(), k as u16);
                got.extend_from_slice(repr.payload);
                k += 1;
            });
            prop_assert_eq!(n, Some(segments(len, mss)));
            prop_assert_eq!(k, segments(len, mss));
            prop_assert_eq!(got, payload);
        }
    }

    #[test]
    fn refuses_what_is_not_ipv4_tcp() {
        let mut scratch = Vec::new();
        let frame = tso_frame(b"abcd", false);
        assert_eq!(segment(&frame, 0, &mut scratch, |_| panic!()), None);
        assert_eq!(segment(&frame[..40], 2, &mut scratch, |_| panic!()), None);
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(segment(&arp, 2, &mut scratch, |_| panic!()), None);
        let mut udp = frame.clone();
        udp[ETH_LEN + 9] = 17;
        assert_eq!(segment(&udp, 2, &mut scratch, |_| panic!()), None);
        let mut frag = frame;
        frag[ETH_LEN + 6] = 0x20;
        assert_eq!(segment(&frag, 2, &mut scratch, |_| panic!()), None);
    }
}
