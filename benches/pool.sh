#!/usr/bin/env bash
# Warm pools (issue 31): a claim from a pool through `cordon serve` (HTTP
# create, then the first exec returns) against a cold create of the same
# spec, each RUNS times (default 200) in one run, at the container rung
# under `cordon:default` (the server's `min_isolation: container`), on
# loopback, one connection per request (as a new agent session makes
# them). Between claims the bench waits for the pool to hold one again
# (its refill is a cold start of its own, off the caller's path). Prints
# p50 and p99 of each and their ratio. Needs root and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED pool.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
runs="${RUNS:-200}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
digest() { printf %s "$1" | sha256sum | cut -c1-64; }
printf 'kind: run\nimage: host\n' > "$work/spec.yaml"
cat > "$work/serve.yaml" <<YAML
listen: 127.0.0.1:0
min_isolation: container
sandboxes: {state_dir: state, dispose_on_shutdown: true}
limits: {max_sandboxes: 64, requests_per_second: 1000}
credentials:
  - {name: pooled, token_sha256: $(digest token-p), scope: bench, identity: {namespace: bench, name: agent}}
  - {name: cold, token_sha256: $(digest token-c), scope: bench-cold, identity: {namespace: bench, name: agent}}
pools:
  - {name: warm, spec: spec.yaml, size: 10, credential: pooled}
YAML
"$cordon" serve --config "$work/serve.yaml" > "$work/out" 2> "$work/err" </dev/null &
server=$!
for _ in $(seq 1 100); do grep -q listening "$work/out" 2>/dev/null && break; sleep 0.1; done
addr="$(sed -n 's#^listening on http://##p' "$work/out" | head -n1)"
[ -n "$addr" ] || { cat "$work/err" >&2; exit 1; }
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), $runs of each"
python3 - "$addr" "$runs" <<'PY'
import http.client, json, sys, time
addr, runs = sys.argv[1], int(sys.argv[2])
host, port = addr.rsplit(":", 1)
def call(token, method, path, body=None):
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse(); data = r.read(); c.close()
    if r.status != 200:
        raise SystemExit(f"{method} {path}: {r.status} {data[:300]!r}")
    return data
def ready():
    text = call("token-p", "GET", "/metrics").decode()
    for l in text.splitlines():
        if l.startswith('cordon_pool_ready{pool="warm"} '):
            return int(l.split()[-1])
    return 0
def one(token, thread):
    t0 = time.perf_counter()
    call(token, "POST", "/v1/sandboxes", {"thread": thread})
    call(token, "POST", "/v1/sandboxes/exec", {"thread": thread, "argv": ["/bin/true"]})
    dt = (time.perf_counter() - t0) * 1000
    call(token, "POST", "/v1/sandboxes/dispose", {"thread": thread})
    return dt
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
deadline = time.time() + 120
while ready() < 10:
    if time.time() > deadline: raise SystemExit("the pool never filled")
    time.sleep(0.1)
claims, colds = [], []
for i in range(runs):
    while ready() < 1: time.sleep(0.02)
    claims.append(one("token-p", f"claim-{i}"))
for i in range(runs):
    colds.append(one("token-c", f"cold-{i}"))
for name, xs in (("cold create (baseline)", colds), ("claim from a pool", claims)):
    print(f"{name:24} p50 {pct(xs, 50):7.2f} ms   p99 {pct(xs, 99):7.2f} ms")
print(f"ratio (claim / cold):    p50 {pct(claims, 50) / pct(colds, 50):.2f}x   p99 {pct(claims, 99) / pct(colds, 99):.2f}x")
PY
