#!/usr/bin/env python3
"""Writes the synthetic pcap samples in this folder (gen-*.pcap), independently of the
project's Rust code: its own pcap writer, Ethernet/IPv4/TCP framing, CRC-32C, MPA startup
frames, markers and DDP/RDMAP headers. `tests/decode_pcap_cli.rs` checks what
`iwarp decode --pcap` makes of them.

    python3 tests/data/gen_pcaps.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

INIT = ("10.77.0.1", 41000)
RESP = ("10.77.0.2", 7174)
MAC_I = bytes.fromhex("020000770001")
MAC_R = bytes.fromhex("525400770002")


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def tcp_ip(src, dst, seq, ack, flags, payload=b"") -> bytes:
    """An IPv4 packet holding one TCP segment, with valid checksums."""
    hdr = struct.pack(">HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                      5 << 4, flags, 65535, 0, 0)
    pseudo = ip4(src[0]) + ip4(dst[0]) + struct.pack(">BBH", 0, 6, len(hdr) + len(payload))
    c = csum(pseudo + hdr + payload)
    hdr = hdr[:16] + struct.pack(">H", c) + hdr[18:]
    total = 20 + len(hdr) + len(payload)
    iph = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 1, 0x4000, 64, 6, 0, ip4(src[0]), ip4(dst[0]))
    iph = iph[:10] + struct.pack(">H", csum(iph)) + iph[12:]
    return iph + hdr + payload


def ether(src_mac, dst_mac, ip: bytes) -> bytes:
    return dst_mac + src_mac + b"\x08\x00" + ip


def sll(ip: bytes, outgoing: bool) -> bytes:
    # Linux cooked v1: packet type, ARPHRD_ETHER, address length, address (8), protocol
    return struct.pack(">HHH8sH", 4 if outgoing else 0, 1, 6, MAC_I + b"\0\0", 0x0800) + ip


def write_pcap(name, frames, linktype=1, big=False, nanos=False):
    e = ">" if big else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)
    for i, f in enumerate(frames):
        sec, frac = 1700000000 + i // 1000, (i % 1000) * (1000 if nanos else 1)
        out += struct.pack(e + "IIII", sec, frac, len(f), len(f)) + f
    with open(os.path.join(HERE, name), "wb") as fh:
        fh.write(out)


# ---------------------------------------------------------------- MPA / DDP / RDMAP

def startup(key: bytes, m=False, c=False, r=False, s=True, rev=2, ird=1, ord_=1, p2p=False, rtr=0):
    flags = (0x80 if m else 0) | (0x40 if c else 0) | (0x20 if r else 0) | (0x10 if s else 0)
    pd = b""
    if s:
        pd = struct.pack(">HH", (0x8000 if p2p else 0) | ird, rtr | ord_)
    return key + bytes([flags, rev]) + struct.pack(">H", len(pd)) + pd


def req(**kw):
    return startup(b"MPA ID Req Frame", **kw)


def rep(**kw):
    return startup(b"MPA ID Rep Frame", **kw)


def fpdu(ulpdu: bytes, pos: int, markers: bool, crc: bool) -> bytes:
    """One FPDU at stream position pos from the marker origin (RFC 5044 4-6)."""
    pad = (4 - (2 + len(ulpdu)) % 4) % 4
    content = struct.pack(">H", len(ulpdu)) + ulpdu + bytes(pad)
    out = bytearray()
    header = pos
    if markers and pos % 512 == 0:
        out += bytes(4)  # a marker right before the header points at it (FPDUPTR 0)
        header = pos + 4

    def emit(data):
        for b in data:
            p = pos + len(out)
            if markers and p % 512 == 0:
                out.extend(struct.pack(">HH", 0, p - header))
            out.append(b)

    emit(content)
    p = pos + len(out)
    if markers and p % 512 == 0:
        out.extend(struct.pack(">HH", 0, p - header))
    emit(struct.pack("<I", crc32c(bytes(out)) if crc else 0))  # as iSCSI and the MPA draft figures
    return bytes(out)


def send(msn, payload):
    return bytes([0x41, 0x43]) + struct.pack(">IIII", 0, 0, msn, 0) + payload


def read_req(msn, sink_stag, sink_to, size, src_stag, src_to):
    return bytes([0x41, 0x41]) + struct.pack(">IIII", 0, 1, msn, 0) + \
        struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to)


def tagged(opcode, stag, to, payload):
    return bytes([0xC1, 0x40 | opcode]) + struct.pack(">IQ", stag, to) + payload


def ping_data(n, size):
    head = f"rdma-ping-{n}: ".encode()
    c, body = 65 + n % 58, bytearray()
    while len(head) + len(body) < size - 1:
        body.append(c)
        c = 65 if c >= 122 else c + 1
    return head + bytes(body) + b"\0"


class Flow:
    """Both directions of one connection; segments are collected as (direction, seq, flags,
    payload) and turned into frames in the order they are listed."""

    def __init__(self, init=INIT, resp=RESP, isn_i=0x1000, isn_r=0xFFFFFF00):
        self.ep = [init, resp]
        self.isn = [isn_i, isn_r]
        self.next = [isn_i + 1, isn_r + 1]
        self.frames = []  # (direction, ip packet)

    def seg(self, d, seq, flags, payload=b""):
        other = 1 - d
        ip = tcp_ip(self.ep[d], self.ep[other], seq, self.next[other], flags, payload)
        self.frames.append((d, ip))

    def handshake(self):
        self.seg(0, self.isn[0], 0x02)
        self.seg(1, self.isn[1], 0x12)
        self.seg(0, self.next[0], 0x10)

    def data(self, d, payload, mss=1460):
        """Sends payload in MSS-sized segments; returns the (seq, payload) pieces."""
        pieces = []
        for i in range(0, len(payload), mss):
            p = payload[i:i + mss]
            self.seg(d, self.next[d], 0x18, p)
            pieces.append((self.next[d], p))
            self.next[d] += len(p)
        return pieces

    def fin(self):
        self.seg(0, self.next[0], 0x11)
        self.seg(1, self.next[1], 0x11)

    def eth(self):
        macs = [MAC_I, MAC_R]
        return [ether(macs[d], macs[1 - d], ip) for d, ip in self.frames]


class Mpa:
    """Tracks each direction's stream position from the marker origin."""

    def __init__(self, flow, markers=(False, False), crc=True):
        self.flow, self.markers, self.crc = flow, markers, crc
        self.pos = [0, 0]
        self.msn = [1, 1]

    def ulpdu(self, d, ulpdu, mss=1460, send_now=True):
        f = fpdu(ulpdu, self.pos[d], self.markers[d], self.crc)
        self.pos[d] += len(f)
        if send_now:
            self.flow.data(d, f, mss)
        return f


