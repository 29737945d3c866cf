#!/usr/bin/env bash
# Start and warm exec on every backend, two builds of cordon in one run
# (issue 29: the backend kit and the host builder must cost nothing):
#  - start: `cordon run --backend B -- /bin/true` under cordon:default;
#  - warm exec: `cordon sandbox exec H -- /bin/true` in a kept sandbox of B;
# for B in process, container, gvisor, docker and microvm, for BEFORE and
# AFTER (paths to release `cordon` binaries; AFTER defaults to this tree's
# release build), with `/usr/bin/env /bin/true` as the floor of any
# command. Each backend's commands are timed in one hyperfine call, the two
# builds side by side, so their ratio is measured under the same load.
# A backend this machine cannot run (no runsc, no dockerd, no guest kernel)
# is skipped, loudly. Needs root and hyperfine. RUNS scales the repetitions
# (default 20; the microVM gets a quarter of them); BACKENDS names a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE:?set BEFORE to the cordon binary to compare against}"
if [ -z "${AFTER:-}" ]; then
  cargo build --release --locked -q -p cordon-cli
  AFTER="${CARGO_TARGET_DIR:-$PWD/target}/release/cordon"
fi
command -v hyperfine >/dev/null || { echo "hyperfine is missing: apt-get install hyperfine" >&2; exit 1; }
runs="${RUNS:-20}"
work="$(mktemp -d /var/tmp/cordon-before-after.XXXXXX)"
export CORDON_STATE_DIR="$work/state"
dockerd_pid=
cleanup() {
  for bin in "$BEFORE" "$AFTER"; do
    "$bin" sandbox gc >/dev/null 2>&1 </dev/null || true
  done
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  awk -v w="$work" '$5 ~ "^"w {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l || true
  rm -rf "$work"
}
trap cleanup EXIT

# A private engine for the docker backend, as its tests and bench start one.
if [ -x /usr/sbin/dockerd ]; then
  sock="$work/docker.sock"
  export CORDON_DOCKER_HOST="unix://$sock"
  /usr/sbin/dockerd --data-root "$work/docker-data" --exec-root "$work/docker-exec" \
    --pidfile "$work/dockerd.pid" -H "unix://$sock" --bridge=none --iptables=false \
    --ip6tables=false --containerd-namespace cordon-ba --containerd-plugins-namespace cordon-ba-plugins \
    >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 100); do [ -S "$sock" ] && /usr/bin/docker -H "unix://$sock" version >/dev/null 2>&1 && break; sleep 0.1; done
fi

# backend, floor, runs
measure() {
  local b="$1" floor="$2" n="$3" cmds=() h
  local pick="--backend $b --min-isolation $floor"
  if ! "$AFTER" run --quiet $pick -- /bin/true </dev/null >/dev/null 2>"$work/why"; then
    echo "!!!!!!!! SKIPPED $b: $(head -c 400 "$work/why") !!!!!!!!"
    return
  fi
  echo "== $b ($floor): start and warm exec, $n runs each"
  for which in BEFORE AFTER; do
    bin="${!which}"
    # The first run may import an image or build an initramfs: not timed.
    "$bin" run --quiet $pick -- /bin/true </dev/null >/dev/null
    h="$("$bin" sandbox up --scope ba --thread "$b-$which" $pick </dev/null)"
    "$bin" sandbox exec "$h" -- /bin/true </dev/null
    "$bin" sandbox exec "$h" -- /bin/true </dev/null
    cmds+=("$bin run --quiet $pick -- /bin/true" "$bin sandbox exec $h -- /bin/true")
  done
  hyperfine -N --warmup 2 --runs "$n" --export-markdown "$work/$b.md" \
    "/usr/bin/env /bin/true" "${cmds[@]}" >/dev/null
  sed "s|$BEFORE|BEFORE|g; s|$AFTER|AFTER|g" "$work/$b.md"
  for which in BEFORE AFTER; do
    "${!which}" sandbox down --scope ba --thread "$b-$which" </dev/null >/dev/null || true
  done
  echo
}

for b in ${BACKENDS:-process container gvisor docker microvm}; do
  case "$b" in
    process) measure process process "$runs" ;;
    container) measure container container "$runs" ;;
    gvisor) measure gvisor hardened_container "$runs" ;;
    docker) measure docker container "$runs" ;;
    microvm) measure microvm container "$(( runs / 4 > 3 ? runs / 4 : 3 ))" ;;
    *) echo "unknown backend $b" >&2; exit 2 ;;
  esac
done
