#!/usr/bin/env bash
# One latency table for every backend present (issue 33), one run:
# create (cold), first exec, warm exec and dispose through the CLI, and
# `cordon serve`'s HTTP create and exec, p50 and p99, each beside the bare
# engine doing the nearest thing (benches/latency/table.py says what).
# Under `cordon:default`, each backend landed as its own tests land it
# (`--backend NAME --min-isolation RUNG`). A private Docker engine is
# started when Debian's is installed (as benches/docker-engine.sh does);
# gvisor and microvm run when `cordon doctor` says they can.
# RUNS (default 20; microvm: MICROVM_RUNS, default 5) sandboxes per
# backend, WARM (default 10) warm execs in each.
# Needs root, python3, bwrap (for the container rung's bare start).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED latency-table.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
for t in python3 bwrap; do
  command -v "$t" >/dev/null || { echo "latency-table.sh needs $t (apt-get install python3 bubblewrap)" >&2; exit 1; }
done
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
export CORDON="$target/release/cordon"
work="$(mktemp -d /var/tmp/cordon-bench-latency.XXXXXX)"
chmod 755 "$work"
export CORDON_STATE_DIR="$work/state"
pids=()
dockerd_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # What a failed run left: every sandbox in this run's state directory.
  "$CORDON" sandbox ls --format json </dev/null 2>/dev/null \
    | python3 -c 'import json,sys; [print(s["handle"]) for s in json.load(sys.stdin).get("sandboxes", [])]' 2>/dev/null \
    | while read -r h; do "$CORDON" sandbox down "$h" </dev/null >/dev/null 2>&1 || true; done
  [ -n "$dockerd_pid" ] && { kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null || true; }
  awk -v w="$work" '$5 ~ "^"w {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores"

backends=()
runnable() { "$CORDON" doctor --format json </dev/null 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(any(b['name']=='$1' and b['runnable'] for b in d['backends']))"; }

# The container rung: bare `bwrap` with every namespace; warm exec against
# fork+exec of the same program.
bare_bwrap='["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]'
backends+=("{\"name\": \"container\", \"args\": [\"--backend\", \"container\", \"--min-isolation\", \"container\"], \"bare_start\": $bare_bwrap, \"bare_exec\": {\"exec\": [\"/bin/true\"]}}")
backends+=('{"name": "process", "args": ["--backend", "process", "--min-isolation", "process"], "bare_start": ["env", "/bin/true"], "bare_exec": {"exec": ["env", "/bin/true"]}}')

if [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ]; then
  sock="$work/docker.sock"
  /usr/sbin/dockerd --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
    -H "unix://$sock" --bridge=none --iptables=false --ip6tables=false \
    --containerd-namespace cordon-latency --containerd-plugins-namespace cordon-latency-plugins \
    >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  export CORDON_DOCKER_HOST="unix://$sock"
  for _ in $(seq 100); do [ -S "$sock" ] && /usr/bin/docker -H "unix://$sock" version >/dev/null 2>&1 && break; sleep 0.1; done
  "$CORDON" run --quiet --backend docker --min-isolation container -- /bin/true </dev/null
  image="$(/usr/bin/docker -H "unix://$sock" images --format '{{.Repository}}:{{.Tag}}' | grep '^cordon/skeleton:' | head -1)"
  d="[\"/usr/bin/docker\", \"-H\", \"unix://$sock\""
  bare="\"--network\", \"none\", \"--read-only\", \"--cap-drop\", \"ALL\", \"--security-opt\", \"no-new-privileges\", \"--user\", \"1999999998:1999999998\", \"-v\", \"/usr:/usr:ro\""
  backends+=("{\"name\": \"docker\", \"args\": [\"--backend\", \"docker\", \"--min-isolation\", \"container\"], \"bare_start\": $d, \"run\", \"--rm\", $bare, \"$image\", \"/bin/true\"], \"bare_exec\": {\"setup\": $d, \"run\", \"-d\", \"--name\", \"cordon-latency-warm\", $bare, \"$image\", \"/bin/sleep\", \"infinity\"], \"exec\": $d, \"exec\", \"cordon-latency-warm\", \"/bin/true\"], \"teardown\": $d, \"rm\", \"-f\", \"cordon-latency-warm\"]}}")
else
  echo "docker: not installed (apt-get install docker.io); its rows are left out" >&2
fi

if [ "$(runnable gvisor)" = True ]; then
  r='["runsc", "--root", "'"$work"'/runsc", "--platform=ptrace", "--network=none"'
  # The warm exec's peer: `runsc exec` into a running bare sandbox (the
  # host's /usr read-only, a non-root uid, no network), as benches/gvisor.sh.
  mkdir -p "$work/pod/rootfs/usr" "$work/pod/rootfs/proc"
  for l in bin sbin lib lib64; do [ -L "/$l" ] && ln -s "$(readlink "/$l")" "$work/pod/rootfs/$l"; done
  python3 - "$work/pod" <<'EOF2'
import json, sys
d = sys.argv[1]
json.dump({
    "ociVersion": "1.0.0",
    "process": {"user": {"uid": 1000, "gid": 1000}, "args": ["/usr/bin/sleep", "infinity"],
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
    "root": {"path": d + "/rootfs", "readonly": True},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}],
    "annotations": {"io.kubernetes.cri.container-type": "sandbox"},
    "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
}, open(d + "/config.json", "w"))
EOF2
  # Started with no pipe of the script's (a running sandbox keeps its stdio).
  rs="runsc --root $work/runsc --platform=ptrace --network=none"
  up="$rs create --bundle $work/pod cordon-latency-pod </dev/null >/dev/null 2>&1 && $rs start cordon-latency-pod </dev/null >/dev/null 2>&1"
  backends+=("{\"name\": \"gvisor\", \"args\": [\"--backend\", \"gvisor\", \"--min-isolation\", \"hardened_container\"], \"bare_start\": $r, \"do\", \"/bin/true\"], \"bare_exec\": {\"setup\": [\"sh\", \"-c\", \"$up\"], \"exec\": $r, \"exec\", \"cordon-latency-pod\", \"/bin/true\"], \"teardown\": $r, \"delete\", \"--force\", \"cordon-latency-pod\"]}}")
