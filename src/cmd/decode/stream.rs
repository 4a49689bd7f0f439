//! `iwarp decode`: a wire decoder for one half connection of an iWARP byte stream.
//!
//! The stream optionally begins with an MPA Request or Reply (`--startup`); what follows is
//! in FPDU mode, whose marker origin is its first octet. Markers and CRC cannot be told from
//! one direction's bytes alone (markers are requested by the other side), so the caller says
//! them. Each FPDU is checked as a receiver would check it (CRC, markers), and its ULPDU is
//! decoded as DDP/RDMAP.
//!
//! Decoding is a pure function from bytes to [`Record`]s; printing is separate.

use serde_json::{json, Map, Value};
use wire::mpa::deframe::{CrcCheck, DeframeError, Deframer};
use wire::mpa::fpdu::FpduMode;
use wire::mpa::startup_frame::{self, FrameKind, ParseOptions, Parsed, StartupFrame};
use wire::mpa::MpaErrorCode;

use super::{hex, ulpdu};

/// How to read the stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeOptions {
    /// The stream begins with an MPA Request or Reply.
    pub startup: bool,
    /// FPDU mode of this half connection.
    pub mode: FpduMode,
}

/// One decoded item: a JSON object with at least `kind` and `offset`.
pub type Record = Map<String, Value>;

/// The result of decoding a whole stream.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Records in stream order.
    pub records: Vec<Record>,
    /// Whether any record is an error (malformed input).
    pub failed: bool,
}

impl Decoded {
    fn push(&mut self, r: Value) {
        if let Value::Object(m) = r {
            if m.get("kind").and_then(Value::as_str) == Some("error") {
                self.failed = true;
            }
            self.records.push(m);
        }
    }
}

/// Decodes one half connection's bytes.
pub fn decode(input: &[u8], opts: DecodeOptions) -> Decoded {
    let mut out = Decoded::default();
    let mut origin = 0usize;
    if opts.startup {
        match startup_frame::parse_with(input, &ParseOptions::new(None)) {
            Ok(Parsed::Frame { frame, consumed }) => {
                out.push(startup_record(&frame, consumed));
                origin = consumed;
            }
            Ok(Parsed::NeedMore(n)) => {
                out.push(json!({
                    "kind": "error",
                    "offset": 0,
                    "mpa_code": MpaErrorCode::InvalidStartupFrame.code(),
                    "message": format!(
                        "{}: startup frame truncated: {} octets, {} more needed",
                        MpaErrorCode::InvalidStartupFrame, input.len(), n
                    ),
                }));
                return out;
            }
            Err(e) => {
                out.push(json!({
                    "kind": "error",
                    "offset": 0,
                    "mpa_code": e.code().code(),
                    "message": e.to_string(),
                }));
                return out;
            }
        }
    }
    decode_fpdus(&input[origin..], origin, opts.mode, &mut out);
    out
}

fn startup_record(f: &StartupFrame, len: usize) -> Value {
    let kind = match f.kind {
        FrameKind::Request => "mpa_request",
        FrameKind::Reply => "mpa_reply",
        FrameKind::Rtr => "mpa_rtr",
    };
    let mut r = json!({
        "kind": kind,
        "offset": 0,
        "len": len,
        "rev": f.rev,
        "m": f.flags.m,
        "c": f.flags.c,
        "r": f.flags.r,
        "s": f.flags.s,
        "res": f.flags.res,
        "pd_length": f.pd_length(),
    });
    if let Some(e) = &f.enhanced {
        r["ird"] = json!(e.ird());
        r["ord"] = json!(e.ord());
        r["peer_to_peer"] = json!(e.is_peer_to_peer());
        r["rtr"] = json!(e
            .rtr()
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(","));
    }
    r["private_data"] = json!(hex(&f.private_data));
    r
}

