#!/usr/bin/env bash
# The gvisor backend (issue 18) against runsc used bare, in one run
# (hyperfine, ratios):
#  1. start: `cordon run --min-isolation hardened_container -- /bin/true`
#     against `runsc do /bin/true` and `runsc run` of a bare bundle;
#  2. warm exec: `cordon sandbox exec H -- /bin/true` (H kept, its pod
#     running: each exec one `runsc exec` of cordon's helper, which makes
#     the exec's pid and mount namespace) against `runsc exec` into a
#     running bare sandbox, `runsc run` of a bare sub-container in it
#     (what cordon's warm exec was before issue 33), and
#     `/usr/bin/env /bin/true` for the CLI's own floor.
# Needs root, Debian's runsc and hyperfine. RUNS scales it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED gvisor.sh: runsc needs root here !!!!!!!!" >&2
  exit 1
fi
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
runs="${RUNS:-15}"
work="$(mktemp -d /var/tmp/cordon-gvisor-bench.XXXXXX)"
root="/run/cordon/gvisor-bench-$$"
export CORDON_STATE_DIR="$work/state"
export TMPDIR="$work"
R=(runsc --root "$root" --platform=ptrace --network=none)
cleanup() {
  "$cordon" sandbox down --scope bench --thread gvisor >/dev/null 2>&1 || true
  for c in $(runsc --root "$root" list -quiet 2>/dev/null); do
    runsc --root "$root" delete --force "$c" >/dev/null 2>&1 || true
  done
  rm -rf "$root" "$work"
}
trap cleanup EXIT

# A bare bundle: the host's /usr read-only, a non-root uid, no network.
bundle() { # dir, container type, sandbox id, argv...
  local dir="$1" kind="$2" sb="$3"
  shift 3
  mkdir -p "$dir"
  python3 - "$dir" "$kind" "$sb" "$work/rootfs" "$@" <<'EOF'
import json, sys
d, kind, sb, rootfs, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
ann = {"io.kubernetes.cri.container-type": kind}
if kind == "container":
    ann["io.kubernetes.cri.sandbox-id"] = sb
json.dump({
    "ociVersion": "1.0.0",
    "process": {"user": {"uid": 1000, "gid": 1000}, "args": args,
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
    "root": {"path": rootfs, "readonly": True},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}],
    "annotations": ann,
    "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
}, open(d + "/config.json", "w"))
EOF
}
mkdir -p "$work/rootfs/usr" "$work/rootfs/proc"
for l in bin sbin lib lib64; do [ -L "/$l" ] && ln -s "$(readlink "/$l")" "$work/rootfs/$l"; done
bundle "$work/one" sandbox one /bin/true
bundle "$work/pod" sandbox pod /usr/bin/sleep infinity
bundle "$work/sub" container pod /bin/true
"${R[@]}" create --bundle "$work/pod" pod
"${R[@]}" start pod

echo "== start (one command in a new sandbox; hyperfine, $runs runs each)"
hyperfine -N -w 3 -r "$runs" \
  "${R[*]} do /bin/true" \
  "${R[*]} run --bundle $work/one one" \
  "$cordon run --quiet --min-isolation hardened_container -- /bin/true"

echo
echo "== warm exec (hyperfine, $runs runs each)"
h="$("$cordon" sandbox up --scope bench --thread gvisor --min-isolation hardened_container)"
# The first exec is a sandbox of its own; the pod starts at the second.
"$cordon" sandbox exec "$h" -- /bin/true
"$cordon" sandbox exec "$h" -- /bin/true
hyperfine -N -w 3 -r "$runs" \
  "${R[*]} exec pod /bin/true" \
  "${R[*]} run --bundle $work/sub sub" \
  "$cordon sandbox exec $h -- /bin/true" \
  "/usr/bin/env /bin/true"
