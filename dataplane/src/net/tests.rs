//! Tests of Ethernet/ARP/IPv4/ICMP handling.

use super::*;
use crate::port::mem::{link, MemPort, WireConfig};
use proptest::prelude::*;
use smoltcp::wire::{TcpControl, TcpSeqNumber, TcpTimestampRepr};
use wire::tcp::segment_from_bytes;

const A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
const GW: Ipv4Address = Ipv4Address::new(10, 0, 0, 254);
const FAR: Ipv4Address = Ipv4Address::new(192, 168, 7, 5);

struct Pair {
    pa: MemPort,
    pb: MemPort,
    a: Net,
    b: Net,
}

fn cfg(port: &MemPort, addr: Ipv4Address) -> NetConfig {
    NetConfig {
        mac: port.mac(),
        addr,
        prefix_len: 24,
        gateway: None,
        mtu: port.mtu(),
    }
}

fn pair() -> Pair {
    let (pa, pb) = link(WireConfig::default(), WireConfig::default());
    let a = Net::new(cfg(&pa, A));
    let b = Net::new(cfg(&pb, B));
    Pair { pa, pb, a, b }
}

/// One frame into `net`, then its answers out of `port`, as the core does it.
fn rx<'a>(net: &mut Net, now: Instant, frame: &'a [u8], port: &mut MemPort) -> Rx<'a> {
    let r = net.on_frame(now, frame);
    net.transmit_replies(port);
    r
}

fn t(ms: i64) -> Instant {
    Instant::from_millis(ms)
}

/// Frames waiting at `p`, after flushing `from`.
fn frames(from: &mut MemPort, p: &mut MemPort) -> Vec<Vec<u8>> {
    from.flush();
    let mut out = Vec::new();
    while p.rx_burst(64, &mut |f: &[u8]| out.push(f.to_vec())) > 0 {}
    out
}

fn tuple() -> FourTuple {
    FourTuple {
        local_addr: A,
        local_port: 40000,
        remote_addr: B,
        remote_port: 3260,
    }
}

fn tcp_repr(payload: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        src_port: 40000,
        dst_port: 3260,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(1000),
        ack_number: Some(TcpSeqNumber(2000)),
        window_len: 512,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: Some(TcpTimestampRepr::new(5, 6)),
        payload,
    }
}

/// Resolves each side's MAC at the other (one ARP exchange).
fn resolved() -> Pair {
    let mut p = pair();
    assert_eq!(p.a.resolve(t(0), &mut p.pa, B), None);
    for f in frames(&mut p.pa, &mut p.pb) {
        assert_eq!(rx(&mut p.b, t(0), &f, &mut p.pb), Rx::Handled);
    }
    for f in frames(&mut p.pb, &mut p.pa) {
        assert_eq!(rx(&mut p.a, t(0), &f, &mut p.pa), Rx::Handled);
    }
    p
}

/// An Ethernet + IPv4 frame from `src` to `dst` carrying `payload` as `proto`.
fn ip_frame(
    dst_mac: EthernetAddress,
    src_mac: EthernetAddress,
    src: Ipv4Address,
    dst: Ipv4Address,
    proto: IpProtocol,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; ETH_LEN + IPV4_LEN + payload.len()];
    EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: proto,
        payload_len: payload.len(),
        hop_limit: 64,
    }
    .emit(
        &mut Ipv4Packet::new_unchecked(&mut f[ETH_LEN..]),
        &ChecksumCapabilities::default(),
    );
    f[ETH_LEN + IPV4_LEN..].copy_from_slice(payload);
    f
}

fn echo_request(ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::EchoRequest {
        ident,
        seq_no,
        data,
    };
    let mut icmp = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut Icmpv4Packet::new_unchecked(&mut icmp[..]),
        &ChecksumCapabilities::default(),
    );
    icmp
}

#[test]
fn arp_request_and_reply_between_two_nets() {
    let mut p = pair();
    assert_eq!(p.a.resolve(t(0), &mut p.pa, B), None);
    let req = frames(&mut p.pa, &mut p.pb);
    assert_eq!(req.len(), 1);
    let eth = EthernetFrame::new_checked(&req[0][..]).unwrap();
    assert!(eth.dst_addr().is_broadcast());
    assert_eq!(eth.ethertype(), EthernetProtocol::Arp);
    assert_eq!(rx(&mut p.b, t(1), &req[0], &mut p.pb), Rx::Handled);
    // B learnt A from the request.
    assert_eq!(p.b.arp_lookup(t(1), A), Some(p.pa.mac()));
    let reply = frames(&mut p.pb, &mut p.pa);
    assert_eq!(reply.len(), 1);
    let eth = EthernetFrame::new_checked(&reply[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), p.pa.mac());
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(
        arp,
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_hardware_addr: p.pb.mac(),
            source_protocol_addr: B,
            target_hardware_addr: p.pa.mac(),
            target_protocol_addr: A,
        }
    );
    assert_eq!(rx(&mut p.a, t(2), &reply[0], &mut p.pa), Rx::Handled);
    assert_eq!(p.a.resolve(t(2), &mut p.pa, B), Some(p.pb.mac()));
    assert!(frames(&mut p.pa, &mut p.pb).is_empty(), "no second request");
    assert_eq!(p.a.stats().arp_requests_sent, 1);
    assert_eq!(p.b.stats().arp_replies_sent, 1);
    assert_eq!(p.a.stats().rx_arp, 1);
}

