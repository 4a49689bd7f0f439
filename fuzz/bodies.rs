//! The fuzz targets' bodies, shared by the cargo-fuzz targets in `fuzz_targets/` and by the
//! bounded run inside the normal test suite (`tests/fuzz_smoke.rs`). Each takes arbitrary
//! octets and panics only on a real defect.

use wire::mpa::deframe::{CrcHints, Deframer};
use wire::mpa::fpdu::FpduMode;
use wire::mpa::startup_frame::{parse_with, Dialect, FrameKind, ParseOptions, Parsed};
use wire::rdmap::{parse_segment, terminate_ulpdu, Terminate};

/// MPA startup frame parser, in every dialect and expectation: whatever parses re-encodes
/// to as many octets as it consumed.
pub fn startup_frame(data: &[u8]) {
    for dialect in [Dialect::Rfc6581, Dialect::Draft2010, Dialect::RtrFrame2007] {
        for expected in [None, Some(FrameKind::Request), Some(FrameKind::Reply)] {
            let mut opts = ParseOptions::new(expected);
            opts.dialect = dialect;
            if let Ok(Parsed::Frame { frame, consumed }) = parse_with(data, &opts) {
                assert!(consumed <= data.len());
                let again = frame.to_bytes(dialect).expect("a parsed frame re-encodes");
                assert_eq!(again.len(), consumed);
            }
        }
    }
}

/// The FPDU deframer (in order, in chunks the first octet chooses) and out-of-order
/// recovery, in the FPDU mode the first octet chooses.
pub fn deframer(data: &[u8]) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mode = FpduMode {
        markers: ctl & 1 != 0,
        crc: ctl & 2 != 0,
    };
    let origin = u64::from(ctl >> 2) * 4;
    let chunk = usize::from(ctl % 61) + 1;
    let mut d = Deframer::at_offset(mode, origin);
    d.recover_out_of_order(origin + 1 + u64::from(ctl), rest, |f| {
        assert!(f.ulpdu.len() <= f.wire_len);
    });
    let mut total = 0usize;
    for c in rest.chunks(chunk) {
        if d.push(c, |f| total += f.ulpdu.len()).is_err() {
            break;
        }
    }
    assert!(total <= rest.len());
    // The CRCs taken with the TCP sum (the receive path's one pass) never change what is
    // delivered or the verdict: each chunk as a segment, hinted and not.
    let mut hinted = Deframer::at_offset(mode, origin);
    let mut plain = Deframer::at_offset(mode, origin);
    let mut runs = Deframer::at_offset(mode, origin);
    let mut hints = CrcHints::new();
    for c in rest.chunks(chunk.max(7) * 8) {
        let sum = hints.take(mode, hinted.stream_offset(), c);
        assert_eq!(sum, wire::tcp::checksum::data(c));
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        let ra = hinted.push_hinted(c, &hints, |f| a.push((f.stream_offset, f.ulpdu.to_vec())));
        let rb = plain.push(c, |f| b.push((f.stream_offset, f.ulpdu.to_vec())));
        // Delivered where they arrived, the ULPDUs are the same octets.
        let rr = runs.push_runs_hinted(c, &hints, |f| {
            let runs: Vec<&[u8]> = f.ulpdu.runs().collect();
            assert_eq!(runs.iter().map(|x| x.len()).sum::<usize>(), f.ulpdu.len());
            // Placed as the dataplane places it (one strided copy between the markers),
            // whole and past a header: the same octets as the runs.
            for skip in [0, 14, 18] {
                let u = f.ulpdu.skip(skip);
                assert_eq!(placed(&u), u.to_vec());
            }
            r.push((f.stream_offset, runs.concat()))
        });
        assert_eq!(ra, rb);
        assert_eq!(ra, rr);
        assert_eq!(a, b);
        assert_eq!(a, r);
        if ra.is_err() {
            break;
        }
    }
}

/// `u` placed into a fresh region as the dataplane places a ULPDU
/// (`UlpduRuns::write_to`: one strided copy when markers lie inside it), read back.
fn placed(u: &wire::mpa::deframe::UlpduRuns<'_>) -> Vec<u8> {
    let m =
        fastpath::regmem::RegionMemory::allocate(u.len()).expect("a region of a ULPDU's length");
    u.write_to(&m, 0, true)
        .expect("a ULPDU fits a region of its length");
    let mut out = vec![0u8; u.len()];
    m.read(0, &mut out).expect("read back");
    out
}

/// The DDP/RDMAP segment parser and the Terminate decoders: a parse error that names a
/// Terminate yields one that encodes into a parseable Terminate message.
pub fn ddp_rdmap(data: &[u8]) {
    match parse_segment(data) {
        Ok(seg) => assert!(seg.payload.len() <= data.len()),
        Err(e) => {
            if let Some(term) = e.terminate(data) {
                let ulpdu = terminate_ulpdu(&term, 1);
                assert!(parse_segment(&ulpdu).is_ok(), "{term:?}");
            }
        }
    }
    let _ = Terminate::decode(data);
    let _ = Terminate::decode_lenient(data);
}

/// TCP over IPv4: the datagram parser never panics, and the TCP header's fast parse
/// (`wire::tcp::headers::parse_tcp_common`) gives what smoltcp's parse gives wherever it
/// does not defer to it, on the octets as a datagram's payload and as a segment alone.
pub fn tcp_ipv4(data: &[u8]) {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, Ipv4Address, TcpPacket, TcpRepr};
    let _ = wire::tcp::ipv4_segment_from_bytes(data);
    // The datagram's payload where its header says (IHL, total length), else the octets
    // after a 20-octet header.
    let payload = match (data.first(), data.get(2..4)) {
        (Some(&v), Some(t)) => {
            let ihl = usize::from(v & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([t[0], t[1]]));
            data.get(ihl..total.min(data.len())).unwrap_or(&[])
        }
        _ => &[],
    };
    let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
    for seg in [data, data.get(20..).unwrap_or(&[]), payload] {
        for checked in [false, true] {
            let caps = if checked {
                ChecksumCapabilities::default()
            } else {
                ChecksumCapabilities::ignored()
            };
            let theirs = TcpPacket::new_checked(seg).ok().and_then(|p| {
                TcpRepr::parse(&p, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps).ok()
            });
            if !checked {
                if let Some(ours) = wire::tcp::headers::parse_tcp_common(seg) {
                    assert_eq!(ours.ok(), theirs, "the fast parse disagrees with smoltcp's");
                }
            }
            assert_eq!(
                wire::tcp::segment_from_bytes_with(src, dst, seg, checked),
                theirs,
                "segment_from_bytes disagrees with smoltcp's parse (checksum checked: {checked})"
            );
        }
    }
}
