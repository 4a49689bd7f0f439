//! The MPA draft's annotated FPDUs (draft-ietf-rddp-mpa-01 section 5.2, Figures 5 and 6),
//! byte for byte, and the same FPDUs with the final RFC 5041/5040 control bytes.

use wire::crc;
use wire::mpa::deframe::{CrcCheck, Deframer};
use wire::mpa::fpdu::{FpduMode, Framer};

const MARKERS_AND_CRC: FpduMode = FpduMode {
    markers: true,
    crc: true,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The 42-octet ULPDU of both figures: an untagged Send header (draft control bytes
/// `40 03`, or RFC 5041/5040 `41 43`), QN 0, the given MSN, MO 0, and 24 zero octets.
fn send_ulpdu(control: [u8; 2], msn: u32) -> Vec<u8> {
    let mut u = control.to_vec();
    u.extend_from_slice(&[0; 4]); // RsvdULP (no STag)
    u.extend_from_slice(&0u32.to_be_bytes()); // QN 0
    u.extend_from_slice(&msn.to_be_bytes());
    u.extend_from_slice(&0u32.to_be_bytes()); // MO 0
    u.extend_from_slice(&[0; 24]);
    u
}

/// Figure 5 as printed: the first FPDU of the stream, led by the marker at offset 0.
const FIGURE_5: &str = "
    0000 0000  002a  4003  0000 0000  0000 0000  0000 0001  0000 0000
    0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
    4c86 b384";

/// Figure 6 as printed: the second FPDU, at stream offset 0x1ec, holding the marker at 0x200.
const FIGURE_6: &str = "
    002a  4003  0000 0000  0000 0000  0000 0002  0000 0000
    0000 0014
    0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
    a19c d103";

#[test]
fn figure_5_framed_byte_for_byte() {
    let mut out = Vec::new();
    let mut f = Framer::new(MARKERS_AND_CRC);
    f.frame(&send_ulpdu([0x40, 0x03], 1), &mut out).unwrap();
    assert_eq!(out, hex(FIGURE_5));
    assert_eq!(f.stream_offset(), 0x34);
    // The CRC field is the CRC-32C value 0x84B3864C, least significant octet first.
    assert_eq!(crc::crc32c(&out[..0x30]), 0x84B3_864C);
}

#[test]
fn figure_6_framed_byte_for_byte() {
    let mut out = Vec::new();
    let mut f = Framer::at_offset(MARKERS_AND_CRC, 0x1ec);
    f.frame(&send_ulpdu([0x40, 0x03], 2), &mut out).unwrap();
    assert_eq!(out, hex(FIGURE_6));
    assert_eq!(f.stream_offset(), 0x220);
}

#[test]
fn figures_5_and_6_deframed() {
    let mut d = Deframer::new(MARKERS_AND_CRC);
    let mut got = Vec::new();
    d.push(&hex(FIGURE_5), |f| {
        got.push((f.stream_offset, f.ulpdu.to_vec(), f.crc))
    })
    .unwrap();
    assert_eq!(
        got,
        vec![(0, send_ulpdu([0x40, 0x03], 1), CrcCheck::Verified)]
    );

    let mut d = Deframer::at_offset(MARKERS_AND_CRC, 0x1ec);
    let mut got = Vec::new();
    d.push(&hex(FIGURE_6), |f| {
        got.push((f.stream_offset, f.ulpdu.to_vec()))
    })
    .unwrap();
    assert_eq!(got, vec![(0x1ec, send_ulpdu([0x40, 0x03], 2))]);
}

/// A bitwise CRC-32C, independent of the crate's SIMD one.
fn reference_crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[test]
fn figures_with_rfc5041_rfc5040_control_bytes() {
    // DDP control 0x41 (L, DV 1), RDMAP control 0x43 (RV 1, Send).
    let mut expected5 = hex(FIGURE_5);
    expected5[6] = 0x41;
    expected5[7] = 0x43;
    let crc5 = reference_crc32c(&expected5[..0x30]);
    expected5[0x30..].copy_from_slice(&crc5.to_le_bytes());
    let mut out = Vec::new();
    let mut f = Framer::new(MARKERS_AND_CRC);
    f.frame(&send_ulpdu([0x41, 0x43], 1), &mut out).unwrap();
    assert_eq!(out, expected5);

    let mut expected6 = hex(FIGURE_6);
    expected6[2] = 0x41;
    expected6[3] = 0x43;
    let n = expected6.len();
    let crc6 = reference_crc32c(&expected6[..n - 4]);
    expected6[n - 4..].copy_from_slice(&crc6.to_le_bytes());
    let mut out = Vec::new();
    Framer::at_offset(MARKERS_AND_CRC, 0x1ec)
        .frame(&send_ulpdu([0x41, 0x43], 2), &mut out)
        .unwrap();
    assert_eq!(out, expected6);

    // Both deframe to the RFC Send ULPDUs.
    let mut stream = expected5.clone();
    // Fill the gap between the figures with one FPDU so the second sits at 0x1ec.
    let mut f = Framer::at_offset(MARKERS_AND_CRC, 0x34);
    // 440 octets between them, no marker among them: ULPDU_Length, 434 octets, no PAD, CRC.
    let filler_len = 0x1ec - 0x34 - 6;
    f.frame(&vec![0xEE; filler_len], &mut stream).unwrap();
    assert_eq!(stream.len(), 0x1ec);
    stream.extend_from_slice(&expected6);
    let mut d = Deframer::new(MARKERS_AND_CRC);
    let mut got = Vec::new();
    d.push(&stream, |f| got.push(f.ulpdu.to_vec())).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], send_ulpdu([0x41, 0x43], 1));
    assert_eq!(got[2], send_ulpdu([0x41, 0x43], 2));
}

#[test]
fn siw_send_fpdu_without_crc() {
    // siw's first FPDU with CRC off (peer README): a 0x22-octet Send ULPDU, zero CRC field.
    let ulpdu = hex("4143 00000000 00000000 00000001 00000000 000102030405060708090a0b0c0d0e0f");
    assert_eq!(ulpdu.len(), 0x22);
    let mode = FpduMode {
        markers: false,
        crc: false,
    };
    let mut out = Vec::new();
    Framer::new(mode).frame(&ulpdu, &mut out).unwrap();
    let mut expected = hex("0022");
    expected.extend_from_slice(&ulpdu);
    expected.extend_from_slice(&[0, 0, 0, 0]); // 36 octets: no PAD; CRC field zero
    assert_eq!(out, expected);
}

#[test]
fn rfc_control_bytes_parse_as_sends_and_draft_bytes_do_not() {
    use wire::rdmap::{parse_segment, Body, Opcode};
    let ulpdu = send_ulpdu([0x41, 0x43], 2);
    let seg = parse_segment(&ulpdu).unwrap();
    assert_eq!(seg.opcode, Opcode::Send);
    assert!(seg.last());
    match seg.body {
        Body::Send { data, .. } => assert_eq!(data, &[0u8; 24]),
        other => panic!("not a Send body: {other:?}"),
    }
    // The draft's `40 03` is DDP version 0 with RDMAP version 0: an untagged buffer error
    // (invalid DDP version) for an RFC 5041 receiver.
    let err = parse_segment(&send_ulpdu([0x40, 0x03], 1)).unwrap_err();
    assert_eq!(err.term_error().map(|t| t.triple()), Some((1, 2, 6)));
}