#[test]
fn arp_requests_are_rate_limited() {
    let mut p = pair();
    let r = p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(b"x"));
    assert_eq!(r, Err(SendTcpError::Unresolved));
    assert_eq!(
        p.a.send_tcp(t(50), &mut p.pa, &tuple(), &tcp_repr(b"x")),
        Err(SendTcpError::Unresolved)
    );
    assert_eq!(frames(&mut p.pa, &mut p.pb).len(), 1);
    assert_eq!(p.a.resolve(t(100), &mut p.pa, B), None);
    assert_eq!(frames(&mut p.pa, &mut p.pb).len(), 1);
    assert_eq!(p.a.stats().arp_requests_sent, 2);
    assert_eq!(p.a.stats().tx_unresolved, 2);
}

/// A's ARP request goes to B, B's reply comes back to A at `at` (A's answers, held
/// segments among them, go out after it, as the core sends them after a burst).
fn arp_exchange(p: &mut Pair, at: Instant) {
    for f in frames(&mut p.pa, &mut p.pb) {
        assert_eq!(rx(&mut p.b, at, &f, &mut p.pb), Rx::Handled);
    }
    for f in frames(&mut p.pb, &mut p.pa) {
        assert_eq!(rx(&mut p.a, at, &f, &mut p.pa), Rx::Handled);
    }
}

/// A TCP segment from B (its real MAC) reaches A at `at`.
fn tcp_from_b(p: &mut Pair, at: Instant) {
    let mut seg = Vec::new();
    wire::tcp::segment_to_bytes(&tuple().reversed(), &tcp_repr(b"y"), &mut seg);
    let f = ip_frame(p.pa.mac(), p.pb.mac(), B, A, IpProtocol::Tcp, &seg);
    assert!(matches!(rx(&mut p.a, at, &f, &mut p.pa), Rx::Tcp { .. }));
}

#[test]
fn a_segment_to_an_unresolved_hop_is_held_and_sent_with_the_reply() {
    let mut p = pair();
    let first = tcp_repr(b"first");
    let mut latest = tcp_repr(b"the latest");
    latest.seq_number = TcpSeqNumber(1005);
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &tuple(), &first),
        Err(SendTcpError::Unresolved)
    );
    assert_eq!(p.a.held(), 1);
    // RFC 1122 2.3.2.2: the latest one is kept.
    assert_eq!(
        p.a.send_tcp(t(1), &mut p.pa, &tuple(), &latest),
        Err(SendTcpError::Unresolved)
    );
    assert_eq!(p.a.held(), 1);
    assert_eq!(p.a.stats().held_dropped, 1);
    arp_exchange(&mut p, t(2));
    assert_eq!(p.a.held(), 0);
    let got = frames(&mut p.pa, &mut p.pb);
    assert_eq!(got.len(), 1, "the held segment went out with the reply");
    let eth = EthernetFrame::new_checked(&got[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), p.pb.mac());
    assert_eq!(eth.src_addr(), p.pa.mac());
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.hop_limit(), TTL);
    match rx(&mut p.b, t(3), &got[0], &mut p.pb) {
        Rx::Tcp { src, dst, segment } => {
            // The checksum is checked here.
            assert_eq!(segment_from_bytes(src, dst, segment), Some(latest));
        }
        other => panic!("{other:?}"),
    }
    let s = p.a.stats();
    assert_eq!((s.tx_unresolved, s.held_sent, s.held_dropped), (2, 1, 1));
    // Resolved now, the same segment goes straight out: the held frame was the same,
    // octet for octet (DF, identification, TTL, both checksums).
    p.a.send_tcp(t(4), &mut p.pa, &tuple(), &latest).unwrap();
    let direct = frames(&mut p.pa, &mut p.pb);
    assert_eq!(direct, got);
}

/// An ARP reply from `ip`/`mac` to A (at `a_mac`).
fn arp_reply(ip: Ipv4Address, mac: EthernetAddress, a_mac: EthernetAddress) -> Vec<u8> {
    let mut f = vec![0u8; ETH_LEN + ARP_LEN];
    emit_arp(
        &EthernetRepr {
            src_addr: mac,
            dst_addr: a_mac,
            ethertype: EthernetProtocol::Arp,
        },
        &ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Reply,
            source_hardware_addr: mac,
            source_protocol_addr: ip,
            target_hardware_addr: a_mac,
            target_protocol_addr: A,
        },
        &mut f,
    );
    f
}

#[test]
fn the_neighbours_own_request_releases_the_held_segment() {
    let mut p = pair();
    let _ = p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(b"x"));
    // A's request is lost.
    frames(&mut p.pa, &mut p.pb);
    // B asks for A: A learns B from the request, answers, and sends the held segment.
    assert_eq!(p.b.resolve(t(1), &mut p.pb, A), None);
    for f in frames(&mut p.pb, &mut p.pa) {
        assert_eq!(rx(&mut p.a, t(1), &f, &mut p.pa), Rx::Handled);
    }
    let out = frames(&mut p.pa, &mut p.pb);
    assert_eq!(out.len(), 2, "the ARP reply, then the held segment");
    assert_eq!(
        EthernetFrame::new_checked(&out[0][..]).unwrap().ethertype(),
        EthernetProtocol::Arp
    );
    assert!(matches!(
        rx(&mut p.b, t(2), &out[1], &mut p.pb),
        Rx::Tcp { .. }
    ));
    assert_eq!(p.a.stats().held_sent, 1);
}

