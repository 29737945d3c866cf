#!/usr/bin/env bash
# gVisor memory snapshots (issue 31): a Python process counting in a loop
# is saved with its memory and started again elsewhere, in one run:
#  - cordon: `cordon sandbox snapshot H --memory` (H made with `--require
#    snapshot_memory` under `cordon:default`, opted down to gvisor's rung)
#    then `cordon sandbox up --from SNAP` (which returns once the process
#    runs again);
#  - bare: the same container (the bundle cordon wrote for the exec,
#    copied while it ran) run by runsc alone with cordon's flags, then
#    `runsc checkpoint` of it and `runsc restore --detach` as a new
#    container.
# Median of RUNS (default 7) pairs each, and the ratio. Needs root and
# Debian's runsc (`apt-get install runsc`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ] || ! command -v runsc >/dev/null; then
  echo "!!!!!!!! SKIPPED gvisor-memory.sh: needs root and runsc !!!!!!!!" >&2
  exit 1
fi
runs="${RUNS:-7}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d /var/tmp/cordon-bench-gmem-XXXXXX)"
root="/run/cordon/gvisor-bench-mem-$$"
export CORDON_STATE_DIR="$work/state"
export CORDON_SNAPSHOT_DIR="$work/snapshots"
export TMPDIR="$work"
mkdir -m 700 "$CORDON_STATE_DIR"
R=(runsc --root "$root" --platform=ptrace --network=none --oci-seccomp)
cleanup() {
  for t in $(seq 1 "$runs"); do
    "$cordon" sandbox down --scope bench-gmem --thread "s$t" </dev/null >/dev/null 2>&1 || true
    "$cordon" sandbox down --scope bench-gmem --thread "r$t" </dev/null >/dev/null 2>&1 || true
  done
  for c in $("${R[@]}" list -quiet 2>/dev/null); do
    "${R[@]}" delete --force "$c" >/dev/null 2>&1 || true
  done
  rm -rf "$root" "$work"
}
trap cleanup EXIT
counter='import time, os
i = 0
while True:
    i += 1
    open("count.tmp", "w").write(str(i))
    os.rename("count.tmp", "count")
    time.sleep(0.05)'
now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# Each pair: cordon saves and restores its exec's container; then the
# same container (the bundle cordon wrote for that exec, copied while it
# ran: its root, the policy plan's mounts, its seccomp table, over the
# same sandbox's volume) is run, saved and restored by runsc alone, with
# cordon's flags.
bare=()
bare_ck=()
cdn=()
cdn_ck=()
for t in $(seq 1 "$runs"); do
  h="$("$cordon" sandbox up -q --scope bench-gmem --thread "s$t" --min-isolation hardened_container --require snapshot_memory </dev/null)"
  ("$cordon" sandbox exec "$h" -- python3 -c "$counter" </dev/null >/dev/null 2>&1 || true) &
  until "$cordon" sandbox exec "$h" -- test -s count </dev/null >/dev/null 2>&1; do sleep 0.05; done
  cfg="$(ls -t "$work"/cordon-gvisor-*/exec-*/config.json | head -1)"
  mkdir -p "$work/same-$t"
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c["linux"]["cgroupsPath"] = "/" + sys.argv[3]
json.dump(c, open(sys.argv[2], "w"))' "$cfg" "$work/same-$t/config.json" "bench-gmem-$$-$t"
  sleep 0.5
  t0=$(now)
  snap="$("$cordon" sandbox snapshot "$h" --memory </dev/null 2>/dev/null)"
  tm=$(now); cdn_ck+=($(( (tm - t0) / 1000000 )))
  r="$("$cordon" sandbox up -q --scope bench-gmem --thread "r$t" --from "$snap" --min-isolation hardened_container </dev/null)"
  t1=$(now)
  wait
  before=$("$cordon" sandbox exec "$r" -- cat count </dev/null)
  sleep 0.3
  after=$("$cordon" sandbox exec "$r" -- cat count </dev/null)
  [ "$after" -gt "$before" ] || { echo "cordon: the restored counter did not go on" >&2; exit 1; }
  cdn+=($(( (t1 - t0) / 1000000 )))

  # The same container, bare, over the source sandbox's volume.
  "${R[@]}" run --detach --bundle "$work/same-$t" "b$t" </dev/null >/dev/null 2>&1
  sleep 0.5
  t0=$(now)
  "${R[@]}" checkpoint --image-path "$work/img-$t" "b$t" </dev/null >/dev/null
  tm=$(now); bare_ck+=($(( (tm - t0) / 1000000 )))
  "${R[@]}" restore --detach --image-path "$work/img-$t" --bundle "$work/same-$t" "c$t" </dev/null >/dev/null 2>&1
  t1=$(now)
  "${R[@]}" state "c$t" 2>/dev/null | grep -q '"running"' || { echo "bare: the restore is not running" >&2; exit 1; }
  bare+=($(( (t1 - t0) / 1000000 )))
  "${R[@]}" delete --force "b$t" >/dev/null 2>&1 || true
  "${R[@]}" delete --force "c$t" >/dev/null 2>&1 || true
  rm -rf "$work/img-$t"
  "$cordon" sandbox down "$h" </dev/null >/dev/null
  "$cordon" sandbox down "$r" </dev/null >/dev/null
  "$cordon" sandbox forget "$snap" --scope bench-gmem </dev/null >/dev/null 2>&1
done

b=$(printf '%s\n' "${bare[@]}" | median)
c=$(printf '%s\n' "${cdn[@]}" | median)
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  of which the save: bare checkpoint median $(printf '%s\n' "${bare_ck[@]}" | median) ms, cordon snapshot --memory median $(printf '%s\n' "${cdn_ck[@]}" | median) ms"
echo "bare runsc checkpoint + restore:          median ${b} ms (${bare[*]})"
echo "cordon snapshot --memory + up --from:     median ${c} ms (${cdn[*]})"
python3 -c "import sys; print(f'ratio: {int(sys.argv[2])/int(sys.argv[1]):.2f}x (target <= 1.2x)')" "$b" "$c"
