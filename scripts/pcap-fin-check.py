#!/usr/bin/env python3
"""Checks a capture for retransmitted FINs: prints each TCP connection's FINs and exits 1 if
any side sent its FIN more than once (its peer did not acknowledge it in time: a process
that exited without finishing the close handshake).

  pcap-fin-check.py CAPTURE.pcap [SRC_ADDR]

With SRC_ADDR only that address's FINs count. Ethernet (linktype 1) and Linux cooked (113)
captures, IPv4 only.
"""

import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        hdr = f.read(24)
        magic = struct.unpack("<I", hdr[:4])[0]
        end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        linktype = struct.unpack(end + "I", hdr[20:24])[0]
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, _ = struct.unpack(end + "IIII", rec)
            data = f.read(incl)
            if linktype == 1:
                if len(data) < 14 or data[12:14] != b"\x08\x00":
                    continue
                yield data[14:]
            elif linktype == 113:
                if len(data) < 16 or data[14:16] != b"\x08\x00":
                    continue
                yield data[16:]


def main():
    path = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else None
    fins = {}
    for ip in packets(path):
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        src = ".".join(str(b) for b in ip[12:16])
        dst = ".".join(str(b) for b in ip[16:20])
        tcp = ip[ihl:]
        if len(tcp) < 20:
            continue
        sport, dport, seq = struct.unpack("!HHI", tcp[:8])
        flags = tcp[13]
        if flags & 0x01 and (only is None or src == only):
            key = (src, sport, dst, dport)
            fins.setdefault(key, []).append(seq)
    bad = 0
    for (src, sport, dst, dport), seqs in sorted(fins.items()):
        again = len(seqs) - len(set(seqs))
        print(f"{src}:{sport} -> {dst}:{dport}: {len(seqs)} FIN(s), {again} retransmitted")
        bad += again
    if not fins:
        print("no FIN in the capture")
        sys.exit(1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
