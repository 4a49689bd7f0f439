//! `iwarp decode --pcap`: iWARP connections out of a packet capture.
//!
//! Reads classic libpcap files (either byte order; microsecond or nanosecond time stamps)
//! with Ethernet (linktype 1, 802.1Q tags skipped), Linux cooked (113, SLL and 276, SLL2)
//! or raw IPv4 (101, 228) frames; takes the IPv4/TCP segments (with `smoltcp::wire`);
//! reassembles each direction of each TCP connection by sequence number (retransmitted and
//! overlapping segments merged, a hole reported as a gap, never filled in by guessing);
//! finds the MPA Request and Reply at the start of the two directions; derives each
//! direction's FPDU mode from them (markers in X→Y when Y set M; CRC when either side set
//! C); and decodes both directions with [`super::stream::decode`].
//!
//! Every record carries the connection number, its 4-tuple as `src` and `dst`, the MPA
//! role of the sender (`initiator`, `responder`) and the pcap record number (1-based, as
//! Wireshark counts) that holds its first octet. Records of the two directions are merged
//! in capture order.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddrV4;

use serde_json::{json, Map, Value};
use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
use wire::mpa::fpdu::FpduMode;
use wire::mpa::startup_frame::{self, FrameKind, ParseOptions, Parsed};

use super::stream::{self as decode, DecodeOptions, Decoded, Record};

/// Why a file is not a readable capture at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PcapError {
    /// Shorter than the 24-octet global header.
    Short(usize),
    /// Not one of the four classic libpcap magic numbers (pcapng is not supported).
    Magic(u32),
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapError::Short(n) => write!(
                f,
                "not a pcap file: {n} octets, shorter than the 24-octet file header"
            ),
            PcapError::Magic(m) if *m == 0x0a0d_0d0a => f.write_str(
                "a pcapng file: only classic libpcap files are read \
                 (convert with `editcap -F pcap IN OUT` or capture with `tcpdump -w`)",
            ),
            PcapError::Magic(m) => write!(
                f,
                "not a pcap file: magic number {m:#010x} (a1b2c3d4 or a1b23c4d in either byte order expected)"
            ),
        }
    }
}

impl std::error::Error for PcapError {}

/// One pcap record.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// 1-based record number.
    pub number: u64,
    /// Time stamp in nanoseconds since the epoch.
    pub time_ns: u64,
    /// The captured octets.
    pub data: &'a [u8],
    /// The original length on the wire (more than `data.len()` when the snap length cut it).
    pub orig_len: u32,
}

/// A parsed capture: the link type and its records, plus a problem at the end, if any.
#[derive(Debug)]
pub struct Capture<'a> {
    /// The link type of every record.
    pub linktype: u32,
    /// The records, in file order.
    pub frames: Vec<Frame<'a>>,
    /// Set when the file ends inside a record (which is left out).
    pub truncated: Option<String>,
}

/// Parses a classic libpcap file.
pub fn parse(file: &[u8]) -> Result<Capture<'_>, PcapError> {
    if file.len() < 24 {
        return Err(PcapError::Short(file.len()));
    }
    let magic_le = u32::from_le_bytes([file[0], file[1], file[2], file[3]]);
    let (big, nanos) = match magic_le {
        0xa1b2_c3d4 => (false, false),
        0xa1b2_3c4d => (false, true),
        0xd4c3_b2a1 => (true, false),
        0x4d3c_b2a1 => (true, true),
        _ => {
            return Err(PcapError::Magic(u32::from_be_bytes([
                file[0], file[1], file[2], file[3],
            ])))
        }
    };
    let u32_at = |off: usize| -> u32 {
        let b = [file[off], file[off + 1], file[off + 2], file[off + 3]];
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    // The low 16 bits; the upper ones may hold FCS information (pcap-savefile(5)).
    let linktype = u32_at(20) & 0xffff;
    let mut frames = Vec::new();
    let mut at = 24usize;
    let mut number = 0u64;
    let mut truncated = None;
    while at < file.len() {
        number += 1;
        if file.len() - at < 16 {
            truncated = Some(format!(
                "record {number} at file offset {at}: the file ends inside its 16-octet header"
            ));
            break;
        }
        let sec = u64::from(u32_at(at));
        let frac = u64::from(u32_at(at + 4));
        let incl = u32_at(at + 8) as usize;
        let orig = u32_at(at + 12);
        let body = at + 16;
        if file.len() - body < incl {
            truncated = Some(format!(
                "record {number} at file offset {at}: {incl} octets announced, {} present",
                file.len() - body
            ));
            break;
        }
        let time_ns = sec.saturating_mul(1_000_000_000).saturating_add(if nanos {
            frac
        } else {
            frac.saturating_mul(1000)
        });
        frames.push(Frame {
            number,
            time_ns,
            data: &file[body..body + incl],
            orig_len: orig,
        });
        at = body + incl;
    }
    Ok(Capture {
        linktype,
        frames,
        truncated,
    })
}