#[test]
fn a_segment_via_the_gateway_is_held_for_the_gateways_reply() {
    let (mut pa, mut pg) = link(WireConfig::default(), WireConfig::default());
    let mut c = cfg(&pa, A);
    c.gateway = Some(GW);
    let mut a = Net::new(c);
    let far = FourTuple {
        remote_addr: FAR,
        ..tuple()
    };
    assert_eq!(
        a.send_tcp(t(0), &mut pa, &far, &tcp_repr(b"far")),
        Err(SendTcpError::Unresolved)
    );
    pa.flush();
    while pg.rx_burst(64, &mut |_: &[u8]| {}) > 0 {}
    // A reply from another neighbour releases nothing.
    let other = EthernetAddress([2, 0, 0, 0, 0, 0x77]);
    assert_eq!(
        a.on_frame(t(1), &arp_reply(B, other, pa.mac())),
        Rx::Handled
    );
    assert_eq!(a.transmit_replies(&mut pa), 0);
    assert_eq!(a.held(), 1);
    let gw = pg.mac();
    assert_eq!(a.on_frame(t(2), &arp_reply(GW, gw, pa.mac())), Rx::Handled);
    assert_eq!(a.transmit_replies(&mut pa), 1);
    let out = frames(&mut pa, &mut pg);
    assert_eq!(out.len(), 1);
    let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), gw);
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(ip.dst_addr(), FAR);
    let seg = segment_from_bytes(A, FAR, &eth.payload()[IPV4_LEN..]);
    assert_eq!(seg, Some(tcp_repr(b"far")));
}

#[test]
fn a_held_segment_goes_before_a_later_one_when_the_entry_comes_back() {
    let mut p = resolved();
    let mac_b = p.pb.mac();
    // The entry has expired: the first segment is held and A asks again.
    let held = tcp_repr(b"older");
    assert_eq!(
        p.a.send_tcp(t(61_000), &mut p.pa, &tuple(), &held),
        Err(SendTcpError::Unresolved)
    );
    assert_eq!(frames(&mut p.pa, &mut p.pb).len(), 1, "the ARP request");
    // B's TCP traffic brings the entry back before any ARP reply.
    tcp_from_b(&mut p, t(61_100));
    let mut newer = tcp_repr(b"newer");
    newer.seq_number = TcpSeqNumber(1005);
    p.a.send_tcp(t(61_200), &mut p.pa, &tuple(), &newer)
        .unwrap();
    let out = frames(&mut p.pa, &mut p.pb);
    let segs: Vec<_> = out
        .iter()
        .map(|f| {
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(eth.dst_addr(), mac_b);
            segment_from_bytes(A, B, &eth.payload()[IPV4_LEN..]).unwrap()
        })
        .collect();
    assert_eq!(segs, vec![held, newer], "the older one first");
    assert_eq!(p.a.held(), 0);
    assert_eq!(p.a.stats().held_sent, 1);
    // The ARP reply coming late releases nothing more.
    assert_eq!(
        p.a.on_frame(t(61_300), &arp_reply(B, mac_b, p.pa.mac())),
        Rx::Handled
    );
    assert_eq!(p.a.transmit_replies(&mut p.pa), 0);
}

#[test]
fn released_segments_waiting_for_a_full_port_are_bounded() {
    let (mut pa, _pb) = link(
        WireConfig::default().with_capacity(1),
        WireConfig::default(),
    );
    let mut a = Net::new(cfg(&pa, A));
    let hop = |i: usize| Ipv4Address::new(10, 0, 0, 3 + i as u8);
    let mac = |i: usize| EthernetAddress([2, 0, 0, 0, 1, i as u8]);
    // The first ARP request takes the only slot; the port stays full.
    for i in 0..=ARP_HOLD_MAX {
        let to = FourTuple {
            remote_addr: hop(i % ARP_HOLD_MAX),
            ..tuple()
        };
        let _ = a.send_tcp(t(i as i64), &mut pa, &to, &tcp_repr(b"x"));
        assert_eq!(
            a.on_frame(
                t(i as i64),
                &arp_reply(hop(i % ARP_HOLD_MAX), mac(i), pa.mac())
            ),
            Rx::Handled
        );
        assert_eq!(a.transmit_replies(&mut pa), 0);
        // The entry just learnt is forgotten again, so the next round holds anew.
        a.remove_arp(hop(i % ARP_HOLD_MAX));
    }
    assert_eq!(a.released_queued(), ARP_HOLD_MAX);
    assert_eq!(a.held(), 0);
    assert_eq!(a.stats().held_dropped, 1, "one beyond the bound");
    assert_eq!(a.stats().held_sent, 0);
}

#[test]
fn a_held_segment_older_than_the_hold_time_is_dropped() {
    let mut p = pair();
    let _ = p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(b"old"));
    let late = Instant::from_millis(ARP_HOLD_TIME.total_millis() as i64);
    arp_exchange(&mut p, late);
    assert!(frames(&mut p.pa, &mut p.pb).is_empty());
    assert_eq!(p.a.held(), 0);
    let s = p.a.stats();
    assert_eq!((s.held_sent, s.held_dropped), (0, 1));
    // Just inside the hold time it goes.
    let mut p = pair();
    let _ = p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(b"young"));
    arp_exchange(&mut p, t(ARP_HOLD_TIME.total_millis() as i64 - 1));
    assert_eq!(frames(&mut p.pa, &mut p.pb).len(), 1);
    assert_eq!(p.a.stats().held_sent, 1);
}

