#!/usr/bin/env bash
# Pause and resume (issue 31), at the container rung under `cordon:default`
# (the README's `--min-isolation container`), measured in one run:
#  1. a busy loop's progress (its CPU ticks, /proc) over 2 s running, over
#     2 s paused (must be 0), and over 2 s after resume;
#  2. (hyperfine) `cordon sandbox exec H -- /bin/true` on a paused sandbox
#     (it resumes first; each run paused again by --prepare) against the
#     same exec on a running one, and `sandbox pause` + `sandbox resume`
#     against that exec.
# Needs root and hyperfine. RUNS scales it (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED pause.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
command -v hyperfine >/dev/null || { echo "pause.sh needs hyperfine (apt-get install hyperfine)" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d)"
export CORDON_STATE_DIR="$work/state"
h=""
loop=""
cleanup() {
  [ -n "$loop" ] && kill "$loop" 2>/dev/null || true
  [ -n "$h" ] && "$cordon" sandbox down "$h" </dev/null >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

h="$("$cordon" sandbox up -q --scope bench-pause --thread t --min-isolation container </dev/null)"
marker="bench-pause-loop-$$"
"$cordon" sandbox exec "$h" -- /bin/sh -c "while :; do :; done # $marker" </dev/null >/dev/null 2>&1 &
loop=$!
pid=""
for _ in $(seq 1 100); do
  pid="$(pgrep -f -- "$marker" | while read -r p; do
    # The sandbox's shell (its path resolved in the sandbox's view), not
    # the `cordon sandbox exec` client.
    if ! tr '\0' ' ' </proc/"$p"/cmdline | grep -q 'sandbox exec'; then echo "$p"; fi
  done | head -n1)"
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "the busy loop never started" >&2; exit 1; }
ticks() { awk '{ print $14 + $15 }' /proc/"$pid"/stat; }
progress() { local a b; a="$(ticks)"; sleep 2; b="$(ticks)"; echo $((b - a)); }

echo "== a busy loop's CPU ticks over 2 s (100 per CPU-second)"
echo "running:        $(progress)"
"$cordon" sandbox pause "$h" </dev/null 2>/dev/null
echo "paused:         $(progress)"
"$cordon" sandbox resume "$h" </dev/null 2>/dev/null
echo "after resume:   $(progress)"
kill "$loop" 2>/dev/null || true
wait "$loop" 2>/dev/null || true
loop=""
# The loop is the exec's: ending its client ends it.
sleep 0.5

runs="${RUNS:-100}"
echo
echo "== exec on a paused sandbox (resumes first) vs on a running one; pause+resume (hyperfine, $runs runs each)"
hyperfine -N --warmup 5 --runs "$runs" --export-json "$work/pause.json" \
  --command-name "exec, running" "$cordon sandbox exec $h -- /bin/true" \
  --command-name "exec, paused (resumes first)" --prepare "$cordon sandbox pause $h" "$cordon sandbox exec $h -- /bin/true" \
  --command-name "pause + resume" "sh -c '$cordon sandbox pause $h 2>/dev/null && $cordon sandbox resume $h 2>/dev/null'" \
  </dev/null
python3 - "$work/pause.json" <<'EOF'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
base = r["exec, running"]["median"]
for name, x in r.items():
    print(f"{name:32s} median {x['median']*1000:7.2f} ms  ({x['median']/base:.2f}x exec on a running sandbox)")
EOF
