#!/usr/bin/env bash
# Warm sandboxes (issue 7), measured as ratios in one run:
#  1. `Sandbox::exec` of /bin/true in a warm container-rung sandbox and
#     through the process rung, against a bare fork+exec, interleaved;
#  2. up + down of a container-rung sandbox (library acquire + dispose, and
#     `cordon sandbox up` + `down` with its keeper), against
#     `bwrap --unshare-all ... /bin/true` and a bare fork+exec;
#  3. `cordon sandbox gc` of 100 kept sandboxes whose keepers were killed
#     with SIGKILL, against an empty gc and removing as many empty cgroups;
#  4. (hyperfine) `cordon sandbox exec H -- /bin/true` through the keeper,
#     against `/usr/bin/env /bin/true`.
# 1-3 are crates/cordon-backend-local/benches/warm.rs, driving the release
# `cordon` built here. Needs root, bubblewrap and hyperfine.
# ROUNDS, UPDOWN_ROUNDS, GC_N and RUNS scale it; CORDON_STATE_DIR is the
# state directory the CLI parts use (default: a fresh one, removed after).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED warm-sandbox.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d)"
export CORDON_STATE_DIR="${CORDON_STATE_DIR:-$work/state}"
case "$CORDON_STATE_DIR" in /run/cordon*) echo "use a private CORDON_STATE_DIR" >&2; exit 2 ;; esac
cleanup() {
  "$cordon" sandbox down --scope bench --thread cli-exec >/dev/null 2>&1 || true
  "$cordon" sandbox gc >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

CORDON_BIN="$cordon" cargo bench --locked -q -p cordon-backend-local --bench warm

runs="${RUNS:-200}"
echo
echo "== cordon sandbox exec (through the keeper; hyperfine, $runs runs each)"
cp benches/sandbox/bench-policy.yaml "$work/bench-policy.yaml"
h="$("$cordon" sandbox up --scope bench --thread cli-exec --min-isolation container \
  --backend container --policy "$work/bench-policy.yaml")"
hyperfine -N --warmup 10 --runs "$runs" --export-markdown "$work/exec.md" \
  "/usr/bin/env /bin/true" \
  "$cordon sandbox exec $h -- /bin/true"
cat "$work/exec.md"
