//! `iwarp::rping` client against server over the in-memory wire, with validation.

use std::io::Write;
use std::sync::{Arc, Mutex};

use iwarp::rping::{self, RpingOptions, DEFAULT_PORT, MAX_SIZE, MIN_SIZE};

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn run(o: &RpingOptions) -> (String, String) {
    let mut client = Vec::new();
    let server = Shared::default();
    let (c, s) = rping::run_embedded(o, DEFAULT_PORT, &mut client, Box::new(server.clone()))
        .unwrap_or_else(|e| panic!("rping size {} count {}: {e}", o.size, o.count));
    assert_eq!(c.pings, o.count);
    assert_eq!(s.pings, o.count);
    assert_eq!((c.connections, s.connections), (1, 1));
    let server = String::from_utf8(server.0.lock().unwrap().clone()).unwrap();
    (String::from_utf8(client).unwrap(), server)
}

#[test]
fn sizes_and_counts_validated() {
    for (size, count) in [(MIN_SIZE, 3), (64, 20), (1000, 5), (4096, 4), (MAX_SIZE, 2)] {
        let o = RpingOptions {
            size,
            count,
            verbose: true,
            validate: true,
            ..Default::default()
        };
        let (client, server) = run(&o);
        let lines: Vec<&str> = client.lines().collect();
        assert_eq!(lines.len() as u64, count, "{client}");
        for (i, l) in lines.iter().enumerate() {
            let mut expect = vec![0u8; size];
            rping::fill_ping(&mut expect, i as u64);
            assert_eq!(*l, format!("ping data: {}", rping::ping_text(&expect)));
            assert_eq!(l.len(), "ping data: ".len() + size - 1);
        }
        let slines: Vec<&str> = server.lines().collect();
        assert_eq!(slines.len() as u64, count);
        assert!(slines[0].starts_with("server ping data: rdma-ping-0: ABC"));
    }
}

#[test]
fn quiet_without_verbose_and_other_mpa_modes() {
    use proto::rtr::{RtrType, RtrTypes};
    // Client-server without CRC, and peer-to-peer with each RTR siw can send or pick.
    let mut modes = Vec::new();
    let mut no_crc = RpingOptions::default();
    no_crc.initiator.crc = false;
    no_crc.responder.crc = false;
    modes.push(no_crc);
    for t in [RtrType::Write, RtrType::Read] {
        let mut p = RpingOptions::default();
        p.initiator.peer_to_peer = true;
        p.initiator.rtr_types = RtrTypes::NONE.with(t);
        modes.push(p);
    }
    let mut rev1 = RpingOptions::default();
    rev1.initiator.enhanced = false;
    modes.push(rev1);
    for mut o in modes {
        o.count = 3;
        o.validate = true;
        let (client, server) = run(&o);
        assert_eq!(client, "");
        assert_eq!(server, "");
    }
}
