#!/usr/bin/env bash
# Port forwarding (issue 32), at the container rung under `cordon:default`
# (the README's `--min-isolation container`), one run: small HTTP requests
# (one connection each, a threaded Python server in the sandbox on
# 127.0.0.1:8000) sent
#  1. directly, from inside the sandbox's own network namespace (`nsenter
#     --net` into the server's namespace: the bare baseline);
#  2. through `cordon sandbox port` (each connection decided by the
#     policy's ingress surface in the keeper and connected inside the
#     namespace);
#  3. through `cordon serve`'s preview URL (`/v1/sandboxes/{thread}/ports/
#     8000/...`, with its credential).
# Latency p50/p99 over N sequential requests (default 500), then requests/s
# with CONCURRENCY clients (default 8) for SECONDS (default 5).
# Needs root, nsenter (util-linux), ip (iproute2), python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED ports.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
for t in nsenter ip python3 curl; do
  command -v "$t" >/dev/null || { echo "ports.sh needs $t" >&2; exit 1; }
done
n="${N:-500}"
conc="${CONCURRENCY:-8}"
secs="${SECONDS_EACH:-5}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d)"
chmod 755 "$work"
export CORDON_STATE_DIR="$work/state"
h=""
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$h" ] && "$cordon" sandbox down "$h" </dev/null >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

load() { python3 benches/ports/load.py "$1" "$n" "$conc" "$secs"; }
server='import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()'

h="$("$cordon" sandbox up -q --scope bench-ports --thread t --min-isolation container --require ports </dev/null)"
"$cordon" sandbox exec "$h" -- python3 -c "$server" </dev/null >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  # The server itself (its argv starts with python3), not the `cordon`
  # command that carries the same script in its own argv.
  pid="$(pgrep -f '^[^ ]*python3 -c import http.server' | head -1 || true)"
  # The sandbox's `lo` is brought up by cordon's first forward; here by hand.
  [ -n "$pid" ] && nsenter -t "$pid" -n ip link set lo up 2>/dev/null && nsenter -t "$pid" -n python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000), timeout=1)' 2>/dev/null && break
  sleep 0.2
done
[ -n "$pid" ] || { echo "the server did not start" >&2; exit 1; }

echo "== 1. direct, inside the sandbox's namespace"
direct="$(nsenter -t "$pid" -n python3 benches/ports/load.py 127.0.0.1:8000 "$n" "$conc" "$secs")"
echo "$direct"

echo "== 2. cordon sandbox port"
"$cordon" sandbox port "$h" 8000 </dev/null > "$work/fwd" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/fwd" ] && break; sleep 0.1; done
forwarded="$(load "$(head -1 "$work/fwd")")"
echo "$forwarded"

echo "== 3. cordon serve's preview URL"
token=bench-token-0123456789
sum="$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
cat > "$work/serve.yaml" <<YAML
listen: 127.0.0.1:0
min_isolation: container
credentials:
  - name: bench
    token_sha256: $sum
    scope: bench
    identity: {namespace: local, name: operator}
limits: {requests_per_second: 100000}
sandboxes:
  state_dir: $work/serve-state
YAML
"$cordon" serve --config "$work/serve.yaml" </dev/null > "$work/serve.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$work/serve.out" && break; sleep 0.1; done
addr="$(grep -o 'listening on http://[^ ]*' "$work/serve.out" | head -1 | sed 's#listening on http://##')"
auth="Authorization: Bearer $token"
curl -fsS -H "$auth" -H "Content-Type: application/json" -d '{"thread": "web", "spec": "kind: run\nimage: host\nrequires: [exec, ports]\n"}' "http://$addr/v1/sandboxes" >/dev/null
curl -fsS -H "$auth" -H "Content-Type: application/json" -N -d "$(python3 -c 'import json,sys; print(json.dumps({"thread": "web", "argv": ["python3", "-c", sys.argv[1]], "stream": True, "timeout_seconds": 600}))' "$server")" "http://$addr/v1/sandboxes/exec" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS -H "$auth" "http://$addr/v1/sandboxes/web/ports/8000/small" >/dev/null 2>&1 && break
  sleep 0.2
done
preview="$(AUTH="$auth" python3 benches/ports/load.py "$addr/v1/sandboxes/web/ports/8000" "$n" "$conc" "$secs")"
echo "$preview"

python3 - "$direct" "$forwarded" "$preview" <<'PY2'
import json, sys
d, f, p = (json.loads(a) for a in sys.argv[1:4])
print()
print("| route | p50 ms | p99 ms | requests/s | p50 ÷ direct | requests/s ÷ direct |")
print("| --- | --- | --- | --- | --- | --- |")
for name, r in (("direct (in the namespace)", d), ("`cordon sandbox port`", f), ("`cordon serve` preview URL", p)):
    print(f"| {name} | {r['p50_ms']} | {r['p99_ms']} | {r['rps']} | {r['p50_ms'] / d['p50_ms']:.2f}× | {r['rps'] / d['rps']:.2f}× |")
PY2