/// A TCP segment out of a frame.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// Sender.
    pub src: SocketAddrV4,
    /// Receiver.
    pub dst: SocketAddrV4,
    /// Sequence number of the first octet (of the SYN, if set).
    pub seq: u32,
    /// SYN flag.
    pub syn: bool,
    /// ACK flag.
    pub ack: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// The payload.
    pub payload: &'a [u8],
}

/// Extracts the IPv4 packet of a frame of `linktype`: `Ok(None)` for frames that are not
/// IPv4 (ARP, IPv6, ...), `Err` for frames too short for their link header.
fn ipv4_of(linktype: u32, data: &[u8]) -> Result<Option<&[u8]>, String> {
    match linktype {
        1 => {
            let eth = EthernetFrame::new_checked(data)
                .map_err(|_| "shorter than an Ethernet header".to_string())?;
            let mut ethertype = eth.ethertype();
            let mut payload = eth.payload();
            // 802.1Q / 802.1ad tags: 4 octets each, the inner EtherType last.
            while matches!(ethertype, EthernetProtocol::Unknown(0x8100 | 0x88a8)) {
                if payload.len() < 4 {
                    return Err("VLAN tag cut short".into());
                }
                ethertype = EthernetProtocol::from(u16::from_be_bytes([payload[2], payload[3]]));
                payload = &payload[4..];
            }
            Ok((ethertype == EthernetProtocol::Ipv4).then_some(payload))
        }
        113 => {
            if data.len() < 16 {
                return Err("shorter than a Linux cooked (SLL) header".into());
            }
            Ok((u16::from_be_bytes([data[14], data[15]]) == 0x0800).then_some(&data[16..]))
        }
        276 => {
            if data.len() < 20 {
                return Err("shorter than a Linux cooked v2 (SLL2) header".into());
            }
            Ok((u16::from_be_bytes([data[0], data[1]]) == 0x0800).then_some(&data[20..]))
        }
        101 | 228 => Ok((data.first().map(|b| b >> 4) == Some(4)).then_some(data)),
        _ => Ok(None),
    }
}

/// The TCP segment of a frame: `Ok(None)` if it carries no IPv4/TCP, `Err` with a reason
/// if it should but cannot be read.
pub fn segment_of<'a>(linktype: u32, f: &Frame<'a>) -> Result<Option<Segment<'a>>, String> {
    let cut = f.data.len() < f.orig_len as usize;
    let why = |what: &str| {
        if cut {
            format!(
                "{what}: the capture kept {} of its {} octets (snap length)",
                f.data.len(),
                f.orig_len
            )
        } else {
            what.to_string()
        }
    };
    let Some(ip) = ipv4_of(linktype, f.data).map_err(|e| why(&e))? else {
        return Ok(None);
    };
    let ip = Ipv4Packet::new_checked(ip).map_err(|_| why("malformed or cut IPv4 header"))?;
    if ip.version() != 4 || ip.next_header() != IpProtocol::Tcp {
        return Ok(None);
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err("a fragment of an IPv4 datagram (reassembly not supported)".into());
    }
    let tcp =
        TcpPacket::new_checked(ip.payload()).map_err(|_| why("malformed or cut TCP header"))?;
    if cut {
        return Err(why("TCP payload cut"));
    }
    Ok(Some(Segment {
        src: SocketAddrV4::new(ip.src_addr(), tcp.src_port()),
        dst: SocketAddrV4::new(ip.dst_addr(), tcp.dst_port()),
        seq: tcp.seq_number().0 as u32,
        syn: tcp.syn(),
        ack: tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload(),
    }))
}