#[test]
fn segments_are_held_for_at_most_arp_hold_max_hops() {
    let mut p = pair();
    let to = |i: usize| FourTuple {
        remote_addr: Ipv4Address::new(10, 0, 0, 3 + i as u8),
        ..tuple()
    };
    for i in 0..=ARP_HOLD_MAX {
        let r = p.a.send_tcp(t(0), &mut p.pa, &to(i), &tcp_repr(b"x"));
        assert_eq!(r, Err(SendTcpError::Unresolved));
    }
    assert_eq!(p.a.held(), ARP_HOLD_MAX);
    assert_eq!(p.a.stats().held_dropped, 1);
    // Once they are too old to send, a new one takes the room of all of them.
    let later = Instant::from_millis(ARP_HOLD_TIME.total_millis() as i64);
    let _ =
        p.a.send_tcp(later, &mut p.pa, &to(ARP_HOLD_MAX + 1), &tcp_repr(b"x"));
    assert_eq!(p.a.held(), 1);
    assert_eq!(p.a.stats().held_dropped, 1 + ARP_HOLD_MAX as u64);
}

#[test]
fn a_static_entry_drops_the_held_segment() {
    let mut p = pair();
    let _ = p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(b"x"));
    assert_eq!(p.a.held(), 1);
    let mac_b = p.pb.mac();
    p.a.insert_arp(B, mac_b);
    assert_eq!(p.a.held(), 0);
    assert_eq!(p.a.stats().held_dropped, 1);
    assert_eq!(p.a.transmit_replies(&mut p.pa), 0);
}

#[test]
fn send_tcp_parses_back_to_the_same_segment() {
    let mut p = resolved();
    let payload: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let repr = tcp_repr(&payload);
    p.a.send_tcp(t(3), &mut p.pa, &tuple(), &repr).unwrap();
    let got = frames(&mut p.pa, &mut p.pb);
    assert_eq!(got.len(), 1);
    let f = &got[0];
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(eth.dst_addr(), p.pb.mac());
    assert_eq!(eth.src_addr(), p.pa.mac());
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert!(ip.dont_frag());
    assert_eq!(ip.hop_limit(), TTL);
    assert!(ip.verify_checksum());
    match rx(&mut p.b, t(3), f, &mut p.pb) {
        Rx::Tcp { src, dst, segment } => {
            assert_eq!((src, dst), (A, B));
            assert_eq!(segment_from_bytes(src, dst, segment), Some(repr));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.a.stats().tx_tcp, 1);
    assert_eq!(p.b.stats().rx_tcp, 1);
}

#[test]
fn send_tcp_errors() {
    let mut p = resolved();
    let repr = tcp_repr(b"hello");
    let mut bad = tuple();
    bad.local_addr = Ipv4Address::new(10, 0, 0, 3);
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &bad, &repr),
        Err(SendTcpError::BadSource)
    );
    let mut far = tuple();
    far.remote_addr = FAR;
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &far, &repr),
        Err(SendTcpError::NoRoute)
    );
    let mut bcast = tuple();
    bcast.remote_addr = Ipv4Address::BROADCAST;
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &bcast, &repr),
        Err(SendTcpError::NoRoute)
    );
    let big = vec![0u8; 1500 - 20 - 32 + 1];
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(&big)),
        Err(SendTcpError::TooLarge)
    );
    let fits = vec![0u8; 1500 - 20 - 32];
    assert_eq!(
        p.a.send_tcp(t(0), &mut p.pa, &tuple(), &tcp_repr(&fits)),
        Ok(())
    );
    assert!(frames(&mut p.pa, &mut p.pb).iter().all(|f| f.len() == 1514));
    assert_eq!(p.a.stats().tx_failed, 4);

    // A full port.
    let (mut pa, _pb) = link(
        WireConfig::default().with_capacity(1),
        WireConfig::default(),
    );
    let mut a = Net::new(cfg(&pa, A));
    a.insert_arp(B, EthernetAddress([2, 0, 0, 0, 0, 9]));
    assert_eq!(a.send_tcp(t(0), &mut pa, &tuple(), &repr), Ok(()));
    assert_eq!(
        a.send_tcp(t(0), &mut pa, &tuple(), &repr),
        Err(SendTcpError::PortFull)
    );
}

#[test]
fn gateway_routes_off_link_destinations() {
    let (mut pa, mut pb) = link(WireConfig::default(), WireConfig::default());
    let mut a = Net::new(NetConfig {
        gateway: Some(GW),
        ..cfg(&pa, A)
    });
    assert_eq!(a.next_hop(FAR), Some(GW));
    assert_eq!(a.next_hop(B), Some(B));
    assert_eq!(a.next_hop(Ipv4Address::BROADCAST), None);
    let mut far = tuple();
    far.remote_addr = FAR;
    let repr = tcp_repr(b"x");
    assert_eq!(
        a.send_tcp(t(0), &mut pa, &far, &repr),
        Err(SendTcpError::Unresolved)
    );
    let req = frames(&mut pa, &mut pb);
    let eth = EthernetFrame::new_checked(&req[0][..]).unwrap();
    let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    let ArpRepr::EthernetIpv4 {
        target_protocol_addr,
        ..
    } = arp
    else {
        unreachable!()
    };
    assert_eq!(target_protocol_addr, GW);
    let gw_mac = EthernetAddress([2, 0, 0, 0, 0, 0xfe]);
    a.insert_arp(GW, gw_mac);
    assert_eq!(a.send_tcp(t(1), &mut pa, &far, &repr), Ok(()));
    let f = frames(&mut pa, &mut pb);
    let eth = EthernetFrame::new_checked(&f[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), gw_mac);
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(ip.dst_addr(), FAR);
}

