#!/usr/bin/env bash
# Issue 30: cordon's inspecting egress proxy against its own plain tunnel,
# mitmproxy and a direct connection, over TLS, on loopback only; every
# figure measured in the same run, targets rotated within each figure.
# benches/egress-inspect/README.md says what each figure is.
#
#   benches/egress-inspect.sh                  # quick: about 1.5 minutes of measuring
#   RUNS=3 benches/egress-inspect.sh           # counts and durations x3
#   CORDON=path/to/cordon OUT=table.md benches/egress-inspect.sh
#
# Needs: openssl, python3 (for mitmproxy's venv, made once under
# $MITM_VENV), cargo, and a cordon built with `cargo build --release -p
# cordon-cli`. Nothing leaves loopback: every listener is 127.0.0.1, cordon
# resolves names from a private hosts file with DNS off, and mitmproxy is
# asked for the IP literal 127.0.0.1 (the TLS name is sent as SNI), so it
# resolves nothing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
dir="$here/egress-inspect"
CORDON="${CORDON:-$root/target/release/cordon}"
RUNS="${RUNS:-1}"
MITM_VENV="${MITM_VENV:-$HOME/.cache/cordon-bench/mitmproxy-venv}"
MITM_VERSION="${MITM_VERSION:-11.0.2}"

case "$RUNS" in '' | *[!0-9]* | 0) echo "egress-inspect.sh: RUNS must be a whole number ≥ 1" >&2; exit 1 ;; esac
for t in openssl python3 cargo ss; do
  command -v "$t" >/dev/null || { echo "egress-inspect.sh: needs $t" >&2; exit 1; }
done
[ -x "$CORDON" ] || { echo "egress-inspect.sh: no cordon at $CORDON (cargo build --release -p cordon-cli, or CORDON=)" >&2; exit 1; }
"$CORDON" proxy --help | grep -q -- --ca-out ||
  { echo "egress-inspect.sh: $CORDON proxy has no --ca-out" >&2; exit 1; }

# --- mitmproxy, in a venv of its own -----------------------------------------
if ! "$MITM_VENV/bin/mitmdump" --version >/dev/null 2>&1; then
  echo "== installing mitmproxy $MITM_VERSION into $MITM_VENV" >&2
  python3 -m venv "$MITM_VENV"
  "$MITM_VENV/bin/pip" install -q "mitmproxy==$MITM_VERSION"
fi
mitm_version="$("$MITM_VENV/bin/mitmdump" --version | awk '/^Mitmproxy/{print $2}')"

# --- the client and upstream -------------------------------------------------
echo "== building egress-inspect-bench (release)" >&2
CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$dir/target}" \
  cargo build --release --locked -q --manifest-path "$dir/Cargo.toml"
bench="${BENCH_TARGET_DIR:-$dir/target}/release/egress-inspect-bench"

# --- scratch, ports, cleanup -------------------------------------------------
work="$(mktemp -d /tmp/egress-inspect.XXXXXX)"
chmod 755 "$work"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

used_ports=" "
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    case "$used_ports" in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htln "sport = :$p")" ]; then
      used_ports="$used_ports$p "
      echo "$p"
      return
    fi
  done
}
wait_for() { # NAME PID COMMAND...: until COMMAND succeeds, 20 s at most
  local name="$1" pid="$2" i
  shift 2
  for i in $(seq 1 200); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "egress-inspect.sh: $name exited before it was ready" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "egress-inspect.sh: $name not ready after 20 s" >&2
  return 1
}
listening() { [ -n "$(ss -Htln "sport = :$1")" ]; }