fn decode_fpdus(data: &[u8], base: usize, mode: FpduMode, out: &mut Decoded) {
    let mut deframer = Deframer::new(mode);
    let mut records = Vec::new();
    let result = deframer.push(data, |f| {
        let mut r = json!({
            "kind": "fpdu",
            "offset": base as u64 + f.stream_offset,
            "ulpdu_len": f.ulpdu.len(),
            "crc": match f.crc { CrcCheck::Verified => "ok", CrcCheck::Unchecked => "unchecked" },
            "stream_offset": f.stream_offset,
            "wire_len": f.wire_len,
        });
        let (fields, err) = ulpdu::describe(f.ulpdu);
        if let (Value::Object(r), Value::Object(fields)) = (&mut r, fields) {
            r.extend(fields);
        }
        records.push(r);
        if let Some(e) = err {
            let mut e = e;
            e["offset"] = json!(base as u64 + f.stream_offset);
            records.push(e);
        }
    });
    for r in records {
        out.push(r);
    }
    match result {
        Ok(()) => {
            let pending = deframer.pending_octets();
            if pending > 0 {
                let at = deframer.stream_offset();
                out.push(json!({
                    "kind": "error",
                    "offset": base as u64 + at,
                    "stream_offset": at,
                    "message": format!("stream ends inside an FPDU: {pending} octets of it present"),
                }));
            }
        }
        Err(e) => {
            if let DeframeError::CrcMismatch {
                stream_offset,
                ulpdu_len,
                computed,
                received,
            } = e
            {
                out.push(json!({
                    "kind": "fpdu",
                    "offset": base as u64 + stream_offset,
                    "stream_offset": stream_offset,
                    "ulpdu_len": ulpdu_len,
                    "crc": "bad",
                    "crc_received": format!("{received:#010x}"),
                    "crc_computed": format!("{computed:#010x}"),
                }));
            }
            let at = match e {
                DeframeError::CrcMismatch { stream_offset, .. }
                | DeframeError::MarkerMismatch { stream_offset, .. } => stream_offset,
                DeframeError::Stopped(_) => deframer.stream_offset(),
            };
            out.push(json!({
                "kind": "error",
                "offset": base as u64 + at,
                "stream_offset": at,
                "mpa_code": e.code().code(),
                "message": format!("{e}; MPA delivers nothing more on this half connection"),
            }));
        }
    }
}

/// Renders a record as one human-readable line.
pub fn render_text(r: &Record) -> String {
    let offset = r.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("?");
    let mut line = format!("{offset:08x}  {kind:<12}");
    for (k, v) in r {
        if k == "kind" || k == "offset" {
            continue;
        }
        let v = match v {
            Value::String(s) if k == "message" => format!("\"{s}\""),
            Value::String(s) => s.clone(),
            // Flags read better as their letters.
            Value::Bool(true) if k.len() == 1 => k.to_uppercase(),
            Value::Bool(false) if k.len() == 1 => String::new(),
            Value::Number(n) if k == "res" && n.as_u64() == Some(0) => String::new(),
            other => other.to_string(),
        };
        if v.is_empty() {
            continue;
        }
        if k.len() == 1 && v.len() == 1 {
            line.push_str(&format!(" {v}"));
        } else {
            line.push_str(&format!(" {k}={v}"));
        }
    }
    line
}

/// Parses hex text: hex digit pairs, with white space, `:` and `-` separators and `#`
/// comments to the end of a line ignored.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let mut digits = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for (col, c) in line.char_indices() {
            if c.is_whitespace() || c == ':' || c == '-' {
                continue;
            }
            match c.to_digit(16) {
                Some(d) => digits.push(d as u8),
                None => {
                    return Err(format!(
                        "line {}, column {}: '{c}' is not a hex digit",
                        n + 1,
                        col + 1
                    ))
                }
            }
        }
    }
    if digits.len() % 2 != 0 {
        return Err(format!(
            "odd number of hex digits ({}): the last octet is incomplete",
            digits.len()
        ));
    }
    Ok(digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_parsing() {
        assert_eq!(
            parse_hex("00 0a:FF\n# c\n1-2 # x\n").unwrap(),
            vec![0, 10, 255, 0x12]
        );
        assert!(parse_hex("0g").unwrap_err().contains("column 2"));
        assert!(parse_hex("abc").unwrap_err().contains("odd"));
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bytes in any mode: no panic, every record has a kind and an offset
        /// inside the input, and the run fails exactly when an error record is present.
        #[test]
        fn decode_never_panics(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            startup in any::<bool>(),
            markers in any::<bool>(),
            crc in any::<bool>(),
        ) {
            let d = decode(&data, DecodeOptions { startup, mode: FpduMode { markers, crc } });
            let mut saw_error = false;
            for r in &d.records {
                let kind = r.get("kind").and_then(Value::as_str).unwrap();
                prop_assert!(["mpa_request", "mpa_reply", "mpa_rtr", "fpdu", "error"].contains(&kind));
                let off = r.get("offset").and_then(Value::as_u64).unwrap();
                prop_assert!(off as usize <= data.len());
                saw_error |= kind == "error";
                let _ = render_text(r);
            }
            prop_assert_eq!(saw_error, d.failed);
        }
    }
}
