#!/usr/bin/env bash
# Sandbox overhead, measured as ratios in one run (issue 6's targets):
#  1. one-shot start: `cordon run -- /bin/true` at each rung, under the
#     bench policy and under cordon:default (what a user gets), against
#     `bwrap --unshare-all ... /bin/true` and `/usr/bin/env /bin/true`;
#     then where the time of a start goes, phase by phase;
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
  "$cordon run --min-isolation container --backend container --policy $policy -- /usr/bin/true" \
  "$cordon run --min-isolation process --backend process -- /usr/bin/true" \
  "$cordon run --min-isolation container --backend container -- /usr/bin/true"
cat "$work/start.md"

echo "== where a start's time goes (CORDON_LOG=debug phases, cordon:default, mean of $((runs / 4)) runs)"
for rung in process container; do
  for _ in $(seq $((runs / 4))); do
    CORDON_LOG=debug "$cordon" run --min-isolation "$rung" --backend "$rung" -- /usr/bin/true 2>&1 >/dev/null
  done | awk -v rung="$rung" '
    /close time.busy=/ {
      name = $0; sub(/.*phase\{name="/, "", name); sub(/".*/, "", name)
      t = $0; sub(/.*time.busy=/, "", t); sub(/ .*/, "", t)
      v = t + 0
      if (t ~ /µs$/) v /= 1000; else if (t ~ /ns$/) v /= 1000000; else if (t ~ /[^m]s$/) v *= 1000
      sum[name] += v; n[name]++
      if (!(name in order)) { order[name] = ++k; names[k] = name }
    }
    END { for (i = 1; i <= k; i++) printf "%-10s %-18s %7.2f ms\n", rung, names[i], sum[names[i]] / n[names[i]] }'
done

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