/// One direction of a connection, as captured.
#[derive(Debug, Default)]
struct HalfCapture {
    /// Initial sequence number, if the SYN was captured.
    isn: Option<u32>,
    /// (sequence number, payload, record number) of every segment with data.
    segments: Vec<(u32, Vec<u8>, u64)>,
    fin: Option<u64>,
    rst: Option<u64>,
    packets: u64,
}

/// One direction reassembled.
#[derive(Debug, Default)]
pub struct Stream {
    /// The contiguous octets from the stream's start up to the first hole.
    pub data: Vec<u8>,
    /// (stream offset, record number) where each captured segment's new data begins.
    pub origins: Vec<(u64, u64)>,
    /// The first hole: (stream offset, octets missing, record number after it).
    pub gap: Option<(u64, u64, u64)>,
    /// Overlapping retransmissions whose octets differ from the first copy:
    /// (stream offset, record number).
    pub conflicts: Vec<(u64, u64)>,
    /// The SYN was captured (otherwise the stream starts at the lowest sequence number).
    pub syn_seen: bool,
}

impl Stream {
    /// The record number holding stream offset `off`.
    pub fn packet_at(&self, off: u64) -> Option<u64> {
        let i = self.origins.partition_point(|&(o, _)| o <= off);
        i.checked_sub(1).map(|i| self.origins[i].1)
    }
}

/// Reassembles one direction by sequence number.
fn reassemble(h: &HalfCapture) -> Stream {
    let mut s = Stream {
        syn_seen: h.isn.is_some(),
        ..Stream::default()
    };
    let Some(first) = h.segments.first() else {
        return s;
    };
    // Offsets relative to the first data octet (ISN + 1), or to the first captured
    // segment without a SYN; i64 so that a retransmission of older data sorts before.
    let base = h.isn.map_or(first.0, |i| i.wrapping_add(1));
    let mut segs: Vec<(i64, &[u8], u64)> = h
        .segments
        .iter()
        .map(|(seq, p, n)| (i64::from(seq.wrapping_sub(base) as i32), p.as_slice(), *n))
        .collect();
    segs.sort_by_key(|&(o, _, n)| (o, n));
    let start = if h.isn.is_some() { 0 } else { segs[0].0 };
    let mut next: i64 = start;
    for &(off, p, n) in &segs {
        let end = off + p.len() as i64;
        if off > next {
            s.gap = Some(((next - start) as u64, (off - next) as u64, n));
            break;
        }
        // Overlap with what we have: check it agrees.
        let lo = off.max(start);
        let overlap_end = end.min(next);
        if overlap_end > lo {
            let have = &s.data[(lo - start) as usize..(overlap_end - start) as usize];
            let again = &p[(lo - off) as usize..(overlap_end - off) as usize];
            if have != again {
                s.conflicts.push(((lo - start) as u64, n));
            }
        }
        if end > next {
            s.origins.push(((next - start) as u64, n));
            s.data.extend_from_slice(&p[(next - off) as usize..]);
            next = end;
        }
    }
    s
}

/// A TCP connection in the capture.
#[derive(Debug)]
struct Conn {
    /// The side that sent the first SYN (or the first captured segment).
    a: SocketAddrV4,
    b: SocketAddrV4,
    ab: HalfCapture,
    ba: HalfCapture,
}