# --- the upstream's own CA and certificate (openssl, P-256) ------------------
ossl() { openssl "$@" 2>>"$work/openssl.log"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/upstream-ca.key" -out "$work/upstream-ca.pem" -days 2 \
  -subj "/CN=egress-inspect bench upstream CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/leaf.key" -out "$work/leaf.csr" -subj "/CN=bench.test"
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth" "subjectAltName=DNS:bench.test,DNS:plain.test,IP:127.0.0.1" \
  >"$work/leaf.ext"
ossl x509 -req -in "$work/leaf.csr" -CA "$work/upstream-ca.pem" -CAkey "$work/upstream-ca.key" \
  -CAcreateserial -days 2 -extfile "$work/leaf.ext" -out "$work/leaf.pem"

"$bench" serve --cert "$work/leaf.pem" --key "$work/leaf.key" --port-file "$work/upstream.port" \
  2>"$work/upstream.log" &
pids+=($!)
wait_for upstream "$!" test -s "$work/upstream.port"
up_port="$(cat "$work/upstream.port")"

# --- cordon: bench.test inspected, plain.test tunnelled ----------------------
co_port="$(free_port)"
cp "$dir/policy.yaml" "$work/policy.yaml"
printf '127.0.0.1 bench.test plain.test\n' >"$work/hosts"
"$CORDON" policy check "$work/policy.yaml" >/dev/null
# As a user runs it (confined, an allowlist, DNS off, the audit log on
# disk), with the audit budget raised so the load figures measure the
# proxy, not the budget (past it requests would be refused, 429).
"$CORDON" proxy --policy "$work/policy.yaml" --listen "127.0.0.1:$co_port" \
  --hosts "$work/hosts" --nameserver none \
  --allow "bench.test:$up_port" --allow "plain.test:$up_port" \
  --audit "$work/cordon-audit.jsonl" \
  --audit-bytes-per-sec 1073741824 --audit-burst-bytes 1073741824 \
  --ca-out "$work/cordon-ca.pem" 2>"$work/cordon.log" &
pids+=($!)
wait_for cordon "$!" grep -q "listening on" "$work/cordon.log" || { cat "$work/cordon.log" >&2; exit 1; }

# --- mitmproxy: verifying the upstream against the same CA ------------------
mp_port="$(free_port)"
mkdir -p "$work/mitm"
"$MITM_VENV/bin/mitmdump" --mode regular --listen-host 127.0.0.1 --listen-port "$mp_port" \
  --set confdir="$work/mitm" \
  --set ssl_verify_upstream_trusted_ca="$work/upstream-ca.pem" \
  --set stream_large_bodies=1m \
  --set flow_detail=0 --set termlog_verbosity=warn \
  >"$work/mitm.log" 2>&1 &
pids+=($!)
wait_for mitmproxy "$!" listening "$mp_port" || { cat "$work/mitm.log" >&2; exit 1; }
wait_for mitmproxy "${pids[-1]}" test -s "$work/mitm/mitmproxy-ca-cert.pem"

# --- run ---------------------------------------------------------------------
echo "== running (RUNS=$RUNS)" >&2
"$bench" run --upstream "127.0.0.1:$up_port" \
  --keepalive $((4000 * RUNS)) --newconn $((400 * RUNS)) --seconds $((8 * RUNS)) \
  --concurrency 8 --bulk-mib 64 --bulk-runs $((2 * RUNS + 1)) --rounds 4 \
  --target "direct,-,bench.test,bench.test,$work/upstream-ca.pem" \
  --target "tunnel,127.0.0.1:$co_port,plain.test,plain.test,$work/upstream-ca.pem" \
  --target "inspect,127.0.0.1:$co_port,bench.test,bench.test,$work/cordon-ca.pem" \
  --target "mitmproxy,127.0.0.1:$mp_port,127.0.0.1,bench.test,$work/mitm/mitmproxy-ca-cert.pem" \
  >"$work/table.md"
{
  echo "<!-- egress-inspect $(date -u +%Y-%m-%dT%H:%MZ), RUNS=$RUNS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), mitmproxy $mitm_version, tree $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "?") -->"
  cat "$work/table.md"
} >"$work/out.md"
cat "$work/out.md"
if [ -n "${OUT:-}" ]; then cp "$work/out.md" "$OUT"; fi
inspected="$(cat "$work"/cordon-audit.jsonl* | grep -c '"verdict":"allow"' || true)"
echo "== cordon's audit log (rotated files too): $inspected allow lines" >&2