#[test]
fn ping_gets_an_echo_reply() {
    let mut p = pair();
    let data = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let f = ip_frame(
        p.pb.mac(),
        p.pa.mac(),
        A,
        B,
        IpProtocol::Icmp,
        &echo_request(0x1234, 7, data),
    );
    assert_eq!(rx(&mut p.b, t(0), &f, &mut p.pb), Rx::Handled);
    let got = frames(&mut p.pb, &mut p.pa);
    assert_eq!(got.len(), 1);
    let eth = EthernetFrame::new_checked(&got[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), p.pa.mac());
    assert_eq!(eth.src_addr(), p.pb.mac());
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    let ip_repr = Ipv4Repr::parse(&ip, &ChecksumCapabilities::default()).unwrap();
    assert_eq!((ip_repr.src_addr, ip_repr.dst_addr), (B, A));
    assert_eq!(ip_repr.next_header, IpProtocol::Icmp);
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    let reply = Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::default()).unwrap();
    assert_eq!(
        reply,
        Icmpv4Repr::EchoReply {
            ident: 0x1234,
            seq_no: 7,
            data
        }
    );
    assert_eq!(p.b.stats().echo_replies_sent, 1);

    // A bad ICMP checksum is not answered.
    let mut icmp = echo_request(1, 1, data);
    icmp[10] ^= 0xff;
    let f = ip_frame(p.pb.mac(), p.pa.mac(), A, B, IpProtocol::Icmp, &icmp);
    assert_eq!(
        rx(&mut p.b, t(0), &f, &mut p.pb),
        Rx::Dropped(DropReason::BadChecksum)
    );
    // Nor is an echo reply.
    let mut icmp = echo_request(1, 1, data);
    icmp[0] = 0;
    Icmpv4Packet::new_unchecked(&mut icmp[..]).fill_checksum();
    let f = ip_frame(p.pb.mac(), p.pa.mac(), A, B, IpProtocol::Icmp, &icmp);
    assert_eq!(
        rx(&mut p.b, t(0), &f, &mut p.pb),
        Rx::Dropped(DropReason::UnsupportedIcmp)
    );
    assert!(frames(&mut p.pb, &mut p.pa).is_empty());
}

#[test]
fn drops_with_reasons() {
    let mut p = pair();
    let (ma, mb) = (p.pa.mac(), p.pb.mac());
    let seg = {
        let mut v = Vec::new();
        wire::tcp::segment_to_bytes(&tuple(), &tcp_repr(b"data"), &mut v);
        v
    };
    let good = ip_frame(mb, ma, A, B, IpProtocol::Tcp, &seg);
    assert!(matches!(
        rx(&mut p.b, t(0), &good, &mut p.pb),
        Rx::Tcp { segment, .. } if segment == &seg[..]
    ));
    let mut check_drop = |f: &[u8], r: DropReason| {
        assert_eq!(rx(&mut p.b, t(0), f, &mut p.pb), Rx::Dropped(r), "{f:02x?}");
    };
    // Other IPv4 destination, other MAC.
    let other = Ipv4Address::new(10, 0, 0, 9);
    check_drop(
        &ip_frame(mb, ma, A, other, IpProtocol::Tcp, &seg),
        DropReason::NotForUs,
    );
    let other_mac = EthernetAddress([2, 9, 9, 9, 9, 9]);
    check_drop(
        &ip_frame(other_mac, ma, A, B, IpProtocol::Tcp, &seg),
        DropReason::NotForUs,
    );
    // Bad IPv4 header checksum.
    let mut f = good.clone();
    f[ETH_LEN + 8] ^= 1;
    check_drop(&f, DropReason::BadChecksum);
    // A fragment.
    let mut f = good.clone();
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ETH_LEN..]);
        ip.set_more_frags(true);
        ip.fill_checksum();
    }
    check_drop(&f, DropReason::Fragment);
    // UDP, IPv6.
    check_drop(
        &ip_frame(mb, ma, A, B, IpProtocol::Udp, &[0; 8]),
        DropReason::UnsupportedProtocol,
    );
    let mut f = good.clone();
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    check_drop(&f, DropReason::UnsupportedEtherType);
    // Broadcast source, our own address as source.
    check_drop(
        &ip_frame(mb, ma, Ipv4Address::BROADCAST, B, IpProtocol::Tcp, &seg),
        DropReason::BadSource,
    );
    check_drop(
        &ip_frame(mb, ma, B, B, IpProtocol::Tcp, &seg),
        DropReason::BadSource,
    );
    // Truncated.
    check_drop(&good[..10], DropReason::Malformed);
    check_drop(&good[..ETH_LEN + 10], DropReason::Malformed);
    check_drop(&good[..good.len() - 1], DropReason::Malformed);
    // ARP about someone else.
    let mut arp = vec![0u8; ETH_LEN + ARP_LEN];
    EthernetRepr {
        src_addr: ma,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut arp[..]));
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: ma,
        source_protocol_addr: A,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: other,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut arp[ETH_LEN..]));
    check_drop(&arp, DropReason::NotForUs);
    let s = p.b.stats();
    assert_eq!(s.drop_not_for_us, 3);
    assert_eq!(s.drop_bad_checksum, 1);
    assert_eq!(s.drop_fragment, 1);
    assert_eq!(s.drop_unsupported, 2);
    assert_eq!(s.drop_bad_source, 2);
    assert_eq!(s.drop_malformed, 3);
    assert_eq!(s.rx_frames, 13);
    assert_eq!(
        p.b.arp_lookup(t(0), A),
        None,
        "ARP about others teaches nothing new"
    );
}

