#!/usr/bin/env python3
"""A hostile peer made of kernel TCP sockets (and raw SYNs), for tests/hostile_dpdk.rs.

Run inside the test's network namespace, against an `iwarp serve` on a DPDK port:

  hostile_peer.py syn-flood SRC DST PORT COUNT
      COUNT raw SYNs from SRC (the kernel's own address: it answers the SYN-ACKs with
      RSTs) with random source ports.
  hostile_peer.py stall DST PORT COUNT HOLD REQUEST_HEX
      COUNT connections: a third send nothing, a third half the Request, a third the
      whole Request; then wait HOLD seconds and report how many the server ended.
  hostile_peer.py slow DST PORT REQUEST_HEX
      one connection that sends the Request one octet per second until the server ends it.

Every command prints one JSON object on stdout. Nothing is sent anywhere but DST.
"""

import json
import os
import random
import resource
import select
import socket
import struct
import sys
import time


def checksum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def syn_flood(src: str, dst: str, port: int, count: int) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    sa, da = socket.inet_aton(src), socket.inet_aton(dst)
    rng = random.Random(5044)
    sent = 0
    start = time.monotonic()
    for _ in range(count):
        sport = rng.randrange(20000, 65000)
        seq = rng.getrandbits(32)
        # MSS 1460, then NOPs to a 4-octet boundary.
        opts = struct.pack("!BBH", 2, 4, 1460)
        off = (20 + len(opts)) // 4
        tcp = struct.pack("!HHIIBBHHH", sport, port, seq, 0, off << 4, 0x02, 65535, 0, 0) + opts
        pseudo = sa + da + struct.pack("!BBH", 0, 6, len(tcp))
        c = checksum(pseudo + tcp)
        tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, sa, da)
        try:
            s.sendto(ip + tcp, (dst, 0))
            sent += 1
        except OSError:
            time.sleep(0.001)
    return {"sent": sent, "seconds": time.monotonic() - start}


def open_many(dst: str, port: int, count: int) -> list:
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((dst, port))
        socks.append(s)
    return socks


def readable(s: socket.socket) -> bool:
    p = select.poll()
    p.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(0))


def ended(s: socket.socket) -> bool:
    """The server reset or closed the connection (EOF or an error)."""
    try:
        if not readable(s):
            return False
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def stall(dst: str, port: int, count: int, hold: float, request: bytes) -> dict:
    socks = open_many(dst, port, count)
    # Wait for the handshakes (poll: descriptors above 1024 are beyond select()).
    deadline = time.monotonic() + 30
    poller = select.poll()
    by_fd = {}
    for s in socks:
        poller.register(s, select.POLLOUT)
        by_fd[s.fileno()] = s
    connected = 0
    while by_fd and time.monotonic() < deadline:
        for fd, _ in poller.poll(500):
            s = by_fd.pop(fd, None)
            if s is None:
                continue
            poller.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                connected += 1
    for i, s in enumerate(socks):
        try:
            if i % 3 == 1:
                s.send(request[: len(request) // 2])
            elif i % 3 == 2:
                s.send(request)
        except OSError:
            pass
    start = time.monotonic()
    done = set()
    while time.monotonic() - start < hold:
        for i, s in enumerate(socks):
            if i not in done and ended(s):
                done.add(i)
        if len(done) == count:
            break
        time.sleep(0.1)
    last = time.monotonic() - start
    for s in socks:
        s.close()
    # How many of each third the server did not end: silent, half a Request, a Request.
    left = [0, 0, 0]
    for i in range(count):
        if i not in done:
            left[i % 3] += 1
    return {
        "opened": count,
        "connected": connected,
        "ended": len(done),
        "seconds": last,
        "left_by_kind": left,
    }


def slow(dst: str, port: int, request: bytes) -> dict:
    s = socket.create_connection((dst, port), timeout=10)
    s.setblocking(False)
    start = time.monotonic()
    sent = 0
    while sent < len(request):
        try:
            s.send(request[sent : sent + 1])
        except OSError:
            break
        sent += 1
        t = time.monotonic() + 1.0
        while time.monotonic() < t:
            if ended(s):
                return {"sent": sent, "of": len(request), "ended_after": time.monotonic() - start}
            time.sleep(0.05)
    # Sent it all without being cut off: wait a little longer for the verdict.
    t = time.monotonic() + 5
    while time.monotonic() < t:
        if ended(s):
            break
        time.sleep(0.05)
    return {"sent": sent, "of": len(request), "ended_after": time.monotonic() - start}


def scrape(host: str, port: int) -> dict:
    """GET /metrics from iwarp serve's exporter: the samples as {name: value}."""
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    samples = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name.split("{")[0]] = int(value)
    return {"status": head.split(b"\r\n")[0].decode(), "samples": samples}


def main() -> None:
    # Room for 10,000 sockets: raise the soft limit to the hard one (raising the hard
    # limit needs a privilege a container may not have).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "syn-flood":
        out = syn_flood(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "stall":
        out = stall(args[0], int(args[1]), int(args[2]), float(args[3]), bytes.fromhex(args[4]))
    elif cmd == "slow":
        out = slow(args[0], int(args[1]), bytes.fromhex(args[2]))
    elif cmd == "scrape":
        out = scrape(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