# ---------------------------------------------------------------- samples

def rping_exchange(m: Mpa, size=64, pings=2):
    """rping's messages, as the client (0) and server (1) send them."""
    for n in range(pings):
        m.ulpdu(0, send(m.msn[0], struct.pack(">QII", 0x7F0000001000, 0x11, size)))
        m.msn[0] += 1
        m.ulpdu(1, read_req(n + 1, 0x22, 0x7F0000002000, size, 0x11, 0x7F0000001000))
        m.ulpdu(0, tagged(2, 0x22, 0x7F0000002000, ping_data(n, size)))
        m.ulpdu(1, send(m.msn[1], bytes(16)))
        m.msn[1] += 1
        m.ulpdu(0, send(m.msn[0], struct.pack(">QII", 0x7F0000003000, 0x33, size)))
        m.msn[0] += 1
        m.ulpdu(1, tagged(0, 0x33, 0x7F0000003000, ping_data(n, size)))
        m.ulpdu(1, send(m.msn[1], bytes(16)))
        m.msn[1] += 1


def sample_crc_reordered():
    """CRC on, client-server; segments reordered, one duplicated, one retransmitted with a
    partial overlap; the responder's ISN wraps around 2^32; plus an ssh connection."""
    f = Flow()
    f.handshake()
    f.data(0, req(c=True))
    f.data(1, rep(c=True))
    m = Mpa(f, crc=True)
    rping_exchange(m, size=3000, pings=2)  # 3000 octets: each Write spans three segments
    f.fin()
    frames = f.frames
    # The initiator's whole stream, to cut a retransmission out of.
    start = f.isn[0] + 1
    stream = bytearray()
    for d, ip in frames:
        if d == 0 and len(ip) > 40:
            seq = struct.unpack(">I", ip[24:28])[0]
            assert seq - start == len(stream)
            stream += ip[40:]
    # Swap the first two data segments of the first Read Response, duplicate the third,
    # and add a retransmission that overlaps the end of one segment and the start of the
    # next (octets 1000..2460 of the Read Response's first segment onwards).
    idx = [i for i, (d, ip) in enumerate(frames) if d == 0 and len(ip) > 1000]
    first_seq = struct.unpack(">I", frames[idx[0]][1][24:28])[0]
    off = first_seq - start + 1000
    ov = tcp_ip(INIT, RESP, start + off, 0, 0x18, bytes(stream[off:off + 1460]))
    a, b = idx[0], idx[1]
    frames[a], frames[b] = frames[b], frames[a]
    frames.insert(idx[2] + 1, frames[idx[2]])
    frames.insert(idx[3] + 2, (0, ov))
    macs = [MAC_I, MAC_R]
    eth = [ether(macs[d], macs[1 - d], ip) for d, ip in frames]
    # An unrelated non-MPA TCP connection (ssh banner) in the middle.
    ssh = Flow(("10.77.0.1", 50000), ("10.77.0.2", 22), 5, 7)
    ssh.handshake()
    ssh.data(1, b"SSH-2.0-OpenSSH_9.2p1\r\n")
    eth[4:4] = ssh.eth()
    # An ARP frame, which is skipped.
    eth.insert(1, b"\xff" * 6 + MAC_I + b"\x08\x06" + bytes(28))
    write_pcap("gen-crc-reordered.pcap", eth)


