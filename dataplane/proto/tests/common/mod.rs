//! Shared helpers for the startup state-machine tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use proto::startup::{
    AcceptParams, Established, Event, Failure, FpduMode, Initiator, InitiatorConfig, Output,
    Rejected, RequestReceived, Responder, ResponderConfig,
};
use wire::mpa::deframe::Deframer;
use wire::mpa::fpdu::Framer;

pub use wire::mpa::startup_frame::{REPLY_KEY, REQUEST_KEY};

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A startup frame: `key` then the hex octets from offset 16 on.
pub fn frame(key: &[u8; 16], rest: &str) -> Vec<u8> {
    let mut v = key.to_vec();
    v.extend(hex(rest));
    v
}

pub fn drain_i(m: &mut Initiator) -> Vec<Output> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

pub fn drain_r(m: &mut Responder) -> Vec<Output> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

pub fn sent(outs: &[Output]) -> Vec<u8> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send(b) => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

pub fn closes(outs: &[Output]) -> bool {
    outs.iter().any(|o| matches!(o, Output::Close))
}

pub fn failure(outs: &[Output]) -> Option<&Failure> {
    outs.iter().find_map(|o| match o {
        Output::Event(Event::Failed(f)) => Some(&**f),
        _ => None,
    })
}

pub fn established(outs: &[Output]) -> Option<&Established> {
    outs.iter().find_map(|o| match o {
        Output::Event(Event::Established(e)) => Some(&**e),
        _ => None,
    })
}

pub fn rejected(outs: &[Output]) -> Option<&Rejected> {
    outs.iter().find_map(|o| match o {
        Output::Event(Event::Rejected(e)) => Some(&**e),
        _ => None,
    })
}

pub fn request_received(outs: &[Output]) -> Option<&RequestReceived> {
    outs.iter().find_map(|o| match o {
        Output::Event(Event::RequestReceived(e)) => Some(&**e),
        _ => None,
    })
}

/// ULPDUs of the FPDUs in `bytes` (a transmit stream starting at its marker origin).
pub fn ulpdus(mode: FpduMode, bytes: &[u8]) -> Vec<Vec<u8>> {
    ulpdus_at(Deframer::new(mode), bytes)
}

pub fn ulpdus_at(mut d: Deframer, bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    d.push(bytes, |f| v.push(f.ulpdu.to_vec())).unwrap();
    assert_eq!(d.pending_octets(), 0, "trailing partial FPDU");
    v
}

/// One FPDU carrying `ulpdu`, framed from the marker origin.
pub fn fpdu(mode: FpduMode, ulpdu: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Framer::new(mode).frame(ulpdu, &mut out).unwrap();
    out
}

/// A Send message ULPDU with `payload` (QN 0, MSN `msn`, MO 0, L = 1).
pub fn send_ulpdu(msn: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = wire::rdmap::zero_length_send(msn);
    v.extend_from_slice(payload);
    v
}

pub const FIRST_MESSAGE: &[u8] = b"first ULP message";

/// Everything that happened in a run of an Initiator against a Responder.
#[derive(Debug, Default)]
pub struct Run {
    pub i_out: Vec<Output>,
    pub r_out: Vec<Output>,
    /// Octets the Initiator's dataplane sent after its Established (client-server: the
    /// first ULP message; peer-to-peer: one message after the RTR).
    pub i_dataplane_tx: Vec<u8>,
    /// Octets that reached the Responder's dataplane after the machine finished.
    pub r_dataplane_rx: Vec<u8>,
    /// Octets that reached the Initiator's dataplane after the machine finished.
    pub i_dataplane_rx: Vec<u8>,
}

impl Run {
    pub fn i_est(&self) -> &Established {
        established(&self.i_out).expect("initiator established")
    }
    pub fn r_est(&self) -> &Established {
        established(&self.r_out).expect("responder established")
    }
    /// Everything the Responder's dataplane receives: the handed-over octets, then those
    /// that arrived after the machine finished.
    pub fn r_rx_stream(&self) -> Vec<u8> {
        let mut v = self.r_est().rx_pending.clone();
        v.extend_from_slice(&self.r_dataplane_rx);
        v
    }
}

/// Runs the two machines against each other. `split` cuts every chunk of octets handed to
/// a machine into pieces. After the Initiator reports Established, its "dataplane" sends one
/// Send message with [`FIRST_MESSAGE`] using the handed-over framer.
pub fn run_pair(
    icfg: InitiatorConfig,
    rcfg: ResponderConfig,
    accept: AcceptParams,
    split: &mut dyn FnMut(&[u8]) -> Vec<Vec<u8>>,
) -> Run {
    let t0 = Instant::now();
    let mut i = Initiator::new(icfg, t0).expect("initiator config");
    let mut r = Responder::new(rcfg, t0).expect("responder config");
    let mut run = Run::default();
    let mut to_r: Vec<u8> = Vec::new();
    let mut to_i: Vec<u8> = Vec::new();
    let now = t0 + Duration::from_millis(1);
    for _ in 0..64 {
        let mut progress = false;
        let outs = drain_i(&mut i);
        progress |= !outs.is_empty();
        for o in &outs {
            match o {
                Output::Send(b) => to_r.extend_from_slice(b),
                Output::Event(Event::Established(e)) => {
                    let mut framer = e.framer();
                    let mut out = Vec::new();
                    framer
                        .frame(&send_ulpdu(e.tx_next_msn.send, FIRST_MESSAGE), &mut out)
                        .unwrap();
                    run.i_dataplane_tx.extend_from_slice(&out);
                    to_r.extend_from_slice(&out);
                }
                _ => {}
            }
        }
        run.i_out.extend(outs);
        if !to_r.is_empty() {
            progress = true;
            for piece in split(&std::mem::take(&mut to_r)) {
                // Once the machine is finished, octets belong to the dataplane.
                if r.state() == proto::startup::ResponderState::Finished {
                    run.r_dataplane_rx.extend_from_slice(&piece);
                } else {
                    r.on_data(&piece, now);
                }
            }
        }
        let outs = drain_r(&mut r);
        progress |= !outs.is_empty();
        let mut accept_now = false;
        for o in &outs {
            match o {
                Output::Send(b) => to_i.extend_from_slice(b),
                Output::Event(Event::RequestReceived(_)) => accept_now = true,
                _ => {}
            }
        }
        run.r_out.extend(outs);
        if accept_now {
            r.accept(accept.clone(), now).unwrap();
        }
        if !to_i.is_empty() {
            progress = true;
            for piece in split(&std::mem::take(&mut to_i)) {
                if i.state() == proto::startup::InitiatorState::Finished {
                    run.i_dataplane_rx.extend_from_slice(&piece);
                } else {
                    i.on_data(&piece, now);
                }
            }
        }
        if !progress {
            break;
        }
    }
    run
}

/// Delivers everything whole.
pub fn whole(b: &[u8]) -> Vec<Vec<u8>> {
    vec![b.to_vec()]
}

/// Delivers one octet at a time.
pub fn bytewise(b: &[u8]) -> Vec<Vec<u8>> {
    b.iter().map(|x| vec![*x]).collect()
}
