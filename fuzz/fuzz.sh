#!/usr/bin/env bash
# Fuzz the policy loader (needs a nightly toolchain and cargo-fuzz; not run in CI).
#   cargo install cargo-fuzz && rustup toolchain install nightly
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/load_policy
cp ../examples/policies/*.yaml corpus/load_policy/ 2>/dev/null || true
cargo +nightly fuzz run load_policy corpus/load_policy -- -max_total_time="${FUZZ_SECONDS:-300}"
