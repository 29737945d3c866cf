#!/usr/bin/env bash
# One-shot start, two builds of cordon in one run (issue 15's before/after
# table): `cordon run -- /usr/bin/true` at each rung, under cordon:default
# and under the bench policy, and one that writes 64 MiB into its work dir
# (process rung, cordon:default), for BEFORE and AFTER (paths to `cordon`
# binaries; AFTER defaults to this tree's release build), against
# `/usr/bin/env /bin/true` and `bwrap --unshare-all`. Needs root, bubblewrap
# and hyperfine. RUNS scales the repetitions (default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-100}"
: "${BEFORE:?set BEFORE to the cordon binary to compare against}"
if [ -z "${AFTER:-}" ]; then
  cargo build --release --locked -q -p cordon-cli
  AFTER="$PWD/target/release/cordon"
fi
policy="$PWD/benches/sandbox/bench-policy.yaml"
mkdir -p /opt/cordon-bench
cmds=("/usr/bin/env /bin/true"
  "bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true")
for which in BEFORE AFTER; do
  bin="${!which}"
  for rung in process container; do
    cmds+=("$bin run --min-isolation $rung --backend $rung -- /usr/bin/true")
    cmds+=("$bin run --min-isolation $rung --backend $rung --policy $policy -- /usr/bin/true")
  done
  # A workload that leaves 64 MiB in its work dir: what its dispose costs.
  cmds+=("$bin run --min-isolation process --backend process -- /bin/sh -c 'head -c 64M /dev/zero > f'")
done
# hyperfine rewrites its export after each command: print the last one.
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
hyperfine -N --warmup 10 --runs "$runs" --export-markdown "$table" "${cmds[@]}" >/dev/null
cat "$table"