else
  echo "gvisor: not runnable here (cordon doctor); its rows are left out" >&2
fi
if [ "$(runnable microvm)" = True ]; then
  backends+=("{\"name\": \"microvm\", \"args\": [\"--backend\", \"microvm\", \"--min-isolation\", \"container\"], \"bare_start\": null, \"bare_exec\": null, \"runs\": ${MICROVM_RUNS:-5}}")
else
  echo "microvm: not runnable here (cordon doctor); its rows are left out" >&2
fi

# `cordon serve`, one per backend (its `backends: [NAME]`), for the HTTP rows.
token=latency-token-0123456789
sum="$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
serve_addrs="{"
sep=""
for b in "${backends[@]}"; do
  name="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$b")"
  floor="$(python3 -c 'import json,sys; a=json.loads(sys.argv[1])["args"]; print(a[a.index("--min-isolation")+1])' "$b")"
  cat > "$work/serve-$name.yaml" <<YAML
listen: 127.0.0.1:0
min_isolation: $floor
backends: [$name]
credentials:
  - name: bench
    token_sha256: $sum
    scope: latency-http
    identity: {namespace: local, name: operator}
limits: {requests_per_second: 100000, max_sandboxes: 64}
sandboxes:
  state_dir: $work/serve-state-$name
YAML
  "$CORDON" serve --config "$work/serve-$name.yaml" </dev/null >"$work/serve-$name.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$work/serve-$name.out" && break; sleep 0.1; done
  addr="$(grep -o 'listening on http://[^ ]*' "$work/serve-$name.out" | head -1 | sed 's#listening on http://##')"
  if [ -n "$addr" ]; then
    serve_addrs="$serve_addrs$sep\"$name\": \"$addr\""
    sep=", "
  else
    echo "serve for $name did not start: $(head -3 "$work/serve-$name.out")" >&2
  fi
done
serve_addrs="$serve_addrs}"
SERVE_ADDRS="$serve_addrs" SERVE_TOKEN="$token" python3 benches/latency/table.py "${backends[@]}"
