#!/usr/bin/env bash
# Where the wall time of one `cordon run -- /bin/true` goes, process by
# process (issue 33): the kernel's own tracepoints (process fork, exec and
# exit; the `mount`, `umount2`, `unshare` and `pivot_root` calls), recorded
# by `perf record` for RUNS runs (default 30) of each rung, then each run's
# events put on one timeline from the start of `cordon` and summarised as
# medians. Tracepoints cost a few microseconds each; `strace -f`, which
# stops every process at each event, multiplied a 20 ms start several
# times over here and is not used.
# Under `cordon:default`, the README's command (`--min-isolation
# container`, no `--backend`) and the process rung (`--backend process`).
# Needs root and perf (apt-get install linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED start-timeline.sh: sandboxes and tracepoints need root !!!!!!!!" >&2
  exit 1
fi
command -v perf >/dev/null || { echo "start-timeline.sh needs perf (apt-get install linux-perf)" >&2; exit 1; }
runs="${RUNS:-30}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d /var/tmp/cordon-bench-timeline.XXXXXX)"
trap 'rm -rf "$work"' EXIT
events=(
  -e sched:sched_process_fork -e sched:sched_process_exec -e sched:sched_process_exit
  -e syscalls:sys_enter_mount -e syscalls:sys_enter_umount -e syscalls:sys_enter_unshare
  -e syscalls:sys_enter_pivot_root
)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rung in container process; do
  case "$rung" in
    container) args=(run -q --min-isolation container -- /bin/true) ;;
    process) args=(run -q --min-isolation process --backend process -- /bin/true) ;;
  esac
  "$cordon" "${args[@]}" </dev/null
  perf record -q -a "${events[@]}" -o "$work/$rung.data" -- \
    bash -c 'n="$1"; shift; for ((i = 0; i < n; i++)); do "$@" </dev/null; done' \
    timeline "$runs" "$cordon" "${args[@]}"
  perf script -i "$work/$rung.data" -F comm,pid,tid,time,event,trace 2>/dev/null >"$work/$rung.txt"
  python3 benches/start/timeline.py "$rung" "$work/$rung.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