def sample_markers_sll():
    """Markers both ways and CRC, big-endian nanosecond pcap, Linux cooked (SLL) frames,
    a 1500-octet Write so markers fall inside FPDUs, P2P with a Read RTR."""
    f = Flow(isn_i=0xFFFFFFF0)
    f.handshake()
    f.data(0, req(m=True, c=True, ird=4, ord_=4, p2p=True, rtr=0x4000))
    f.data(1, rep(m=True, c=True, ird=4, ord_=4, p2p=True, rtr=0x4000))
    m = Mpa(f, markers=(True, True), crc=True)
    # Read RTR: a zero-length RDMA Read Request, answered by a zero-length Read Response.
    m.ulpdu(0, read_req(1, 1, 0, 0, 1, 0))
    m.ulpdu(1, tagged(2, 1, 0, b""))
    m.ulpdu(0, send(1, struct.pack(">QII", 0x1000, 0x11, 1500)))
    m.ulpdu(1, tagged(0, 0x11, 0x1000, bytes(range(256)) * 5 + bytes(220)), mss=700)
    m.ulpdu(1, send(1, bytes(16)))
    f.fin()
    frames = [sll(ip, d == 0) for d, ip in f.frames]
    write_pcap("gen-markers-sll.pcap", frames, linktype=113, big=True, nanos=True)


def sample_gap():
    """A data segment of the responder is missing: the decoder must report a gap."""
    f = Flow()
    f.handshake()
    f.data(0, req())
    f.data(1, rep())
    m = Mpa(f, crc=False)
    m.ulpdu(0, send(1, bytes(16)))
    m.ulpdu(1, tagged(0, 0x33, 0x1000, bytes(3000)), mss=1000)
    m.ulpdu(1, send(1, bytes(16)))
    # drop the responder's second segment of the Write
    idx = [i for i, (d, ip) in enumerate(f.frames) if d == 1 and len(ip) > 500]
    del f.frames[idx[1]]
    write_pcap("gen-gap.pcap", f.eth(), big=True)


def sample_bad_crc():
    """CRC on; the second FPDU of the initiator has a wrong CRC."""
    f = Flow()
    f.handshake()
    f.data(0, req(c=True))
    f.data(1, rep(c=False))
    m = Mpa(f, crc=True)
    m.ulpdu(0, send(1, bytes(16)))
    bad = bytearray(m.ulpdu(0, send(2, b"x" * 20), send_now=False))
    bad[-1] ^= 0xFF
    f.data(0, bytes(bad))
    m.ulpdu(0, send(3, bytes(16)))
    write_pcap("gen-bad-crc.pcap", f.eth(), nanos=True)


def sample_reject():
    """A Request with M answered by a Reply with R (rejected), then FIN."""
    f = Flow()
    f.handshake()
    f.data(0, req(m=True))
    f.data(1, rep(r=True, ird=0, ord_=0))
    f.fin()
    write_pcap("gen-reject.pcap", f.eth())


if __name__ == "__main__":
    sample_crc_reordered()
    sample_markers_sll()
    sample_gap()
    sample_bad_crc()
    sample_reject()
