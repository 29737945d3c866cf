#!/usr/bin/env bash
# Sandbox overhead, measured as ratios in one run (issue 6's targets):
#  1. one-shot start: `cordon run -- /bin/true` at each rung, against
#     `bwrap --unshare-all ... /bin/true` and `/usr/bin/env /bin/true`;
#  2. syscall cost inside vs outside: getppid, open+close.
# Needs root, bubblewrap, hyperfine and gcc; prints a table to paste into
# docs/benchmarks.md. RUNS scales the repetitions (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-200}"
cargo build --release --locked -q -p cordon-cli
cordon="$PWD/target/release/cordon"
policy="$PWD/benches/sandbox/bench-policy.yaml"
mkdir -p /opt/cordon-bench
gcc -O2 -o /opt/cordon-bench/syscalls benches/sandbox/syscalls.c
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== one-shot start (hyperfine, $runs runs each)"
hyperfine -N --warmup 10 --runs "$runs" --export-markdown "$work/start.md" \
  "/usr/bin/env /bin/true" \
  "bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true" \
  "$cordon run --min-isolation process --backend process --policy $policy -- /usr/bin/true" \
  "$cordon run --min-isolation container --backend container --policy $policy -- /usr/bin/true"
cat "$work/start.md"

echo "== syscalls (1,000,000 each; median of 5)"
n=1000000
outside() { /opt/cordon-bench/syscalls "$n" /etc/os-release; }
inside() { "$cordon" run --min-isolation "$1" --backend "$1" --policy "$policy" -- /opt/cordon-bench/syscalls "$n" /etc/os-release; }
median() { sort -n | sed -n 3p; }
for where in outside "inside process" "inside container"; do
  out="$work/$where.txt"
  : >"$out"
  for i in 1 2 3 4 5; do
    if [ "$where" = outside ]; then outside; else inside "${where#inside }"; fi >>"$out"
  done
  printf "%-18s getppid %s ns   open+close %s ns\n" "$where" \
    "$(awk '/getppid/ {print $2}' "$out" | median)" \
    "$(awk '/open/ {print $2}' "$out" | median)"
done