#[test]
fn arp_entries_expire_unless_refreshed() {
    let mut p = resolved();
    let mac_b = p.pb.mac();
    assert_eq!(p.a.arp_lookup(t(59_999), B), Some(mac_b));
    assert_eq!(p.a.arp_lookup(t(60_000), B), None);
    // Close to expiry, sending still works and asks again.
    assert_eq!(
        p.a.send_tcp(t(55_000), &mut p.pa, &tuple(), &tcp_repr(b"x")),
        Ok(())
    );
    let out = frames(&mut p.pa, &mut p.pb);
    assert_eq!(out.len(), 2);
    assert_eq!(p.a.stats().arp_requests_sent, 2);
    // B's TCP traffic refreshes A's entry for B.
    tcp_from_b(&mut p, t(58_000));
    assert_eq!(p.a.arp_lookup(t(100_000), B), Some(mac_b));
    assert_eq!(p.a.arp_lookup(t(118_000), B), None);
    // After expiry, sending asks again.
    assert_eq!(
        p.a.send_tcp(t(118_000), &mut p.pa, &tuple(), &tcp_repr(b"x")),
        Err(SendTcpError::Unresolved)
    );
}

#[test]
fn static_entries_stay() {
    let mut p = pair();
    let fixed = EthernetAddress([2, 0, 0, 0, 0, 0x42]);
    p.a.insert_arp(B, fixed);
    // B's ARP request for A carries B's real MAC, but the static entry wins.
    assert_eq!(p.b.resolve(t(0), &mut p.pb, A), None);
    for f in frames(&mut p.pb, &mut p.pa) {
        assert_eq!(rx(&mut p.a, t(0), &f, &mut p.pa), Rx::Handled);
    }
    assert_eq!(p.a.arp_lookup(t(1_000_000_000), B), Some(fixed));
    p.a.remove_arp(B);
    assert_eq!(p.a.arp_lookup(t(0), B), None);
}

#[test]
fn arp_replies_wait_for_port_room_and_beyond_the_queue_are_dropped() {
    let (mut pa, mut pb) = link(
        WireConfig::default(),
        WireConfig::default().with_capacity(1),
    );
    let mut a = Net::new(cfg(&pa, A));
    let mut b = Net::new(cfg(&pb, B));
    a.resolve(t(0), &mut pa, B);
    let request = frames(&mut pa, &mut pb).pop().expect("an ARP request");
    // Fill B's transmit side: the answers wait in B's queue, up to REPLY_QUEUE_MAX.
    assert!(pb.tx(60, &mut |_: &mut [u8]| {}));
    for _ in 0..REPLY_QUEUE_MAX {
        assert_eq!(b.on_frame(t(0), &request), Rx::Handled);
        assert_eq!(b.transmit_replies(&mut pb), 0);
    }
    assert_eq!(b.replies_queued(), REPLY_QUEUE_MAX);
    assert_eq!(
        b.on_frame(t(0), &request),
        Rx::Dropped(DropReason::ReplyNotSent)
    );
    assert_eq!(b.stats().drop_reply_not_sent, 1);
    assert_eq!(b.stats().arp_replies_sent, 0);
    // Room again: the oldest answer goes first, one per free slot.
    frames(&mut pb, &mut pa);
    assert_eq!(b.transmit_replies(&mut pb), 1);
    assert_eq!(b.replies_queued(), REPLY_QUEUE_MAX - 1);
    let got = frames(&mut pb, &mut pa);
    assert_eq!(got.len(), 1);
    assert_eq!(rx(&mut a, t(0), &got[0], &mut pa), Rx::Handled);
    assert!(a.arp_lookup(t(0), B).is_some());
    assert_eq!(b.stats().arp_replies_sent, 1);
}

#[test]
fn prefix_lengths() {
    let (pa, _pb) = link(WireConfig::default(), WireConfig::default());
    let mut c = cfg(&pa, A);
    c.prefix_len = 0;
    assert!(Net::new(c).is_on_link(FAR));
    c.prefix_len = 32;
    assert!(!Net::new(c).is_on_link(B));
    assert!(Net::new(c).is_on_link(A));
    c.prefix_len = 200;
    assert!(!Net::new(c).is_on_link(B));
    c.prefix_len = 8;
    assert!(Net::new(c).is_on_link(Ipv4Address::new(10, 200, 1, 1)));
}

/// Valid frames of each kind, for mutation.
fn samples() -> Vec<Vec<u8>> {
    let (pa, pb) = link(WireConfig::default(), WireConfig::default());
    let (ma, mb) = (pa.mac(), pb.mac());
    let mut seg = Vec::new();
    wire::tcp::segment_to_bytes(&tuple(), &tcp_repr(b"payload"), &mut seg);
    let mut arp = vec![0u8; ETH_LEN + ARP_LEN];
    EthernetRepr {
        src_addr: ma,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut arp[..]));
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: ma,
        source_protocol_addr: A,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: B,
    }
    .emit(&mut ArpPacket::new_unchecked(&mut arp[ETH_LEN..]));
    vec![
        ip_frame(mb, ma, A, B, IpProtocol::Tcp, &seg),
        ip_frame(mb, ma, A, B, IpProtocol::Icmp, &echo_request(1, 2, b"ping")),
        arp,
    ]
}

