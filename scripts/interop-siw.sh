#!/bin/bash
# Interoperability with Linux soft-iWARP (siw) in the QEMU peer of ../shared/peer
# (issue 5). Brings the peer up (building its image once, ~5 min), runs the matrix,
# tears everything down, exits non-zero on any failure and prints what failed.
#
#   scripts/interop-siw.sh                 # the whole matrix
#   KEEP_PEER=1 scripts/interop-siw.sh     # leave the peer up afterwards
#   CAPTURES=DIR scripts/interop-siw.sh    # keep one pcap per rping case (tcpdump in the guest)
#   ONLY="rping perftest probe irdord" scripts/interop-siw.sh   # a subset of the sections
#
# Our side is the `iwarp` binary with config/siw-peer.toml, run inside the peer's network
# namespace: a DPDK net_af_packet port on the host side of the guest's tap (siwtap0) with its
# own address 10.77.0.3 (MAC 02:00:00:77:00:03); the kernel keeps 10.77.0.1 on the tap for
# the ssh command channel. Needs root, libdpdk-dev and libclang-dev.
#
# Every case prints PASS or FAIL; a timing line and the list of failures close the run.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${SIWPEER_DIR:-$ROOT/../shared/peer}
[ -x "$PEER/up.sh" ] || [ -n "${SIWPEER_DIR:-}" ] || PEER=/work/shared/peer
NETNS=${SIWPEER_NETNS:-siwpeer}
CFG=$ROOT/config/siw-peer.toml
IWARP=$ROOT/target/debug/iwarp
ONLY=${ONLY:-rping perftest probe irdord}
[ -x "$PEER/up.sh" ] || { echo "siw peer harness not found at $PEER (set SIWPEER_DIR)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 2; }
G() { "$PEER/guest.sh" "$@"; }
OURS() { ip netns exec "$NETNS" "$IWARP" "$@"; }
FAILED=()
NPASS=0
T0=$(date +%s)
LOG=$(mktemp -d /tmp/interop-siw.XXXXXX)
want() { [[ " $ONLY " == *" $1 "* ]]; }
pass() { echo "PASS $1"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL $1${2:+: $2}"; FAILED+=("$1"); }

cleanup() {
    G 'pkill -x rping; pkill -x tcpdump; pkill -x ib_write_bw; pkill -x ib_read_bw; pkill -x ib_send_bw; pkill -x ib_write_lat; pkill -x ib_read_lat; pkill -x ib_send_lat' >/dev/null 2>&1 || true
    if [ "${KEEP_PEER:-0}" != 1 ]; then "$PEER/down.sh" || true; fi
}
trap cleanup EXIT

(cd "$ROOT" && cargo build -q --features dpdk --bin iwarp) || { echo "FAILED: build" >&2; exit 1; }
"$PEER/up.sh" >"$LOG/up.log" 2>&1 || { echo "FAILED: peer did not come up (see $LOG/up.log)" >&2; exit 1; }
echo "peer up after $(( $(date +%s) - T0 )) s; logs in $LOG"

# siw knobs (module parameters of the patched guest module), restored to defaults per case.
siw_params() {
    G "cd /sys/module/siw/parameters && echo N > peer_to_peer && echo N > mpa_crc_required \
       && echo N > mpa_crc_strict && echo 2 > mpa_version && for kv in $*; do echo \${kv#*=} > \${kv%%=*}; done"
}

# Captures (tcpdump in the guest): kept in CAPTURES when set; the rping client cases are
# always captured, to check the close handshake (below).
capture_start() {
    [ -n "${CAPTURES:-}" ] || [ "${1:-}" = always ] || return 0
    G 'rm -f /tmp/case.pcap; (setsid nohup tcpdump -i eth0 -s 0 -U -w /tmp/case.pcap tcp port 7174 or tcp port 18515 >/dev/null 2>&1 &); sleep 1'
}
capture_stop() {
    [ -n "${CAPTURES:-}" ] || [ "${2:-}" = always ] || return 0
    local dir=${CAPTURES:-$LOG/captures}
    mkdir -p "$dir"
    G 'sleep 1; pkill -INT -x tcpdump; sleep 1'
    G 'cat /tmp/case.pcap' > "$dir/$1.pcap"
    # Every capture must decode cleanly (CRC verdicts included).
    "$IWARP" decode --pcap "$dir/$1.pcap" > "$dir/$1.txt" \
        || fail "$1-decode" "iwarp decode --pcap found errors (see $dir/$1.txt)"
}

# ------------------------------------------------------------------ 1. rping, we are the client
# siw's rping server reads into a buffer of its own -S size, so both ends use the same size.
rping_client() { # NAME SIZE [our flags...]
    local name=$1 size=$2; shift 2
    G 'pkill -x rping' >/dev/null 2>&1
    G --bg rping -s -P -a 10.77.0.2 -S "$size" >/dev/null
    sleep 2
    capture_start always
    if timeout 120 ip netns exec "$NETNS" "$IWARP" rping -c -a 10.77.0.2 -C 20 -S "$size" -V \
        --config "$CFG" "$@" >"$LOG/$name.log" 2>&1 \
        && grep -q "^20 pings" "$LOG/$name.log"; then pass "$name"; else
        fail "$name" "$(tail -2 "$LOG/$name.log" | tr '\n' ' ')"; fi
    capture_stop "$name" always
    # Our client waited for the close handshake before it exited: siw's FIN went out once
    # (it was acknowledged; siw's connection did not stay in LAST-ACK retransmitting it).
    local dir=${CAPTURES:-$LOG/captures}
    if python3 "$ROOT/scripts/pcap-fin-check.py" "$dir/$name.pcap" 10.77.0.2 >"$LOG/$name.fins" 2>&1
    then pass "$name-clean-close"; else
        fail "$name-clean-close" "$(tr '\n' ' ' < "$LOG/$name.fins")"; fi
}
if want rping; then
    siw_params ""
    for size in 64 4000; do
        rping_client "rping-client-crc-S$size" "$size"
        rping_client "rping-client-nocrc-S$size" "$size" --no-crc
        rping_client "rping-client-p2p-write-S$size" "$size" --p2p write
        rping_client "rping-client-p2p-read-S$size" "$size" --p2p read
    done
    G 'pkill -x rping' >/dev/null 2>&1

    # ------------------------------------------------------------ 1. rping, we are the server
    # The guest's rping client with each siw initiator setting.
    for params in "" "mpa_crc_required=Y" "peer_to_peer=Y" "peer_to_peer=Y mpa_crc_required=Y"; do
        name="rping-server-siw[${params:-default}]"
        siw_params "$params"
        capture_start
        timeout 150 ip netns exec "$NETNS" "$IWARP" rping -s --config "$CFG" >"$LOG/srv.log" 2>&1 &
        srv=$!
        sleep 3
        if G 'timeout 120 rping -c -a 10.77.0.3 -C 20 -V -v' >"$LOG/cli.log" 2>&1 && wait $srv \
            && grep -q "^20 pings" "$LOG/srv.log"; then pass "$name"; else
            fail "$name" "$(tail -2 "$LOG/cli.log" "$LOG/srv.log" | tr '\n' ' ')"; wait $srv 2>/dev/null; fi
        capture_stop "${name//[\[\] =]/_}"
    done
    siw_params ""
fi

# ------------------------------------------------------------------ 2. perftest -R
# The #iterations column of both sides' result line must match -n.
# (pkill -x, not -f: a -f pattern would match the remote shell running it.)
PT_KILL='pkill -x ib_write_bw; pkill -x ib_read_bw; pkill -x ib_send_bw; pkill -x ib_write_lat; pkill -x ib_read_lat; pkill -x ib_send_lat'
PT_ARGS="-s 4096 -n 1000"
iters_of() { awk '/#bytes/ { getline; print $2; exit }' "$1"; }
# The log of siw's perftest server (guest /tmp/pt.log) once it has exited: it prints its
# figures when its last completion is in, which on a slow guest can come seconds after our
# client ends. Waits up to 30 s and says so if the server is still running then.
siw_server_log() {
    G "for i in \$(seq 30); do pgrep -x $1 >/dev/null || break; sleep 1; done; \
       cat /tmp/pt.log; if pgrep -x $1 >/dev/null; then echo 'siw $1 still running after 30 s'; fi"
}
if want perftest; then
    siw_params ""
    for t in write read send; do
        name="perftest-client-$t-bw"
        G "$PT_KILL; rm -f /tmp/pt.log; (setsid nohup ib_${t}_bw -R -d siw0 -F $PT_ARGS > /tmp/pt.log 2>&1 &)" >/dev/null 2>&1
        sleep 3
        timeout 120 ip netns exec "$NETNS" "$IWARP" bench "$t-bw" --perftest --config "$CFG" \
            --peer 10.77.0.2 $PT_ARGS >"$LOG/$name.ours" 2>&1
        rc=$?
        siw_server_log "ib_${t}_bw" >"$LOG/$name.siw" 2>&1
        a=$(iters_of "$LOG/$name.ours"); b=$(iters_of "$LOG/$name.siw")
        if [ $rc = 0 ] && [ "$a" = 1000 ] && [ "$b" = 1000 ]; then pass "$name (ours $a, siw $b)"; else
            fail "$name" "rc $rc, ours '$a', siw '$b': $(tail -1 "$LOG/$name.ours")"; fi
    done
    for t in write read send; do
        name="perftest-server-$t-bw"
        timeout 150 ip netns exec "$NETNS" "$IWARP" bench "$t-bw" --perftest --server --config "$CFG" \
            $PT_ARGS >"$LOG/$name.ours" 2>&1 &
        srv=$!
        sleep 3
        G "timeout 120 ib_${t}_bw -R -d siw0 -F $PT_ARGS 10.77.0.3" >"$LOG/$name.siw" 2>&1
        crc=$?
        wait $srv; rc=$?
        a=$(iters_of "$LOG/$name.ours"); b=$(iters_of "$LOG/$name.siw")
        if [ $rc = 0 ] && [ $crc = 0 ] && [ "$a" = 1000 ] && [ "$b" = 1000 ]; then pass "$name (ours $a, siw $b)"; else
            fail "$name" "rc $rc/$crc, ours '$a', siw '$b': $(tail -1 "$LOG/$name.ours")"; fi
    done
    # The latency tests: ping-pongs (write_lat: the server writes first; send_lat: the
    # client sends first) and read_lat (the client reads; its server prints nothing).
    # Both sides' #iterations must be -n and our t_min must be a positive latency.
    PT_LAT="-s 64 -n 1000"
    lat_ok() { awk '/#bytes/ { getline; exit !($2 == 1000 && $3 > 0) }' "$1"; }
    for t in write read send; do
        name="perftest-client-$t-lat"
        G "$PT_KILL; rm -f /tmp/pt.log; (setsid nohup ib_${t}_lat -R -d siw0 -F $PT_LAT > /tmp/pt.log 2>&1 &)" >/dev/null 2>&1
        sleep 3
        timeout 120 ip netns exec "$NETNS" "$IWARP" bench "$t-lat" --perftest --config "$CFG" \
            --peer 10.77.0.2 $PT_LAT >"$LOG/$name.ours" 2>&1
        rc=$?
        siw_server_log "ib_${t}_lat" >"$LOG/$name.siw" 2>&1
        # siw's read_lat server prints no figures.
        if [ $rc = 0 ] && lat_ok "$LOG/$name.ours" && { [ $t = read ] || lat_ok "$LOG/$name.siw"; }; then
            pass "$name ($(awk '/#bytes/ { getline; print "t_typical " $5 " usec"; exit }' "$LOG/$name.ours"))"; else
            fail "$name" "rc $rc: $(tail -2 "$LOG/$name.ours" | tr '\n' ' ') siw: $(tail -2 "$LOG/$name.siw" | tr '\n' ' ')"; fi
    done
    for t in write read send; do
        name="perftest-server-$t-lat"
        # Our write_lat server may write first only after the client's RTR (RFC 5044 7.1.2
        # rule 4): siw's client runs peer-to-peer for it.
        if [ $t = write ]; then siw_params peer_to_peer=Y; fi
        timeout 150 ip netns exec "$NETNS" "$IWARP" bench "$t-lat" --perftest --server --config "$CFG" \
            $PT_LAT >"$LOG/$name.ours" 2>&1 &
        srv=$!
        sleep 3
        G "timeout 120 ib_${t}_lat -R -d siw0 -F $PT_LAT 10.77.0.3" >"$LOG/$name.siw" 2>&1
        crc=$?
        wait $srv; rc=$?
        siw_params ""
        if [ $rc = 0 ] && [ $crc = 0 ] && lat_ok "$LOG/$name.siw" && { [ $t = read ] || lat_ok "$LOG/$name.ours"; }; then
            pass "$name"; else
            fail "$name" "rc $rc/$crc: $(tail -2 "$LOG/$name.ours" | tr '\n' ' ') siw: $(tail -2 "$LOG/$name.siw" | tr '\n' ' ')"; fi
    done
    # Without peer-to-peer, our write_lat server refuses the client with the reason (it
    # could not write first) instead of waiting forever.
    name="perftest-server-write-lat-refuses-without-rtr"
    timeout 150 ip netns exec "$NETNS" "$IWARP" bench write-lat --perftest --server --config "$CFG" \
        $PT_LAT >"$LOG/$name.ours" 2>&1 &
    srv=$!
    sleep 3
    G "timeout 60 ib_write_lat -R -d siw0 -F $PT_LAT 10.77.0.3" >"$LOG/$name.siw" 2>&1
    crc=$?
    wait $srv; rc=$?
    if [ $rc != 0 ] && [ $crc != 0 ] && grep -q "RFC 5044 7.1.2" "$LOG/$name.ours"; then pass "$name"; else
        fail "$name" "rc $rc/$crc: $(tail -2 "$LOG/$name.ours" | tr '\n' ' ')"; fi
fi

# ------------------------------------------------------------------ 3. the raw MPA probe
# probe_mpa.py runs in the guest against our persistent rping server: every case must be
# answered (a Reply, a close), the server must survive them all, and each answer must be
# the one docs/probe-mpa.md records.
if want probe; then
    siw_params ""
    G 'cat > /tmp/probe_mpa.py' < "$PEER/probe_mpa.py"
    timeout 400 ip netns exec "$NETNS" "$IWARP" rping -s -P --config "$CFG" >"$LOG/probe-srv.log" 2>&1 &
    srv=$!
    sleep 3
    G 'python3 /tmp/probe_mpa.py --netns "" --host 10.77.0.3 --all --json' >"$LOG/probe.json" 2>"$LOG/probe.err"
    # After the probe the server must still serve a real rping client.
    # (The guest's rdma_cm may still hold the probe's last ports: "Address already in use".)
    ok=0
    for try in 1 2 3; do
        if G 'timeout 60 rping -c -a 10.77.0.3 -C 3 -V' >"$LOG/probe-after.log" 2>&1; then ok=1; break; fi
        sleep 5
    done
    if [ $ok = 1 ]; then
        pass "probe-server-survives"; else fail "probe-server-survives" "$(tail -1 "$LOG/probe-after.log")"; fi
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    python3 "$ROOT/scripts/probe-check.py" "$LOG/probe.json" "$ROOT/docs/probe-mpa.md" >"$LOG/probe-check.txt" 2>&1
    while read -r verdict case rest; do
        if [ "$verdict" = PASS ]; then pass "probe-$case"; else fail "probe-$case" "$rest"; fi
    done < "$LOG/probe-check.txt"
fi

# ------------------------------------------------------------------ 4. IRD/ORD negotiation
# siw runs with what its MPA frame says (as Responder its Reply's IRD/ORD; as Initiator it
# takes IRD = our ORD and ORD = our IRD, drivers/infiniband/sw/siw/siw_cm.c), so both sides'
# values are checked from our side's report.
if want irdord; then
    siw_params ""
    # We are rping's client asking IRD a / ORD b; siw's rping server inherits them
    # (rdma_accept(id, NULL)): its Reply says IRD b, ORD a; we run with IRD a, ORD b.
    G 'pkill -x rping' >/dev/null 2>&1
    G --bg rping -s -P -a 10.77.0.2 >/dev/null
    sleep 2
    for pair in 1:1 2:8 8:2 16:16 64:32 128:128; do
        a=${pair%:*}; b=${pair#*:}
        name="irdord-rping-client-ird$a-ord$b"
        timeout 120 ip netns exec "$NETNS" "$IWARP" rping -c -a 10.77.0.2 -C 5 -V --ird "$a" --ord "$b" \
            --config "$CFG" >"$LOG/$name.log" 2>&1
        want_line="negotiated IRD $a ORD $b (peer's MPA frame: IRD $b ORD $a)"
        if grep -qF "$want_line" "$LOG/$name.log" && grep -q "^5 pings" "$LOG/$name.log"; then pass "$name"; else
            fail "$name" "wanted '$want_line', got '$(grep negotiated "$LOG/$name.log")' $(tail -1 "$LOG/$name.log")"; fi
    done
    G 'pkill -x rping' >/dev/null 2>&1
    # siw's ib_read_bw client asks IRD = ORD = n (-o n); we accept with at least IRD m and
    # at most ORD m: we run with IRD max(n, m), ORD min(n, m); siw with IRD = our ORD,
    # ORD = our IRD.
    for pair in 1:16 16:1 8:8 4:64 128:128; do
        n=${pair%:*}; m=${pair#*:}
        ird=$(( n > m ? n : m )); ord=$(( n < m ? n : m ))
        name="irdord-perftest-server-o$n-ours$m"
        timeout 150 ip netns exec "$NETNS" "$IWARP" bench read-bw --perftest --server --config "$CFG" \
            -s 4096 -n 200 --ird-ord "$m" >"$LOG/$name.ours" 2>&1 &
        srv=$!
        sleep 3
        G "timeout 120 ib_read_bw -R -d siw0 -F -s 4096 -n 200 -o $n 10.77.0.3" >"$LOG/$name.siw" 2>&1
        wait $srv; rc=$?
        want_line="test QP: IRD $ird ORD $ord (peer asked IRD $n ORD $n)"
        if [ $rc = 0 ] && grep -qF "$want_line" "$LOG/$name.ours" && [ "$(iters_of "$LOG/$name.siw")" = 200 ]; then
            pass "$name"; else fail "$name" "wanted '$want_line', got '$(grep 'test QP' "$LOG/$name.ours")'"; fi
    done
    # We are ib_read_bw's client asking IRD = ORD = m against siw's server asking n (-o n):
    # siw accepts with ORD min(n, m) and IRD max(n?, m) as its relaxed negotiation allows.
    for pair in 16:16 128:8 8:128 1:1; do
        n=${pair%:*}; m=${pair#*:}
        name="irdord-perftest-client-o$n-ours$m"
        G "$PT_KILL; rm -f /tmp/pt.log; (setsid nohup ib_read_bw -R -d siw0 -F -s 4096 -n 200 -o $n > /tmp/pt.log 2>&1 &)" >/dev/null 2>&1
        sleep 3
        timeout 120 ip netns exec "$NETNS" "$IWARP" bench read-bw --perftest --config "$CFG" \
            --peer 10.77.0.2 -s 4096 -n 200 --ird-ord "$m" >"$LOG/$name.ours" 2>&1
        rc=$?
        line=$(grep 'test QP' "$LOG/$name.ours")
        # Our ORD must not exceed what siw grants (its Reply's IRD), nor our IRD be below
        # its ORD; both must be within the cap.
        if [ $rc = 0 ] && python3 - "$line" "$m" <<'EOF'
import re, sys
m = re.search(r"IRD (\d+) ORD (\d+) \(peer answered IRD (\d+) ORD (\d+)\)", sys.argv[1])
ird, ord_, pird, pord = map(int, m.groups())
asked = int(sys.argv[2])
ok = ord_ <= pird and ird >= pord and ord_ == min(asked, pird) and max(ird, ord_, pird, pord) <= 128
sys.exit(0 if ok else 1)
EOF
        then pass "$name ($line)"; else fail "$name" "rc $rc: $line"; fi
    done
fi

echo "interop-siw: $NPASS passed, ${#FAILED[@]} failed in $(( $(date +%s) - T0 )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
fi
echo "all passed"
