#!/usr/bin/env bash
# Fork (issue 31), at the container rung under `cordon:default` (the
# README's `--min-isolation container`): a kept sandbox whose work dir
# holds 100 MiB in 1,000 files, forked into 4 (`cordon sandbox fork H
# --count 4`: a snapshot, then 4 sandboxes made from it) against `cp -a` of
# the same tree 4 times (what 4 independent copies cost), in one run: time
# (median of RUNS) and bytes written to the host's disk (the snapshot store
# and the forks' volumes, against the copies). A workspace's start
# (`run --workspace DIR`) against a copy of DIR into the sandbox is the
# same comparison, with no snapshot at all. Needs root. RUNS (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED fork.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
runs="${RUNS:-5}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d /var/tmp/cordon-bench-fork-XXXXXX)"
export CORDON_STATE_DIR="$work/state"
export CORDON_SNAPSHOT_DIR="$work/snapshots"
mkdir -m 700 "$CORDON_STATE_DIR"
h=""
cleanup() {
  "$cordon" sandbox down --scope bench-fork --thread t </dev/null >/dev/null 2>&1 || true
  for i in 1 2 3 4; do
    "$cordon" sandbox down --scope bench-fork --thread "f-$i" </dev/null >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

h="$("$cordon" sandbox up -q --scope bench-fork --thread t --min-isolation container </dev/null)"
"$cordon" sandbox exec "$h" -- /bin/sh -c 'mkdir -p tree && i=0; while [ $i -lt 1000 ]; do head -c 104857 /dev/urandom > tree/f$i; i=$((i+1)); done' </dev/null
host_work="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['host_work_dir']['host'])" "$CORDON_STATE_DIR/sandboxes/$h.json")"
echo "== the source: $(du -sm "$host_work/tree" | cut -f1) MiB in $(find "$host_work/tree" -type f | wc -l) files"

# Sectors written to the first whole disk (512 bytes each), as the kernel counts them.
written() { echo $(( $(awk '$3 ~ /^(vd[a-z]|sd[a-z]|nvme[0-9]+n[0-9]+|xvd[a-z])$/ {print $10; exit}' /proc/diskstats) * 512 )); }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { echo $(( ($2 - $1) / 1000000 )); }

fork_t=(); cp_t=(); fork_b=(); cp_b=()
for r in $(seq 1 "$runs"); do
  sync; b0="$(written)"; t0="$(date +%s%N)"
  "$cordon" sandbox fork "$h" --count 4 --thread-prefix f --min-isolation container -q </dev/null >/dev/null 2>&1
  sync; t1="$(date +%s%N)"; b1="$(written)"
  fork_t+=("$(ms "$t0" "$t1")"); fork_b+=("$(( (b1 - b0) / 1048576 ))")
  for i in 1 2 3 4; do
    "$cordon" sandbox down --scope bench-fork --thread "f-$i" </dev/null >/dev/null 2>&1
  done
  for s in "$CORDON_SNAPSHOT_DIR"/snap-*; do
    "$cordon" sandbox forget "$(basename "$s")" --scope bench-fork </dev/null >/dev/null 2>&1
  done
  sync; b0="$(written)"; t0="$(date +%s%N)"
  for i in 1 2 3 4; do cp -a "$host_work/tree" "$work/copy-$i"; done
  sync; t1="$(date +%s%N)"; b1="$(written)"
  cp_t+=("$(ms "$t0" "$t1")"); cp_b+=("$(( (b1 - b0) / 1048576 ))")
  rm -rf "$work"/copy-*
done
# The split of a fork: the snapshot alone (a copy of the tree, hashed).
snap_t=()
for r in $(seq 1 "$runs"); do
  sync; t0="$(date +%s%N)"
  s="$("$cordon" sandbox snapshot "$h" </dev/null 2>/dev/null)"
  sync; t1="$(date +%s%N)"
  snap_t+=("$(ms "$t0" "$t1")")
  "$cordon" sandbox forget "$s" --scope bench-fork </dev/null >/dev/null 2>&1
done
st="$(printf '%s\n' "${snap_t[@]}" | median)"
ft="$(printf '%s\n' "${fork_t[@]}" | median)"; ct="$(printf '%s\n' "${cp_t[@]}" | median)"
fb="$(printf '%s\n' "${fork_b[@]}" | median)"; cb="$(printf '%s\n' "${cp_b[@]}" | median)"
echo "== fork into 4 against cp -a x4, median of $runs (each timed to its data on disk: sync)"
echo "fork:  ${ft} ms, ${fb} MiB written"
echo "cp -a: ${ct} ms, ${cb} MiB written"
echo "of the fork, the snapshot alone: ${st} ms"
awk -v a="$ft" -v b="$ct" -v c="$fb" -v d="$cb" 'BEGIN { printf "ratio: time %.2fx, bytes %.2fx\n", a/b, (d > 0 ? c/d : 0) }'
