//! Describing a ULPDU (one DDP segment) for the wire decoder: its DDP header, RDMAP opcode
//! and the fields each opcode carries.

use serde_json::{json, Map, Value};
use wire::ddp::DdpHeader;
use wire::rdmap::{parse_segment, Body, TermError, Terminate};

use super::hex;

/// Payload octets shown in full; longer payloads are cut to this many.
const SHOWN_PAYLOAD: usize = 32;

/// The decoded fields of a ULPDU and, if it is malformed, an error record naming the
/// Terminate a receiver would send for it.
pub fn describe(ulpdu: &[u8]) -> (Value, Option<Value>) {
    let seg = match parse_segment(ulpdu) {
        Ok(seg) => seg,
        Err(e) => {
            let mut err = json!({
                "kind": "error",
                "message": format!("ULPDU does not parse as DDP/RDMAP: {e}"),
            });
            if let Some(t) = e.term_error() {
                err["term"] = term_json(&t);
            }
            return (json!({ "ddp_error": e.to_string() }), Some(err));
        }
    };
    let mut r = Map::new();
    r.insert("opcode".into(), json!(seg.opcode.name()));
    r.insert("last".into(), json!(seg.header.last()));
    match seg.header {
        DdpHeader::Tagged(h) => {
            r.insert("stag".into(), json!(format!("{:#010x}", h.stag)));
            r.insert("to".into(), json!(format!("{:#x}", h.to)));
        }
        DdpHeader::Untagged(h) => {
            r.insert("qn".into(), json!(h.qn));
            r.insert("msn".into(), json!(h.msn));
            r.insert("mo".into(), json!(h.mo));
        }
    }
    match seg.body {
        Body::RdmaWrite { data, .. } | Body::ReadResponse { data, .. } => payload(&mut r, data),
        Body::Send {
            data,
            invalidate_stag,
            solicited_event,
        } => {
            if let Some(s) = invalidate_stag {
                r.insert("invalidate_stag".into(), json!(format!("{s:#010x}")));
            }
            if solicited_event {
                r.insert("solicited_event".into(), json!(true));
            }
            payload(&mut r, data);
        }
        Body::ReadRequest(rr) => {
            r.insert("sink_stag".into(), json!(format!("{:#010x}", rr.sink_stag)));
            r.insert("sink_to".into(), json!(format!("{:#x}", rr.sink_to)));
            r.insert("read_size".into(), json!(rr.read_message_size));
            r.insert(
                "source_stag".into(),
                json!(format!("{:#010x}", rr.source_stag)),
            );
            r.insert("source_to".into(), json!(format!("{:#x}", rr.source_to)));
        }
        Body::Terminate { terminate, defect } => {
            terminate_fields(&mut r, &terminate);
            if let Some(d) = defect {
                r.insert("terminate_defect".into(), json!(d.to_string()));
            }
        }
    }
    if let Some(kind) = seg.rtr_kind() {
        r.insert("rtr".into(), json!(format!("{kind:?}").to_lowercase()));
    }
    (Value::Object(r), None)
}

fn payload(r: &mut Map<String, Value>, data: &[u8]) {
    r.insert("payload_len".into(), json!(data.len()));
    if !data.is_empty() {
        let shown = &data[..data.len().min(SHOWN_PAYLOAD)];
        let mut s = hex(shown);
        if data.len() > SHOWN_PAYLOAD {
            s.push_str("..");
        }
        r.insert("payload".into(), json!(s));
    }
}

fn term_json(t: &TermError) -> Value {
    let (layer, etype, code) = t.triple();
    json!({ "layer": layer, "etype": etype, "code": code, "error": t.to_string() })
}

fn terminate_fields(r: &mut Map<String, Value>, t: &Terminate) {
    r.insert("term".into(), term_json(&t.error));
    if let Some(len) = t.ddp_segment_length {
        r.insert("term_ddp_segment_length".into(), json!(len));
    }
    if let Some(h) = &t.ddp_header {
        r.insert("term_ddp_header".into(), json!(hex(&h.to_vec())));
    }
    if let Some(rr) = &t.rdmap_header {
        r.insert("term_rdmap_header".into(), json!(hex(&rr.to_bytes())));
    }
}
