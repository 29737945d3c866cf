#!/usr/bin/env bash
# microVM memory snapshots (issue 31): a guest whose shell counts in a
# loop (a file written every 50 ms) is saved with its memory and a copy
# made from it, in one run:
#  - cordon: `cordon sandbox snapshot H --memory` (H made with `--backend
#    microvm` under `cordon:default`, opted down to the rung TCG gives)
#    then `cordon sandbox up --from SNAP` (which returns once the copy's
#    agent answered);
#  - bare: QEMU's own migration of the same guest — over QMP on the same
#    QEMU: `stop`, `migrate` into a file, `cont`; then a QEMU started
#    with the same arguments (unjailed, `-incoming defer`), the file
#    loaded with `migrate-incoming`, `cont`, until QEMU says it runs.
# Median of RUNS (default 5) pairs each, and the ratio; the script checks
# that cordon's copy counts on. Needs root, QEMU, a guest kernel, the
# static guest agent and an image store with `default` (what
# tests/microvm.rs needs; CORDON_IMAGE_STORE, else the CI store).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-5}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
export CORDON_IMAGE_STORE="${CORDON_IMAGE_STORE:-/var/cache/cordon-ci-images}"
if [ "$(id -u)" != 0 ] || ! command -v qemu-system-x86_64 >/dev/null \
  || [ ! -e "$CORDON_IMAGE_STORE/names/default.json" ]; then
  echo "!!!!!!!! SKIPPED microvm-memory.sh: needs root, QEMU and an image store with \`default\` (run tests/microvm.rs once) !!!!!!!!" >&2
  exit 1