/// Groups segments into connections. A SYN without ACK whose ISN differs from the one
/// the current connection of that 4-tuple began with starts a new connection.
fn connections(cap: &Capture<'_>, problems: &mut Vec<Record>) -> Vec<Conn> {
    let mut conns: Vec<Conn> = Vec::new();
    let mut by_key: HashMap<(SocketAddrV4, SocketAddrV4), usize> = HashMap::new();
    for f in &cap.frames {
        let seg = match segment_of(cap.linktype, f) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                problems.push(rec(json!({
                    "kind": "error",
                    "offset": 0,
                    "packet": f.number,
                    "message": format!("record {}: {e}", f.number),
                })));
                continue;
            }
        };
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let fresh = |c: &Conn| {
            seg.syn && !seg.ack && c.a == seg.src && c.ab.isn.is_some_and(|i| i != seg.seq)
        };
        let idx = match by_key.get(&key) {
            Some(&i) if !fresh(&conns[i]) => i,
            _ => {
                conns.push(Conn {
                    a: seg.src,
                    b: seg.dst,
                    ab: HalfCapture::default(),
                    ba: HalfCapture::default(),
                });
                by_key.insert(key, conns.len() - 1);
                conns.len() - 1
            }
        };
        let c = &mut conns[idx];
        let h = if seg.src == c.a { &mut c.ab } else { &mut c.ba };
        h.packets += 1;
        let mut seq = seg.seq;
        if seg.syn {
            if h.isn.is_none() {
                h.isn = Some(seg.seq);
            }
            seq = seq.wrapping_add(1);
        }
        if !seg.payload.is_empty() {
            h.segments.push((seq, seg.payload.to_vec(), f.number));
        }
        if seg.fin && h.fin.is_none() {
            h.fin = Some(f.number);
        }
        if seg.rst && h.rst.is_none() {
            h.rst = Some(f.number);
        }
    }
    conns
}

