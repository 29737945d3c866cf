#!/usr/bin/env bash
# The docker backend against the engine used bare, in one run (issue 18):
#  1. start: `cordon run --backend docker --min-isolation container --
#     /bin/true` (one exec container, the sandbox's anchor, volume and
#     binds) against `docker run --rm` of the same skeleton image with the
#     same confinement flags and the host's /usr bound read-only;
#  2. exec in a kept sandbox: `cordon sandbox exec H -- /bin/true` (after
#     the first, each exec is one `docker exec` of cordon's helper into the
#     sandbox's pod, through the keeper: docs/design.md, "Warm execs in a
#     pod") against `docker exec` into a running container (what it is
#     measured against) and `docker run --rm` (what each exec was before
#     the pod).
# Debian's engine (/usr/sbin/dockerd) is started here with a private data
# root and socket, as the tests start it, and stopped after; the client is
# Debian's /usr/bin/docker, named (a newer one may shadow it on PATH).
# Needs root, docker.io and hyperfine. RUNS scales it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED docker-engine.sh: starting an engine needs root !!!!!!!!" >&2
  exit 1
fi
for need in /usr/sbin/dockerd /usr/bin/docker; do
  [ -x "$need" ] || { echo "$need is missing: apt-get install docker.io" >&2; exit 1; }
done
command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install hyperfine" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
runs="${RUNS:-30}"

work="$(mktemp -d /var/tmp/cordon-bench-docker.XXXXXX)"
sock="$work/docker.sock"
export CORDON_STATE_DIR="$work/state"
export CORDON_DOCKER_HOST="unix://$sock"
docker=(/usr/bin/docker -H "unix://$sock")
/usr/sbin/dockerd --data-root "$work/data" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
  -H "unix://$sock" --bridge=none --iptables=false --ip6tables=false \
  --containerd-namespace cordon-bench --containerd-plugins-namespace cordon-bench-plugins \
  >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
cleanup() {
  "$cordon" sandbox down --scope bench --thread docker-exec >/dev/null 2>&1 || true
  "${docker[@]}" rm -f cordon-bench-warm >/dev/null 2>&1 || true
  kill "$dockerd_pid" 2>/dev/null || true
  wait "$dockerd_pid" 2>/dev/null || true
  grep -q " $work" /proc/self/mountinfo && awk -v w="$work" '$5 ~ "^"w {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$sock" ] && "${docker[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
"${docker[@]}" version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}'

# The first run imports the `host` skeleton into the engine.
"$cordon" run --quiet --backend docker --min-isolation container -- /bin/true
image="$("${docker[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep '^cordon/skeleton:' | head -1)"
echo "skeleton image: $image"
bare=(--network none --read-only --cap-drop ALL --security-opt no-new-privileges
  --user 1999999998:1999999998 -v /usr:/usr:ro "$image")

echo
echo "== start ($runs runs each)"
hyperfine -N --warmup 3 --runs "$runs" --export-markdown "$work/start.md" \
  "${docker[*]} run --rm ${bare[*]} /bin/true" \
  "$cordon run --quiet --backend docker --min-isolation container -- /bin/true"
cat "$work/start.md"

echo
echo "== exec in a kept sandbox ($runs runs each)"
h="$("$cordon" sandbox up --scope bench --thread docker-exec --backend docker --min-isolation container)"
# The first exec is a container of its own; the second starts the pod.
"$cordon" sandbox exec "$h" -- /bin/true </dev/null
"${docker[@]}" run -d --name cordon-bench-warm "${bare[@]}" /bin/sleep infinity >/dev/null
hyperfine -N --warmup 3 --runs "$runs" --export-markdown "$work/exec.md" \
  "${docker[*]} exec cordon-bench-warm /bin/true" \
  "${docker[*]} run --rm ${bare[*]} /bin/true" \
  "$cordon sandbox exec $h -- /bin/true"
cat "$work/exec.md"
