#!/usr/bin/env bash
# The HTTP path (issue 17), measured in one run: exec of /bin/true in a warm
# container-rung sandbox through `cordon serve` (POST /v1/sandboxes/exec on
# loopback, keep-alive) against the library called directly on a host
# assembled as the server assembles its own (sandboxes kept, a keeper each,
# as `cordon serve` keeps them by default; the library without a keeper
# beside them), and execs per second through HTTP with 1, 2, 4 and 8
# clients (the kept library's beside it). State directories: fresh ones
# under /run, removed after.
# crates/cordon-cli/benches/serve_http.rs, driving the release `cordon`
# built here. Needs root. ROUNDS (500), SECONDS (3), REPEATS (3) and CLIENTS (1,2,4,8)
# scale it; extra arguments (`latency`, `throughput`) pick a part.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED serve-http.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli --bins
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
CORDON_BIN="$target/release/cordon" cargo bench --locked -q -p cordon-cli --bench serve_http -- "$@"
