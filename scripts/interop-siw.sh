#!/bin/bash
# Interoperability with Linux soft-iWARP (siw) in the QEMU peer of ../shared/peer
# (issue 5). Brings the peer up (building its image once, ~5 min), runs the matrix,
# tears everything down, exits non-zero on any failure and prints what failed.
#
#   scripts/interop-siw.sh                 # the whole matrix
#   KEEP_PEER=1 scripts/interop-siw.sh     # leave the peer up afterwards
#   CAPTURES=DIR scripts/interop-siw.sh    # keep one pcap per case (tcpdump in the guest)
#
# Our side runs as tests/interop_siw.rs: a DPDK net_af_packet port on the host side of the
# guest's tap (siwtap0, inside netns siwpeer) with its own address 10.77.0.3 (MAC
# 02:00:00:77:00:03); the kernel keeps 10.77.0.1 on the tap for the ssh command channel.
# Needs root, libdpdk-dev and libclang-dev.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${SIWPEER_DIR:-$ROOT/../shared/peer}
[ -x "$PEER/up.sh" ] || { echo "siw peer harness not found at $PEER (set SIWPEER_DIR)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 2; }
G() { "$PEER/guest.sh" "$@"; }
FAILED=()
T0=$(date +%s)

cleanup() {
    G 'pkill -x rping; pkill -x tcpdump' >/dev/null 2>&1 || true
    if [ "${KEEP_PEER:-0}" != 1 ]; then "$PEER/down.sh" || true; fi
}
trap cleanup EXIT

"$PEER/up.sh" || { echo "FAILED: peer did not come up" >&2; exit 1; }
(cd "$ROOT" && cargo test -q -p iwarp --test interop_siw --no-run) || exit 1

# siw knobs (module parameters of the patched guest module), restored to defaults per case.
siw_params() {
    G "cd /sys/module/siw/parameters && echo N > peer_to_peer && echo N > mpa_crc_required \
       && echo N > mpa_crc_strict && echo 2 > mpa_version && for kv in $*; do echo \${kv#*=} > \${kv%%=*}; done"
}

capture_start() {
    [ -n "${CAPTURES:-}" ] || return 0
    G 'rm -f /tmp/case.pcap; (setsid nohup tcpdump -i eth0 -s 0 -U -w /tmp/case.pcap tcp port 7174 >/dev/null 2>&1 &); sleep 1'
}
capture_stop() {
    [ -n "${CAPTURES:-}" ] || return 0
    mkdir -p "$CAPTURES"
    G 'sleep 1; pkill -INT -x tcpdump; sleep 1'
    G 'cat /tmp/case.pcap' > "$CAPTURES/$1.pcap"
    # Every capture must decode cleanly (CRC verdicts included).
    "$ROOT/target/debug/iwarp" decode --pcap "$CAPTURES/$1.pcap" > "$CAPTURES/$1.txt" \
        || FAILED+=("$1: iwarp decode --pcap found errors (see $CAPTURES/$1.txt)")
}

ours() { # ours ROLE MODE [COUNT SIZE]
    (cd "$ROOT" && IWARP_SIW_PEER=1 IWARP_SIW_ROLE=$1 IWARP_SIW_MODE=$2 \
        IWARP_SIW_COUNT=${3:-20} IWARP_SIW_SIZE=${4:-64} \
        timeout 180 cargo test -q -p iwarp --test interop_siw 2>&1)
}

# ---------------------------------------------------------------- 1. rping, we are the client
# siw's rping server reads into a buffer of its own -S size, so both ends use the same size.
for mode in crc nocrc p2p-write p2p-read; do
    for size in 64 4000; do
        name="rping-client-$mode-S$size"
        siw_params ""
        G 'pkill -x rping' >/dev/null 2>&1
        G --bg rping -s -P -a 10.77.0.2 -S "$size" >/dev/null
        sleep 2
        capture_start
        if out=$(ours client "$mode" 20 "$size"); then echo "ok   $name"; else
            echo "FAIL $name"; echo "$out" | tail -20; FAILED+=("$name"); fi
        capture_stop "$name"
        sleep 3  # our ephemeral port is always 49152: let the last 4-tuple's close finish
    done
done
G 'pkill -x rping' >/dev/null 2>&1

# ---------------------------------------------------------------- 1. rping, we are the server
# The guest's rping client with each siw initiator setting.
for params in "" "mpa_crc_required=Y" "peer_to_peer=Y" "peer_to_peer=Y mpa_crc_required=Y"; do
    name="rping-server-siw[${params:-default}]"
    siw_params "$params"
    capture_start
    ours server crc 20 64 > /tmp/iwarp-interop-server.log 2>&1 &
    srv=$!
    sleep 3
    if G 'timeout 120 rping -c -a 10.77.0.3 -C 20 -V -v' > /tmp/iwarp-interop-client.log 2>&1 \
        && wait $srv; then echo "ok   $name"; else
        echo "FAIL $name"; tail -5 /tmp/iwarp-interop-client.log; tail -20 /tmp/iwarp-interop-server.log
        FAILED+=("$name"); wait $srv 2>/dev/null; fi
    capture_stop "${name//[\[\] =]/_}"
done
siw_params ""

# ---------------------------------------------------------------- 2.-4. TODO (need the DPDK deployment, issue 4)
# TODO(issue 4): perftest -R against `iwarp bench ... --config FILE --peer 10.77.0.2`
#   and `iwarp serve --config FILE` against ib_{write,read,send}_bw -R in the guest.
# TODO(issue 4): probe_mpa.py --all pointed at our listener (`iwarp serve --config`),
#   every case answered as RFC 5044/6581 require.
# TODO: IRD/ORD matrix (needs an `--ird/--ord` knob in `iwarp rping`).

echo "interop-siw: $(( $(date +%s) - T0 )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all passed"
