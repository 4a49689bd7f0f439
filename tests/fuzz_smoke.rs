//! A bounded run of the fuzz targets' bodies inside the normal test suite: pseudo-random
//! inputs and mutations of valid streams (the shipped samples, encoded frames), so every
//! parser sees both noise and near-valid input. `cargo fuzz` explores far further.

mod common;
use common::sample;

#[path = "../fuzz/bodies.rs"]
#[allow(dead_code)]
mod bodies;

use wire::mpa::fpdu::{FpduMode, Framer};

/// xorshift64*: deterministic, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Seeds: valid inputs for each target.
fn seeds() -> Vec<Vec<u8>> {
    let rping = sample("rping-initiator.hex");
    let figures = sample("draft-figure5-6.hex");
    let mut v = vec![rping.clone(), figures.clone(), rping[..24].to_vec()];
    // The ULPDUs inside the rping sample (after the 24-octet request and each 2-octet
    // ULPDU_Length), and a stream framed with markers.
    v.push(rping[26..26 + 34].to_vec());
    v.push(rping[66..66 + 46].to_vec());
    let mut framed = vec![0x03u8];
    let mut f = Framer::new(FpduMode {
        markers: true,
        crc: true,
    });
    for len in [10usize, 600, 40, 1200] {
        f.frame(&vec![0x41; len], &mut framed).unwrap();
    }
    v.push(framed);
    // TCP over IPv4: a data segment with the timestamp option, one in the Linux form
    // (two NOPs first), and a SYN with every option.
    let tuple = wire::tcp::FourTuple {
        local_addr: smoltcp::wire::Ipv4Address::new(10, 0, 0, 1),
        local_port: 40000,
        remote_addr: smoltcp::wire::Ipv4Address::new(10, 0, 0, 2),
        remote_port: 4791,
    };
    let mut r = wire::tcp::bare_repr(
        40000,
        4791,
        smoltcp::wire::TcpControl::Psh,
        smoltcp::wire::TcpSeqNumber(7),
    );
    r.ack_number = Some(smoltcp::wire::TcpSeqNumber(9));
    r.timestamp = Some(smoltcp::wire::TcpTimestampRepr::new(1, 2));
    r.payload = b"0123456789";
    let mut d = Vec::new();
    wire::tcp::ipv4_segment_to_bytes(&tuple, &r, 64, &mut d);
    let mut linux = d.clone();
    linux[40..52].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    // Its checksum again, so that the datagram parser takes it too.
    wire::tcp::checksum::fill_tcp(tuple.local_addr, tuple.remote_addr, &mut linux[20..]);
    let mut syn = r;
    syn.control = smoltcp::wire::TcpControl::Syn;
    syn.max_seg_size = Some(1460);
    syn.window_scale = Some(7);
    syn.sack_permitted = true;
    syn.payload = &[];
    let mut s = Vec::new();
    wire::tcp::ipv4_segment_to_bytes(&tuple, &syn, 64, &mut s);
    v.extend([d, linux, s]);
    v
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] = rng.next() as u8;
            }
            2 => d.truncate(rng.below(d.len() + 1)),
            3 => {
                let i = rng.below(d.len() + 1);
                d.insert(i, rng.next() as u8);
            }
            _ if d.len() > 1 => {
                let i = rng.below(d.len() - 1);
                d.remove(i);
            }
            _ => {}
        }
    }
    d
}

fn run(target: fn(&[u8]), rounds: usize) {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let seeds = seeds();
    for s in &seeds {
        target(s);
    }
    for _ in 0..rounds {
        let input = if rng.below(3) == 0 {
            let n = rng.below(700);
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            let s = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, s)
        };
        target(&input);
    }
}

#[test]
fn startup_frame_target_bounded_run() {
    run(bodies::startup_frame, 20_000);
}

#[test]
fn deframer_target_bounded_run() {
    run(bodies::deframer, 20_000);
}

#[test]
fn ddp_rdmap_target_bounded_run() {
    run(bodies::ddp_rdmap, 20_000);
}

#[test]
fn tcp_ipv4_target_bounded_run() {
    run(bodies::tcp_ipv4, 20_000);
}
