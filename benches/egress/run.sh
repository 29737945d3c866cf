#!/usr/bin/env bash
# cordon's egress proxy against a direct connection, tinyproxy and squid, on
# loopback only, every figure measured in the same run (README.md beside this
# file says what each figure measures and every config choice).
#
#   sudo benches/egress/run.sh            # CORDON=path/to/cordon to pick the binary
#   EGRESS_BENCH_SCALE=0.2 benches/egress/run.sh   # a quick pass
#   EGRESS_BENCH_OUT=table.md benches/egress/run.sh   # also keep the table
#
# Needs root (the TLS-ish upstream listens on 127.0.0.1:443) and apt for
# tinyproxy and squid. Nothing leaves loopback: every listener and every
# target is 127.0.0.1, squid's DNS is pointed at 127.0.0.1, and the names
# used are 127.0.0.1 (peers) and bench.test from a private hosts file (cordon).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
CORDON="${CORDON:-$root/target/release/cordon}"
scale="${EGRESS_BENCH_SCALE:-1}"
tls_port=443

if [ "$(id -u)" -ne 0 ]; then
  echo "run.sh: needs root (the upstream listens on 127.0.0.1:443)" >&2
  exit 1
fi

# --- peers ---------------------------------------------------------------
missing=()
command -v tinyproxy >/dev/null || missing+=(tinyproxy)
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || missing+=(squid)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
fi
squid_bin="$(command -v squid || echo /usr/sbin/squid)"
# The packages' own services (started by their install scripts where an init
# runs) would hold the default ports and share the CPU: stop them. Ours run
# from private configs below.
for svc in tinyproxy squid; do
  if service "$svc" status >/dev/null 2>&1; then
    echo "== stopping the system $svc service" >&2
    service "$svc" stop >/dev/null 2>&1 || true
  fi
done

# --- build ---------------------------------------------------------------
echo "== building egress-bench (release)" >&2
cargo build --release --locked -q --manifest-path "$here/Cargo.toml"
bench="$here/target/release/egress-bench"

# --- scratch, ports, cleanup ---------------------------------------------
work="$(mktemp -d /tmp/egress-bench.XXXXXX)"
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
wait_port() { # NAME PORT PID
  local i
  for i in $(seq 1 100); do
    if [ -n "$(ss -Htln "sport = :$2")" ]; then return 0; fi
    if ! kill -0 "$3" 2>/dev/null; then
      echo "run.sh: $1 exited before listening on $2" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "run.sh: $1 is not listening on $2 after 10 s" >&2
  return 1
}

if [ -n "$(ss -Htln "sport = :$tls_port")" ]; then
  echo "run.sh: 127.0.0.1:$tls_port is taken; the TLS-ish upstream needs it" >&2
  exit 1
fi
http_port="$(free_port)"
tp_port="$(free_port)"
sq_port="$(free_port)"
co_port="$(free_port)"

# --- upstream ------------------------------------------------------------
"$bench" serve --http "127.0.0.1:$http_port" --tls "127.0.0.1:$tls_port" 2>"$work/upstream.log" &
pids+=($!)
wait_port upstream "$http_port" "$!"
wait_port upstream "$tls_port" "${pids[-1]}"

# --- tinyproxy -----------------------------------------------------------
mkdir -p "$work/tinyproxy"
chown nobody:nogroup "$work/tinyproxy"
cat >"$work/tinyproxy/tinyproxy.conf" <<EOF
User nobody
Group nogroup
Port $tp_port
Listen 127.0.0.1
Timeout 600
MaxClients 256
LogFile "$work/tinyproxy/tinyproxy.log"
LogLevel Critical
PidFile "$work/tinyproxy/tinyproxy.pid"
Allow 127.0.0.1
ConnectPort $tls_port
ConnectPort $http_port
EOF
tinyproxy -d -c "$work/tinyproxy/tinyproxy.conf" 2>"$work/tinyproxy/stderr.log" &
pids+=($!)
wait_port tinyproxy "$tp_port" "$!"

# --- squid ---------------------------------------------------------------
mkdir -p "$work/squid"
chown proxy:proxy "$work/squid"
cat >"$work/squid/squid.conf" <<EOF
http_port 127.0.0.1:$sq_port
visible_hostname egress-bench
pid_filename $work/squid/squid.pid
cache_log $work/squid/cache.log
coredump_dir $work/squid
access_log none
cache_store_log none
netdb_filename none
dns_nameservers 127.0.0.1
shutdown_lifetime 1 seconds
# No cache_dir: no disk cache. Nothing is cached in memory either.
cache deny all
acl SSL_ports port $tls_port
acl Safe_ports port $tls_port $http_port
acl CONNECT method CONNECT
http_access deny !Safe_ports
http_access deny CONNECT !SSL_ports
http_access allow localhost
http_access deny all
EOF
"$squid_bin" -N -f "$work/squid/squid.conf" 2>"$work/squid/stderr.log" &
pids+=($!)
if ! wait_port squid "$sq_port" "$!"; then
  cat "$work/squid/stderr.log" "$work/squid/cache.log" >&2 || true
  exit 1
fi

# --- cordon --------------------------------------------------------------
if "$CORDON" proxy --help >/dev/null 2>&1; then
  printf '127.0.0.1 bench.test\n' >"$work/hosts"
  # As a user runs it: an allowlist (the two upstream ports), no DNS beyond
  # the hosts file, an audit log on disk, and the proxy confined.
  "$CORDON" proxy --policy "$here/policy.yaml" --listen "127.0.0.1:$co_port" \
    --hosts "$work/hosts" --nameserver none \
    --allow "bench.test:$tls_port" --allow "bench.test:$http_port" \
    --audit "$work/cordon-audit.jsonl" 2>"$work/cordon.log" &
  pids+=($!)
  if wait_port cordon "$co_port" "$!"; then
    cordon_target="cordon=127.0.0.1:$co_port,bench.test"
  else
    cat "$work/cordon.log" >&2 || true
    cordon_target="cordon=missing:did not start"
  fi
else
  echo "== $CORDON has no 'proxy' subcommand: cordon's column is 'not built'" >&2
  cordon_target="cordon=missing:not built"
fi

# --- run -----------------------------------------------------------------
echo "== running (scale $scale)" >&2
"$bench" run --http-port "$http_port" --tls-port "$tls_port" --scale "$scale" \
  --target direct=direct \
  --target "tinyproxy=127.0.0.1:$tp_port,127.0.0.1" \
  --target "squid=127.0.0.1:$sq_port,127.0.0.1" \
  --target "$cordon_target" \
  --subject cordon >"$work/table.md"
{
  echo "<!-- egress-bench $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, tinyproxy $(tinyproxy -v 2>&1 | awk '{print $2}'), squid $("$squid_bin" -v | awk 'NR==1{print $4}'), tree $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo "?") -->"
  cat "$work/table.md"
} >"$work/out.md"
cat "$work/out.md"
if [ -n "${EGRESS_BENCH_OUT:-}" ]; then cp "$work/out.md" "$EGRESS_BENCH_OUT"; fi
if [ -s "$work/upstream.log" ] && grep -q 'conn' "$work/upstream.log"; then
  echo "== upstream errors (first 5):" >&2
  grep 'conn' "$work/upstream.log" | head -5 >&2
fi