fi
work="$(mktemp -d /var/tmp/cordon-bench-vmem-XXXXXX)"
chmod 711 "$work"  # the jail around QEMU reaches its run directory through it
export CORDON_STATE_DIR="$work/state"
export CORDON_SNAPSHOT_DIR="$work/snapshots"
export TMPDIR="$work"
mkdir -m 700 "$CORDON_STATE_DIR"
bare_pid=""
cleanup() {
  [ -n "$bare_pid" ] && kill "$bare_pid" 2>/dev/null || true
  for t in $(seq 1 "$runs"); do
    "$cordon" sandbox down --scope bench-vmem --thread "s$t" </dev/null >/dev/null 2>&1 || true
    "$cordon" sandbox down --scope bench-vmem --thread "r$t" </dev/null >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
cat > "$work/qmp.py" <<'PY'
# QEMU's own migration, over QMP: `save SOCK FILE` (stop, migrate into
# FILE, cont) or `load SOCK FILE` (migrate-incoming from FILE, cont,
# until it runs). Prints the milliseconds it took.
import json, socket, sys, time
def session(path):
    s = socket.socket(socket.AF_UNIX)
    for _ in range(500):
        try:
            s.connect(path); break
        except OSError:
            time.sleep(0.01)
    f = s.makefile("r")
    json.loads(f.readline())
    def cmd(name, args=None, fds=None):
        line = json.dumps({"execute": name, **({"arguments": args} if args else {})}) + "\n"
        if fds:
            socket.send_fds(s, [line.encode()], fds)
        else:
            s.sendall(line.encode())
        while True:
            v = json.loads(f.readline())
            if "event" in v:
                continue
            if "error" in v:
                raise SystemExit(f"{name}: {v['error']}")
            return v["return"]
    cmd("qmp_capabilities")
    return cmd
def until(cmd, query, key, want):
    while cmd(query).get(key) not in want:
        time.sleep(0.025)
op, sock, path = sys.argv[1:4]
t0 = time.monotonic()
cmd = session(sock)
if op == "save":
    with open(path, "wb") as out:
        cmd("stop")
        cmd("migrate-set-parameters", {"max-bandwidth": 8 << 30})
        cmd("getfd", {"fdname": "f"}, [out.fileno()])
        cmd("migrate", {"uri": "fd:f"})
        until(cmd, "query-migrate", "status", ("completed",))
        cmd("cont")
else:
    with open(path, "rb") as src:
        cmd("getfd", {"fdname": "f"}, [src.fileno()])
        cmd("migrate-incoming", {"uri": "fd:f"})
        until(cmd, "query-migrate", "status", ("completed",))
        cmd("cont")
        until(cmd, "query-status", "status", ("running",))
print(round((time.monotonic() - t0) * 1000))
PY
counter='i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.05; done'
now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sel=(--backend microvm --min-isolation container)

cdn_save=(); cdn_both=(); bare_save=(); bare_both=(); sizes=()
for t in $(seq 1 "$runs"); do
  h="$("$cordon" sandbox up -q --scope bench-vmem --thread "s$t" "${sel[@]}" </dev/null)"
  ("$cordon" sandbox exec "$h" --timeout 600 -- sh -c "$counter" </dev/null >/dev/null 2>&1 || true) &
  until "$cordon" sandbox exec "$h" -- test -s count </dev/null >/dev/null 2>&1; do sleep 0.2; done
  sleep 1
  # This sandbox's QEMU: its run directory, and its arguments.
  run="$(ls -td "$work"/cordon-microvm-*/run | head -1)"
  qpid=""
  for p in /proc/[0-9]*; do
    if tr '\0' '\n' < "$p/cmdline" 2>/dev/null | grep -q "^file,id=con,path=$run/"; then qpid="${p#/proc/}"; fi
  done
  [ -n "$qpid" ] || { echo "the sandbox's QEMU was not found" >&2; exit 1; }
  mapfile -d '' args < "/proc/$qpid/cmdline"

  t0=$(now)
  snap="$("$cordon" sandbox snapshot "$h" --memory </dev/null 2>/dev/null)"
  t1=$(now)
  r="$("$cordon" sandbox up -q --scope bench-vmem --thread "r$t" "${sel[@]}" --from "$snap" </dev/null)"
  t2=$(now)
  cdn_save+=($(( (t1 - t0) / 1000000 ))); cdn_both+=($(( (t2 - t0) / 1000000 )))
  before=$("$cordon" sandbox exec "$r" -- cat count </dev/null)
  sleep 0.5
  after=$("$cordon" sandbox exec "$r" -- cat count </dev/null)
  [ "$after" -gt "$before" ] || { echo "cordon's copy did not count on ($before, $after)" >&2; exit 1; }
  sizes+=($(du -sb "$CORDON_SNAPSHOT_DIR/$snap/memory/vm.state" | cut -f1))
  "$cordon" sandbox down --scope bench-vmem --thread "r$t" </dev/null >/dev/null

  # Bare: QEMU's own migration of the same guest, then a QEMU of the same
  # arguments (its sockets in a directory of its own) loading it.
  saved="$work/bare-$t.state"
  s=$(python3 "$work/qmp.py" save "$run/qmp.sock" "$saved")
  bare_run="$work/bare-run-$t"; mkdir -p "$bare_run"
  bargs=()
  for a in "${args[@]:1}"; do bargs+=("${a//$run/$bare_run}"); done
  t3=$(now)
  "${args[0]}" "${bargs[@]}" -incoming defer >/dev/null 2>&1 &
  bare_pid=$!
  l=$(python3 "$work/qmp.py" load "$bare_run/qmp.sock" "$saved")
  t4=$(now)
  kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true; bare_pid=""
  bare_save+=("$s"); bare_both+=($(( s + (t4 - t3) / 1000000 )))
  rm -f "$saved"
  "$cordon" sandbox down --scope bench-vmem --thread "s$t" </dev/null >/dev/null
  wait || true
  "$cordon" sandbox forget "$snap" --scope bench-vmem </dev/null >/dev/null 2>&1 || true
  echo "pair $t: cordon ${cdn_save[-1]} / ${cdn_both[-1]} ms, bare $s / ${bare_both[-1]} ms (load $l ms), state ${sizes[-1]} bytes" >&2
done
cs=$(printf '%s\n' "${cdn_save[@]}" | median); cb=$(printf '%s\n' "${cdn_both[@]}" | median)
bs=$(printf '%s\n' "${bare_save[@]}" | median); bb=$(printf '%s\n' "${bare_both[@]}" | median)
sz=$(printf '%s\n' "${sizes[@]}" | median)
echo "| $runs each | the save | save + restore | ratio (save + restore) |"
echo "|---|---|---|---|"
echo "| bare QEMU migration, same guest (baseline) | $bs ms | $bb ms | 1.00× |"
echo "| cordon | $cs ms | $cb ms | $(awk -v a="$cb" -v b="$bb" 'BEGIN {printf "%.2f×", a / b}') |"
echo "saved state: median $sz bytes; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
