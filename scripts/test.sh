#!/usr/bin/env bash
# The one test command: installs what the build needs, then checks formatting, lints and
# runs every test of the workspace (unit, property, integration, the CLI, and bounded
# fuzz-corpus runs), and builds the benchmarks and fuzz targets.
#
#   scripts/test.sh            everything
#   FUZZ_SECONDS=60 scripts/test.sh   also run each cargo-fuzz target that long
#                                     (needs a nightly toolchain and cargo-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Debian packages the build needs. dpdk-sys binds DPDK 22.11 (libdpdk-dev, found through
# pkg-config) with bindgen (libclang-dev); the C++ compiler builds libFuzzer for the fuzz
# crate.
need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
command -v c++ >/dev/null || need_pkgs+=(g++)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
pkg-config --exists libdpdk 2>/dev/null || need_pkgs+=(libdpdk-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need_pkgs+=(libclang-dev)
# The DPDK port test builds a network namespace with veth pairs (ip netns, ip link); the
# hostile-peer test on DPDK turns a veth's checksum offload off (ethtool), keeps the SYN
# flood's source silent with a firewall rule (nft) and attacks from kernel sockets in Python.
command -v ip >/dev/null || need_pkgs+=(iproute2)
command -v ethtool >/dev/null || need_pkgs+=(ethtool)
command -v python3 >/dev/null || need_pkgs+=(python3)
command -v nft >/dev/null || need_pkgs+=(nftables)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  step "installing ${need_pkgs[*]}"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
  fi
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install a Rust toolchain (rustup) first" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy

step "cargo fmt --check"
cargo fmt --all -- --check

# The first command of the README, as a newcomer runs it: the default features, with no
# DPDK, no libclang and no pkg-config to be found, in a target directory of its own so that
# nothing built with DPDK can stand in for it. It must build, must not link DPDK, and must
# run the main job to a verified end.
step "the README's first command without DPDK (default features, pkg-config and libclang hidden)"
nodpdk_env=(env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG=/bin/false
  LIBCLANG_PATH=/nonexistent CARGO_TARGET_DIR="$PWD/target/no-dpdk")
"${nodpdk_env[@]}" cargo build --release --quiet
if cargo tree -e normal --prefix none | grep -q '^dpdk'; then
  echo "the default build depends on a DPDK crate:" >&2
  cargo tree -e normal --prefix none | grep '^dpdk' >&2
  exit 1
fi
if ldd target/no-dpdk/release/iwarp | grep -E 'librte_|libdpdk'; then
  echo "the default build links DPDK" >&2
  exit 1
fi
"${nodpdk_env[@]}" cargo run --release --quiet -- bench write-bw --verify -n 2000
if "${nodpdk_env[@]}" cargo run --release --quiet -- bench write-bw --config config/af_packet.toml \
  > target/no-dpdk/config.out 2>&1; then
  echo "a build without DPDK accepted --config" >&2
  exit 1
fi
grep -q -- "--features dpdk" target/no-dpdk/config.out || {
  echo "a build without DPDK does not say how to get it:" >&2
  cat target/no-dpdk/config.out >&2
  exit 1
}

# Everything else builds with every feature (DPDK included).
step "cargo clippy --all-targets --all-features -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test (workspace, all features)"
cargo test --workspace --all-features

step "the one-pass kernels over runs longer than 1 GiB (release build)"
cargo test --release -p fastpath --lib -- --include-ignored runs_over_one_gib

step "fault injection end to end, 256 MiB per case (release build)"
cargo test --release -p control --test e2e_faults -- --include-ignored --nocapture

step "hostile peers over the in-memory wire (release build)"
cargo test --release --test hostile -- --include-ignored --nocapture

step "hostile peers against iwarp serve on DPDK af_packet, from kernel sockets (release build; root)"
cargo test --release --features dpdk --test hostile_dpdk -- --include-ignored --nocapture

step "two iwarp processes on DPDK: af_packet over veth, tap bridged to af_packet, memif; two cores each over memif and af_packet; serve on two ports (release build; root)"
cargo test --release --features dpdk --test two_process -- --include-ignored --nocapture

step "iwarp bench smoke run (embedded default, every test, verified; the no-DPDK build)"
for t in write-bw read-bw send-bw; do
  "${nodpdk_env[@]}" cargo run --release --quiet -- bench "$t" -s 65536 -n 2000 --verify
  "${nodpdk_env[@]}" cargo run --release --quiet -- bench "$t" -a -n 20 --verify
done
for t in write-lat read-lat send-lat; do
  "${nodpdk_env[@]}" cargo run --release --quiet -- bench "$t" -s 8 -n 2000
done
# Several QPs over several cores, both directions.
"${nodpdk_env[@]}" cargo run --release --quiet -- bench write-bw -q 8 --cores 2 -b -s 65536 -n 500 --verify

step "interoperability with Linux siw (QEMU guest; its image is built once, about 5 min)"
# rping, perftest -R, the raw MPA probe and IRD/ORD negotiation against Linux soft-iWARP, in
# both directions (scripts/interop-siw.sh). Needs root and the peer harness (../shared/peer);
# SKIP_INTEROP=1 skips it outside CI.
if [ "${SKIP_INTEROP:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  echo "skipped (SKIP_INTEROP=1)"
elif [ "$(id -u)" != 0 ]; then
  if [ "${CI:-}" = true ]; then echo "CI must run as root: the siw interop needs it" >&2; exit 1; fi
  echo "skipped: needs root"
else
  scripts/interop-siw.sh
fi

step "cargo doc (no broken links, every public item documented)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet

step "benchmarks build"
cargo bench --workspace --all-features --no-run --quiet

step "fuzz targets build"
cargo check --manifest-path fuzz/Cargo.toml --bins --quiet

if [ "${FUZZ_SECONDS:-0}" -gt 0 ]; then
  step "cargo fuzz, ${FUZZ_SECONDS}s per target"
  command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
  # cargo fuzz needs nightly flags: a nightly toolchain if there is one, else the installed
  # toolchain with RUSTC_BOOTSTRAP=1. Either way a failure here fails the run.
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
  else
    echo "no nightly toolchain: running cargo fuzz on $(rustc --version) with RUSTC_BOOTSTRAP=1"
    fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
  fi
  targets=$("${fuzz[@]}" list)
  [ -n "$targets" ] || { echo "cargo fuzz list found no targets" >&2; exit 1; }
  for t in $targets; do
    "${fuzz[@]}" run "$t" -- -max_total_time="$FUZZ_SECONDS"
  done
fi

step "all checks passed"