proptest! {
    #[test]
    fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut p = pair();
        let _ = rx(&mut p.b, t(0), &bytes, &mut p.pb);
    }

    #[test]
    fn mutated_frames_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut f = samples()[which].clone();
        for (at, v) in edits {
            let n = f.len();
            f[at % n] = v;
        }
        let keep = f.len() - cut % 8;
        f.truncate(keep);
        let mut p = pair();
        if let Rx::Tcp { src, dst, segment } = rx(&mut p.b, t(0), &f, &mut p.pb) {
            prop_assert_eq!(dst, B);
            let _ = segment_from_bytes(src, dst, segment);
        }
        p.pb.flush();
        let mut replies = 0;
        while p.pa.rx_burst(8, &mut |_: &[u8]| replies += 1) > 0 {}
        prop_assert!(replies <= 1);
    }
}

/// A resolved pair whose ports have these emulated device features.
fn resolved_with(wire: WireConfig) -> Pair {
    let (pa, pb) = link(wire.clone(), wire);
    let a = Net::new(cfg(&pa, A));
    let b = Net::new(cfg(&pb, B));
    let mut p = Pair { pa, pb, a, b };
    assert_eq!(p.a.resolve(t(0), &mut p.pa, B), None);
    for f in frames(&mut p.pa, &mut p.pb) {
        rx(&mut p.b, t(0), &f, &mut p.pb);
    }
    for f in frames(&mut p.pb, &mut p.pa) {
        rx(&mut p.a, t(0), &f, &mut p.pa);
    }
    p
}

