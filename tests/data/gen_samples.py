#!/usr/bin/env python3
"""Writes the sample streams in this folder, independently of the project's Rust code
(its own CRC-32C and FPDU layout), so that decoding them cross-checks the decoder.

    python3 tests/data/gen_samples.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def fpdu(ulpdu: bytes, pos: int, markers: bool, crc: bool) -> bytes:
    """FPDU starting at stream position pos (from the marker origin)."""
    pad = (4 - (2 + len(ulpdu)) % 4) % 4
    content = struct.pack(">H", len(ulpdu)) + ulpdu + bytes(pad)
    out = bytearray()
    header = pos
    if markers and pos % 512 == 0:
        out += bytes(4)  # leading marker, FPDUPTR 0
        header = pos + 4

    def emit(data):
        for b in data:
            p = pos + len(out)
            if markers and p % 512 == 0:
                out.extend(struct.pack(">HH", 0, p - header))
            out.append(b)

    emit(content)
    p = pos + len(out)
    if markers and p % 512 == 0:  # marker right after the PAD: covered by the CRC
        out.extend(struct.pack(">HH", 0, p - header))
    value = crc32c(bytes(out)) if crc else 0
    emit(struct.pack("<I", value))
    return bytes(out)


def untagged(rdmap_opcode: int, qn: int, msn: int, mo: int, payload: bytes, last=True) -> bytes:
    ctrl = (0x40 if last else 0) | 0x01
    return bytes([ctrl, 0x40 | rdmap_opcode]) + struct.pack(">IIII", 0, qn, msn, mo) + payload


def tagged(rdmap_opcode: int, stag: int, to: int, payload: bytes, last=True) -> bytes:
    ctrl = 0x80 | (0x40 if last else 0) | 0x01
    return bytes([ctrl, 0x40 | rdmap_opcode]) + struct.pack(">IQ", stag, to) + payload


def write_hex(name: str, data: bytes, comment: str):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("# " + comment.replace("\n", "\n# ") + "\n")
        for i in range(0, len(data), 16):
            f.write(" ".join(f"{b:02x}" for b in data[i:i + 16]) + "\n")


def rping_initiator():
    req = b"MPA ID Req Frame" + bytes([0x50, 0x02]) + struct.pack(">H", 4) + bytes.fromhex("00010001")
    stream = bytearray()
    msgs = [
        # rping's buffer advertisement: buf address, rkey, size (network order)
        untagged(3, 0, 1, 0, struct.pack(">QII", 0x00007F0012340000, 0x1234, 64)),
        # RDMA Read Request: sink STag, sink TO, size, source STag, source TO
        untagged(1, 1, 1, 0, struct.pack(">IQIIQ", 0x5678, 0x7F0055550000, 64, 0x9ABC, 0x7F0066660000)),
        # RDMA Write of 64 octets of rping's pattern
        tagged(0, 0x9ABC, 0x7F0066660000, bytes((0x41 + i % 26) for i in range(64))),
    ]
    for m in msgs:
        stream += fpdu(m, len(stream), markers=False, crc=True)
    write_hex("rping-initiator.hex", req + bytes(stream),
              "Initiator half connection: MPA Request (Rev 2, C, S, IRD 1, ORD 1),\n"
              "then a Send, an RDMA Read Request and an RDMA Write, CRC on, markers off.\n"
              "iwarp decode --startup --crc --hex tests/data/rping-initiator.hex")


def draft_figures():
    def draft_send(msn):
        return bytes([0x40, 0x03]) + struct.pack(">IIII", 0, 0, msn, 0) + bytes(24)
    s = bytearray()
    s += fpdu(draft_send(1), 0, True, True)
    filler = bytes([0xEE]) * (0x1EC - len(s) - 6)
    s += fpdu(filler, len(s), True, True)
    assert len(s) == 0x1EC
    s += fpdu(draft_send(2), len(s), True, True)
    assert s[:0x34].hex().endswith("4c86b384"), s[:0x34].hex()
    assert s[-4:].hex() == "a19cd103", s[-4:].hex()
    write_hex("draft-figure5-6.hex", bytes(s),
              "draft-ietf-rddp-mpa-01 Figure 5, a 434-octet filler FPDU, Figure 6.\n"
              "Markers and CRC on; draft-era control bytes 40 03 (not RFC 5041/5040).\n"
              "iwarp decode --markers --crc --hex tests/data/draft-figure5-6.hex")


if __name__ == "__main__":
    rping_initiator()
    draft_figures()