fn rec(v: Value) -> Record {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Whether `data` begins like an MPA Request or Reply key (`MPA ID Re`).
fn looks_like_mpa(data: &[u8]) -> bool {
    let key = b"MPA ID Re";
    data.len() >= key.len() && &data[..key.len()] == key
}

/// The decoded capture.
#[derive(Debug, Default)]
pub struct PcapDecoded {
    /// Records in output order.
    pub records: Vec<Record>,
    /// Whether any record reports an error (malformed or incomplete input).
    pub failed: bool,
    /// TCP connections found.
    pub connections: usize,
    /// Of those, connections that begin with MPA startup frames (decoded).
    pub mpa_connections: usize,
}

/// Decodes every iWARP connection of a pcap file. `Err` only if the file is not a pcap
/// file at all; everything else is reported as records.
pub fn decode_pcap(file: &[u8]) -> Result<PcapDecoded, PcapError> {
    let cap = parse(file)?;
    let mut out = PcapDecoded::default();
    let mut problems = Vec::new();
    if !matches!(cap.linktype, 1 | 101 | 113 | 228 | 276) {
        problems.push(rec(json!({
            "kind": "error",
            "offset": 0,
            "message": format!(
                "link type {} is not supported (1 Ethernet, 113/276 Linux cooked, 101/228 raw IPv4)",
                cap.linktype
            ),
        })));
    }
    let conns = connections(&cap, &mut problems);
    out.connections = conns.len();
    // Time of each record relative to the first, in nanoseconds.
    let t0 = cap.frames.first().map_or(0, |f| f.time_ns);
    let times: Vec<f64> = cap
        .frames
        .iter()
        .map(|f| f.time_ns.saturating_sub(t0) as f64)
        .collect();
    for (i, c) in conns.iter().enumerate() {
        decode_conn(i, c, &times, &mut out);
    }
    if let Some(t) = &cap.truncated {
        problems.push(rec(json!({
            "kind": "error",
            "offset": 0,
            "message": format!("the capture file is cut short: {t}"),
        })));
    }
    out.records.extend(problems);
    out.failed = out
        .records
        .iter()
        .any(|r| r.get("kind").and_then(Value::as_str) == Some("error"));
    Ok(out)
}

/// Tags a record with its connection and direction, keeping `kind` and `offset` first.
fn tag(
    r: Record,
    conn: usize,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    dir: &str,
    packet: Option<u64>,
) -> Record {
    let mut m = Map::new();
    for k in ["kind", "offset"] {
        if let Some(v) = r.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    m.insert("conn".into(), json!(conn));
    m.insert("src".into(), json!(src.to_string()));
    m.insert("dst".into(), json!(dst.to_string()));
    m.insert("dir".into(), json!(dir));
    if let Some(p) = packet {
        m.insert("packet".into(), json!(p));
    }
    for (k, v) in r {
        if k != "kind" && k != "offset" {
            m.insert(k, v);
        }
    }
    m
}

struct Dir {
    src: SocketAddrV4,
    dst: SocketAddrV4,
    stream: Stream,
}

fn decode_conn(n: usize, c: &Conn, times: &[f64], out: &mut PcapDecoded) {
    let mut dirs = [
        Dir {
            src: c.a,
            dst: c.b,
            stream: reassemble(&c.ab),
        },
        Dir {
            src: c.b,
            dst: c.a,
            stream: reassemble(&c.ba),
        },
    ];
    let mpa = looks_like_mpa(&dirs[0].stream.data) || looks_like_mpa(&dirs[1].stream.data);
    let mut header = json!({
        "kind": "connection",
        "offset": 0,
        "conn": n,
        "a": c.a.to_string(),
        "b": c.b.to_string(),
        "packets_ab": c.ab.packets,
        "packets_ba": c.ba.packets,
        "octets_ab": dirs[0].stream.data.len(),
        "octets_ba": dirs[1].stream.data.len(),
        "mpa": mpa,
    });
    for (name, h) in [("ab", &c.ab), ("ba", &c.ba)] {
        if let Some(p) = h.fin {
            header[format!("fin_{name}")] = json!(p);
        }
        if let Some(p) = h.rst {
            header[format!("rst_{name}")] = json!(p);
        }
    }
    out.records.push(rec(header));
    if !mpa {
        return;
    }
    out.mpa_connections += 1;
    // Which direction holds the Request: the initiator's.
    let parse_frame = |d: &[u8]| match startup_frame::parse_with(d, &ParseOptions::new(None)) {
        Ok(Parsed::Frame { frame, .. }) => Some(frame),
        _ => None,
    };
    let f0 = parse_frame(&dirs[0].stream.data);
    let f1 = parse_frame(&dirs[1].stream.data);
    if matches!(&f1, Some(f) if f.kind == FrameKind::Request)
        && !matches!(&f0, Some(f) if f.kind == FrameKind::Request)
    {
        dirs.swap(0, 1);
    }
    let (req, rep) = {
        let a = parse_frame(&dirs[0].stream.data);
        let b = parse_frame(&dirs[1].stream.data);
        (a, b)
    };
    // FPDU modes (RFC 5044 7.1.1): markers toward a side that set M, CRC if either set C.
    let crc = req.as_ref().is_some_and(|f| f.flags.c) || rep.as_ref().is_some_and(|f| f.flags.c);
    let rejected = rep
        .as_ref()
        .is_some_and(|f| f.kind == FrameKind::Reply && f.flags.r);
    let modes = [
        rep.as_ref().map(|r| FpduMode {
            markers: r.flags.m,
            crc,
        }),
        req.as_ref().map(|r| FpduMode {
            markers: r.flags.m,
            crc,
        }),
    ];
    let mut merged: Vec<(u64, usize, Record)> = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let role = if i == 0 { "initiator" } else { "responder" };
        let s = &d.stream;
        let mut push = |r: Record, off: u64, seq: usize| {
            let packet = s.packet_at(off);
            merged.push((
                packet.unwrap_or(u64::MAX),
                seq,
                tag(r, n, d.src, d.dst, role, packet),
            ));
        };
        if !s.syn_seen && !s.data.is_empty() {
            push(
                rec(json!({
                    "kind": "note",
                    "offset": 0,
                    "message": "the SYN of this direction is not in the capture: its stream is taken to start at the lowest sequence number captured",
                })),
                0,
                0,
            );
        }
        let mut decoded = Decoded::default();
        if s.data.is_empty() {
            // Nothing sent (or captured) in this direction.
        } else if !looks_like_mpa(&s.data) {
            decoded.records.push(rec(json!({
                "kind": "error",
                "offset": 0,
                "message": format!(
                    "the {role}'s stream does not begin with an MPA {} (capture started mid-connection?)",
                    if i == 0 { "Request" } else { "Reply" }
                ),
            })));
        } else {
            let startup_len = match startup_frame::parse_with(&s.data, &ParseOptions::new(None)) {
                Ok(Parsed::Frame { consumed, .. }) => consumed,
                _ => s.data.len(),
            };
            let (input, mode, note) = match modes[i] {
                _ if rejected => (
                    &s.data[..],
                    FpduMode::default(),
                    (i == 1).then_some("the Reply rejects the connection (R set): no FPDU mode follows"),
                ),
                Some(m) => (&s.data[..], m, None),
                None => (
                    &s.data[..startup_len],
                    FpduMode::default(),
                    (s.data.len() > startup_len).then_some(
                        "the other direction's startup frame is missing: FPDU mode unknown, FPDUs not decoded",
                    ),
                ),
            };
            decoded = decode::decode(
                input,
                DecodeOptions {
                    startup: true,
                    mode,
                },
            );
            if rejected && s.data.len() > startup_len {
                decoded.records.retain(|r| {
                    r.get("offset").and_then(Value::as_u64).unwrap_or(0) < startup_len as u64
                });
                decoded.records.push(rec(json!({
                    "kind": "error",
                    "offset": startup_len,
                    "message": format!(
                        "{} octets follow the startup frame of a rejected connection",
                        s.data.len() - startup_len
                    ),
                })));
            } else if let Some(msg) = note {
                let kind = if s.data.len() > startup_len && modes[i].is_none() {
                    "error"
                } else {
                    "note"
                };
                decoded.records.push(rec(json!({
                    "kind": kind,
                    "offset": startup_len,
                    "message": msg,
                })));
            }
        }
        for r in decoded.records {
            let off = r.get("offset").and_then(Value::as_u64).unwrap_or(0);
            push(r, off, 1);
        }
        for &(off, pkt) in &s.conflicts {
            push(
                rec(json!({
                    "kind": "error",
                    "offset": off,
                    "message": format!(
                        "record {pkt} retransmits stream octets at offset {off} with different content than first captured"
                    ),
                })),
                off,
                2,
            );
        }
        if let Some((off, missing, pkt)) = s.gap {
            push(
                rec(json!({
                    "kind": "error",
                    "offset": off,
                    "gap": missing,
                    "message": format!(
                        "capture gap: {missing} octets missing at stream offset {off} (before record {pkt}); nothing after it is decoded"
                    ),
                })),
                off,
                3,
            );
        }
    }
    // Capture order (stable: within a record, initiator then responder, in stream order).
    merged.sort_by_key(|&(p, _, _)| p);
    out.records.extend(merged.into_iter().map(|(p, _, mut r)| {
        if let Some(t) = times.get(p.wrapping_sub(1) as usize) {
            r.insert("time".into(), json!(format!("{:.6}", t / 1e9)));
        }
        r
    }));
}

/// The record's 4-tuple and direction as text, for the readable listing.
pub fn render_text(r: &Record) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if r.get("kind").and_then(Value::as_str) == Some("connection") {
        let n = r.get("conn").and_then(Value::as_u64).unwrap_or(0);
        let mut line = format!("== connection {n}: {} <-> {}", s("a"), s("b"));
        for (k, v) in r {
            if !matches!(k.as_str(), "kind" | "offset" | "conn" | "a" | "b") {
                line.push_str(&format!(" {k}={v}"));
            }
        }
        return line;
    }
    if !r.contains_key("src") {
        return decode::render_text(r);
    }
    let mut inner = r.clone();
    let packet = inner.shift_remove("packet").and_then(|v| v.as_u64());
    for k in ["conn", "src", "dst", "dir", "time"] {
        inner.shift_remove(k);
    }
    format!(
        "#{:<5} {:>10} {} > {} {:<9} {}",
        packet.map_or("-".to_string(), |p| p.to_string()),
        s("time"),
        s("src"),
        s("dst"),
        s("dir"),
        decode::render_text(&inner)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian microsecond pcap of Ethernet frames.
    fn pcap_of(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for (i, fr) in frames.iter().enumerate() {
            f.extend_from_slice(&(i as u32).to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes());
            f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
            f.extend_from_slice(&(fr.len() as u32).to_le_bytes());
            f.extend_from_slice(fr);
        }
        f
    }

    /// An Ethernet/IPv4/TCP frame (checksums left zero: the reader does not check them).
    fn tcp_frame(src: u16, dst: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let total = (40 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
        f.extend_from_slice(&src.to_be_bytes());
        f.extend_from_slice(&dst.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn request() -> Vec<u8> {
        let mut r = b"MPA ID Req Frame".to_vec();
        r.extend_from_slice(&[0x10, 2, 0, 4, 0, 1, 0, 1]);
        r
    }

    #[test]
    fn not_pcap_files() {
        assert_eq!(decode_pcap(b"short").unwrap_err(), PcapError::Short(5));
        let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a];
        ng.resize(32, 0);
        assert!(decode_pcap(&ng).unwrap_err().to_string().contains("pcapng"));
        let e = decode_pcap(&[0x11; 24]).unwrap_err().to_string();
        assert!(e.contains("magic number 0x11111111"), "{e}");
    }

    #[test]
    fn byte_orders_and_nanoseconds() {
        let frames = vec![tcp_frame(1, 2, 100, 0x02, &[])];
        let le = pcap_of(&frames);
        let mut be = le.clone();
        // Swap every header field to big-endian, magic included.
        be[..4].copy_from_slice(&0xa1b2_3c4du32.to_be_bytes());
        be[4..6].copy_from_slice(&2u16.to_be_bytes());
        be[6..8].copy_from_slice(&4u16.to_be_bytes());
        be[16..20].copy_from_slice(&65535u32.to_be_bytes());
        be[20..24].copy_from_slice(&1u32.to_be_bytes());
        let n = frames[0].len() as u32;
        be[24..28].copy_from_slice(&7u32.to_be_bytes());
        be[28..32].copy_from_slice(&5u32.to_be_bytes());
        be[32..36].copy_from_slice(&n.to_be_bytes());
        be[36..40].copy_from_slice(&n.to_be_bytes());
        let c = parse(&be).unwrap();
        assert_eq!(c.linktype, 1);
        assert_eq!(c.frames.len(), 1);
        assert_eq!(c.frames[0].time_ns, 7_000_000_005);
        assert_eq!(parse(&le).unwrap().frames[0].data, &frames[0][..]);
        // A record cut short is reported, the ones before it kept.
        let cut = &le[..le.len() - 3];
        let c = parse(cut).unwrap();
        assert!(c.frames.is_empty());
        assert!(c.truncated.unwrap().contains("announced"));
    }

    #[test]
    fn reassembly_merges_overlaps_and_reports_gaps() {
        let req = request();
        let mut data = req.clone();
        data.extend_from_slice(&[0xab; 40]);
        let isn = 0xffff_fff0u32; // wraps
        let s = |off: usize, end: usize, n: u64| {
            (isn.wrapping_add(1 + off as u32), data[off..end].to_vec(), n)
        };
        let h = HalfCapture {
            isn: Some(isn),
            segments: vec![s(10, 30, 2), s(0, 12, 1), s(5, 25, 3), s(30, 64, 4)],
            ..Default::default()
        };
        let st = reassemble(&h);
        assert_eq!(st.data, data);
        assert!(st.gap.is_none() && st.conflicts.is_empty());
        assert_eq!(st.packet_at(0), Some(1));
        assert_eq!(st.packet_at(12), Some(3));
        assert_eq!(st.packet_at(25), Some(2));
        assert_eq!(st.packet_at(63), Some(4));
        let h = HalfCapture {
            isn: Some(isn),
            segments: vec![s(0, 12, 1), s(20, 64, 2)],
            ..Default::default()
        };
        let st = reassemble(&h);
        assert_eq!(st.data.len(), 12);
        assert_eq!(st.gap, Some((12, 8, 2)));
        let mut other = s(4, 8, 3);
        other.1 = vec![0; 4];
        let h = HalfCapture {
            isn: Some(isn),
            segments: vec![s(0, 12, 1), other],
            ..Default::default()
        };
        assert_eq!(reassemble(&h).conflicts, vec![(4, 3)]);
    }

    #[test]
    fn request_only_connection() {
        let frames = vec![
            tcp_frame(40000, 7174, 10, 0x02, &[]),
            tcp_frame(40000, 7174, 11, 0x18, &request()),
        ];
        let d = decode_pcap(&pcap_of(&frames)).unwrap();
        assert_eq!(d.mpa_connections, 1);
        assert!(!d.failed, "{:?}", d.records);
        assert_eq!(d.records[1]["kind"], "mpa_request");
        assert_eq!(d.records[1]["dir"], "initiator");
        assert_eq!(d.records[1]["packet"], 2);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn header(big: bool, nanos: bool, linktype: u32) -> Vec<u8> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut h = Vec::new();
        let put = |h: &mut Vec<u8>, v: u32| {
            h.extend_from_slice(&if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        };
        put(&mut h, magic);
        h.extend_from_slice(&[0, 2, 0, 4]);
        put(&mut h, 0);
        put(&mut h, 0);
        put(&mut h, 65535);
        put(&mut h, linktype);
        h
    }

    fn check(d: &PcapDecoded) -> Result<(), TestCaseError> {
        let mut saw_error = false;
        for r in &d.records {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
            prop_assert!(!kind.is_empty());
            saw_error |= kind == "error";
            let _ = render_text(r);
        }
        prop_assert_eq!(saw_error, d.failed);
        Ok(())
    }

    proptest! {
        /// Arbitrary bytes: an error or records, never a panic.
        #[test]
        fn arbitrary_files_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(d) = decode_pcap(&data) {
                check(&d)?;
            }
        }

        /// A valid file header followed by arbitrary records of every supported link type,
        /// with IPv4/TCP headers often well formed and payloads often starting like MPA.
        #[test]
        fn arbitrary_records_never_panic(
            big in any::<bool>(),
            nanos in any::<bool>(),
            linktype in prop_oneof![Just(1u32), Just(113), Just(276), Just(101), Just(228), Just(9)],
            frames in proptest::collection::vec(
                (any::<u16>(), any::<u32>(), any::<u8>(), 0usize..4, proptest::collection::vec(any::<u8>(), 0..120), any::<bool>()),
                0..24),
        ) {
            let mut f = header(big, nanos, linktype);
            for (port, seq, flags, which, junk, mpa) in frames {
                let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, (port & 1) as u8 + 2];
                let (sp, dp) = if port & 1 == 0 { (port | 1, 7174) } else { (7174, port) };
                ip.extend_from_slice(&sp.to_be_bytes());
                ip.extend_from_slice(&dp.to_be_bytes());
                ip.extend_from_slice(&(seq & 0xff).to_be_bytes());
                ip.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
                if mpa {
                    ip.extend_from_slice(b"MPA ID Re");
                }
                ip.extend_from_slice(&junk);
                let total = ip.len() as u16;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                let frame = match (linktype, which) {
                    (_, 3) => junk.clone(),
                    (1, _) => [vec![0; 12], vec![8, 0], ip].concat(),
                    (113, _) => [vec![0; 14], vec![8, 0], ip].concat(),
                    (276, _) => [vec![8, 0], vec![0; 18], ip].concat(),
                    _ => ip,
                };
                let cut = if which == 2 { frame.len() / 2 } else { frame.len() };
                let put = |f: &mut Vec<u8>, v: u32| {
                    f.extend_from_slice(&if big { v.to_be_bytes() } else { v.to_le_bytes() })
                };
                put(&mut f, 1);
                put(&mut f, 2);
                put(&mut f, cut as u32);
                put(&mut f, frame.len() as u32);
                f.extend_from_slice(&frame[..cut]);
            }
            let d = decode_pcap(&f).expect("a valid header parses");
            check(&d)?;
        }
    }
}