#[test]
fn zero_copy_frames_are_the_same_segments_with_or_without_checksum_offload() {
    // With or without the payload's sum known beforehand (from the records' sums).
    for (offload, known_sum) in [(false, false), (false, true), (true, false), (true, true)] {
        let wire = WireConfig::default()
            .with_zero_copy(true)
            .with_checksum_offload(offload);
        let mut p = resolved_with(wire);
        // A record holding two "FPDUs"; the segment carries the second.
        let record: proto::tcp::SharedRecord =
            std::sync::Arc::new((0..1700u32).map(|i| (i * 7) as u8).collect());
        let (offset, len) = (400, 1300);
        let repr = tcp_repr(&record[offset..offset + len]);
        let payload = crate::port::TxPayload {
            record: &record,
            offset,
            len,
        };
        let sum = known_sum.then(|| wire::tcp::checksum::data(repr.payload));
        p.a.send_tcp_record(t(3), &mut p.pa, &tuple(), &repr, Some(payload), sum)
            .unwrap();
        p.pa.flush();
        assert_eq!(
            std::sync::Arc::strong_count(&record),
            2,
            "the queued frame holds the record"
        );
        let got = frames(&mut p.pa, &mut p.pb);
        assert_eq!(
            std::sync::Arc::strong_count(&record),
            1,
            "released once sent"
        );
        assert_eq!(got.len(), 1);
        let s = p.pa.stats();
        assert_eq!(
            (s.tx_zero_copy, s.tx_checksum_offloaded),
            (1, u64::from(offload))
        );
        let ip = Ipv4Packet::new_checked(&got[0][ETH_LEN..]).unwrap();
        assert!(ip.verify_checksum());
        match rx(&mut p.b, t(3), &got[0], &mut p.pb) {
            Rx::Tcp { src, dst, segment } => {
                // Checksum checked in software here, whatever the port did.
                assert_eq!(
                    segment_from_bytes(src, dst, segment),
                    Some(repr),
                    "{offload}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn small_or_odd_payloads_and_missing_records_are_copied() {
    let mut p = resolved_with(WireConfig::default().with_zero_copy(true));
    let record: proto::tcp::SharedRecord = std::sync::Arc::new(vec![3; 2000]);
    for (offset, len, with_record) in [
        (0, ZERO_COPY_MIN_PAYLOAD - 2, true), // too small to be worth a second buffer
        (0, 1001, true),                      // odd: a device may sum buffers word-wise
        (0, 1000, false),                     // no record
    ] {
        let repr = tcp_repr(&record[offset..offset + len]);
        let payload = with_record.then_some(crate::port::TxPayload {
            record: &record,
            offset,
            len,
        });
        // The copied frame's checksum from the payload's known sum.
        let sum = Some(wire::tcp::checksum::data(repr.payload));
        p.a.send_tcp_record(t(3), &mut p.pa, &tuple(), &repr, payload, sum)
            .unwrap();
        let got = frames(&mut p.pa, &mut p.pb);
        match rx(&mut p.b, t(3), &got[0], &mut p.pb) {
            Rx::Tcp { src, dst, segment } => {
                assert_eq!(segment_from_bytes(src, dst, segment), Some(repr));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(p.pa.stats().tx_zero_copy, 0);
    // A payload that is not the segment's is never sent in its place.
    let other: proto::tcp::SharedRecord = std::sync::Arc::new(vec![9; 2000]);
    let repr = tcp_repr(&record[..1000]);
    let wrong = crate::port::TxPayload {
        record: &other,
        offset: 0,
        len: 1000,
    };
    p.a.send_tcp_record(t(3), &mut p.pa, &tuple(), &repr, Some(wrong), None)
        .unwrap();
    let got = frames(&mut p.pa, &mut p.pb);
    assert!(got[0].ends_with(&[3; 1000]));
    assert_eq!(p.pa.stats().tx_zero_copy, 0);
}

/// Sends `plan` (payload lengths; `None` is a pure ACK, anything else data with PSH) as
/// consecutive segments through `net`, then flushes the frame being gathered; returns the
/// segments the peer receives, parsed (checksums checked in software), and the segments
/// sent.
fn send_plan(
    p: &mut Pair,
    plan: &[Option<usize>],
    ack_change_at: Option<usize>,
) -> Vec<(u32, Vec<u8>, TcpControl)> {
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut seq = TcpSeqNumber(1000);
    let mut off = 0usize;
    for (i, step) in plan.iter().enumerate() {
        let len = step.unwrap_or(0);
        let mut repr = tcp_repr(&data[off..off + len]);
        repr.seq_number = seq;
        if step.is_none() {
            repr.control = TcpControl::None;
        }
        if ack_change_at.is_some_and(|k| i >= k) {
            repr.ack_number = Some(TcpSeqNumber(2500));
        }
        p.a.send_tcp_record(t(3), &mut p.pa, &tuple(), &repr, None, None)
            .unwrap();
        seq += len;
        off += len;
    }
    p.a.flush_tso(&mut p.pa);
    let got = frames(&mut p.pa, &mut p.pb);
    let mut out = Vec::new();
    for f in &got {
        match rx(&mut p.b, t(3), f, &mut p.pb) {
            Rx::Tcp { src, dst, segment } => {
                let r = segment_from_bytes(src, dst, segment).expect("checksums right");
                assert_eq!(r.timestamp, Some(TcpTimestampRepr::new(5, 6)));
                out.push((
                    (r.seq_number - TcpSeqNumber(1000)) as u32,
                    r.payload.to_vec(),
                    r.control,
                ));
            }
            other => panic!("{other:?}"),
        }
    }
    // Every octet once, in order.
    let mut all = Vec::new();
    for (s, payload, _) in &out {
        assert_eq!(*s as usize, all.len(), "contiguous");
        all.extend_from_slice(payload);
    }
    assert_eq!(all, data[..off]);
    out
}

#[test]
fn tso_cuts_exactly_the_segments_planned() {
    let wire = WireConfig::default().with_tso(true);
    let mut p = resolved_with(wire);
    // Five full segments, a short one (the last of its frame), three more full ones
    // (a frame of their own), a pure ACK (alone), two more.
    let mut plan = vec![Some(1400); 5];
    plan.push(Some(300));
    plan.extend([Some(1400); 3]);
    plan.push(None);
    plan.extend([Some(1000); 2]);
    let got = send_plan(&mut p, &plan, None);
    let lens: Vec<usize> = got.iter().map(|(_, d, _)| d.len()).collect();
    assert_eq!(
        lens,
        plan.iter().map(|s| s.unwrap_or(0)).collect::<Vec<_>>(),
        "each segment the device cut is one planned"
    );
    // PSH only on the last segment of each frame.
    let psh: Vec<bool> = got.iter().map(|(_, _, c)| *c == TcpControl::Psh).collect();
    assert_eq!(
        psh,
        [false, false, false, false, false, true, false, false, true, false, false, true]
    );
    let s = p.pa.stats();
    assert_eq!((s.tx_tso_frames, s.tx_tso_segments), (3, 11), "{s:?}");
    let n = p.a.stats();
    assert_eq!((n.tx_tso_frames, n.tx_tso_segments, n.tx_tcp), (3, 11, 12));
}

#[test]
fn tso_frames_break_where_headers_change_or_a_segment_is_longer() {
    let mut p = resolved_with(WireConfig::default().with_tso(true));
    // A longer segment cannot follow shorter ones in one frame; nor can one with
    // another acknowledgment number.
    let plan = [
        Some(500),
        Some(500),
        Some(900),
        Some(900),
        Some(900),
        Some(900),
    ];
    let got = send_plan(&mut p, &plan, Some(4));
    let lens: Vec<usize> = got.iter().map(|(_, d, _)| d.len()).collect();
    assert_eq!(lens, [500, 500, 900, 900, 900, 900]);
    assert_eq!(
        p.pa.stats().tx_tso_frames,
        3,
        "[500 500] [900 900] [900 900]"
    );
}

#[test]
fn a_lone_segment_goes_as_an_ordinary_offloaded_frame() {
    let mut p = resolved_with(WireConfig::default().with_tso(true));
    let got = send_plan(&mut p, &[Some(1200)], None);
    assert_eq!(got.len(), 1);
    let s = p.pa.stats();
    assert_eq!((s.tx_tso_frames, s.tx_checksum_offloaded), (0, 1), "{s:?}");
}

#[test]
fn without_tso_every_segment_is_its_own_frame() {
    let mut p = resolved_with(WireConfig::default().with_checksum_offload(true));
    let before = p.pa.stats().tx_frames; // the ARP request
    let got = send_plan(&mut p, &[Some(1400); 4], None);
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|(_, _, c)| *c == TcpControl::Psh));
    let s = p.pa.stats();
    assert_eq!((s.tx_tso_frames, s.tx_frames - before), (0, 4));
}

#[test]
fn a_full_port_abandons_the_frame_and_says_so() {
    // A wire with room for two frames: the TSO frame of four segments cannot be queued.
    let mut p = resolved_with(WireConfig::default().with_tso(true).with_capacity(2));
    let data = vec![7u8; 4 * 1400];
    let mut seq = TcpSeqNumber(1000);
    for k in 0..4 {
        let mut repr = tcp_repr(&data[k * 1400..(k + 1) * 1400]);
        repr.seq_number = seq;
        seq += 1400;
        p.a.send_tcp_record(t(3), &mut p.pa, &tuple(), &repr, None, None)
            .unwrap();
    }
    p.a.flush_tso(&mut p.pa);
    let s = p.a.stats();
    assert_eq!((s.tx_tcp, s.tx_failed, s.tx_tso_frames), (0, 4, 0), "{s:?}");
    assert_eq!(p.pa.stats().tx_dropped, 1);
    assert!(frames(&mut p.pa, &mut p.pb).is_empty());
}
