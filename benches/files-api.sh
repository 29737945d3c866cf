#!/usr/bin/env bash
# The files API and watch (issue 32), at the container rung under
# `cordon:default` (the README's `--min-isolation container`), one run:
#  1. through the CLI (hyperfine): `sandbox ls --depth 2` of a
#     10,000-file tree against `sandbox exec -- ls -laR`; `sandbox cat` of
#     a 10 MiB file against `sandbox exec -- cat`; 1,000 small files
#     written with `sandbox put` against 1,000 `sandbox exec -- sh -c
#     'cat > f'` (stdin carried);
#  2. through `cordon serve` (curl on loopback, hyperfine): the files
#     endpoints against `POST /v1/sandboxes/exec` running the same;
#  3. watch: the latency from a write in the sandbox to the host's reader
#     of `sandbox watch` (p50, p95), and a burst of BURST writes (default
#     100,000): events read, overflows, the watching processes' peak memory.
#  4. through the library: `Sandbox::files` against `Sandbox::exec` of the
#     same commands (crates/cordon-cli/benches/serve_http.rs, `files`).
# Needs root, hyperfine, curl. RUNS scales the hyperfine runs (default 10),
# WRITES the small files (default 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "!!!!!!!! SKIPPED files-api.sh: building sandboxes needs root !!!!!!!!" >&2
  exit 1
fi
for t in hyperfine curl python3; do
  command -v "$t" >/dev/null || { echo "files-api.sh needs $t (apt-get install $t)" >&2; exit 1; }
done
runs="${RUNS:-10}"
writes="${WRITES:-1000}"
burst="${BURST:-100000}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -q -p cordon-cli
cordon="$target/release/cordon"
work="$(mktemp -d)"
export CORDON_STATE_DIR="$work/state"
h=""
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  [ -n "$h" ] && "$cordon" sandbox down "$h" </dev/null >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"

h="$("$cordon" sandbox up -q --scope bench-files --thread t --min-isolation container </dev/null)"
"$cordon" sandbox exec "$h" -- python3 -c "
import os
for d in range(100):
    os.makedirs(f'tree/d{d}', exist_ok=True)
    for f in range(100):
        open(f'tree/d{d}/f{f}', 'w').close()
open('big', 'wb').write(os.urandom(10 << 20))
os.makedirs('w', exist_ok=True)
" </dev/null
head -c 100 /dev/urandom > "$work/small"

echo "== 1. the CLI (per command; the writes: $writes files each)"
hyperfine -N -w 2 -r "$runs" \
  -n "cli ls --depth 2 (10,000 files)" "$cordon sandbox ls $h tree --depth 2" \
  -n "cli exec ls -laR" "$cordon sandbox exec $h -- ls -laR tree" \
  -n "cli cat (10 MiB)" "$cordon sandbox cat $h big" \
  -n "cli exec cat" "$cordon sandbox exec $h -- cat big" </dev/null
hyperfine -w 1 -r 3 \
  -n "cli put x$writes" "for i in \$(seq $writes); do $cordon sandbox put $h $work/small w/p\$i </dev/null; done" \
  -n "cli exec cat > f x$writes" "for i in \$(seq $writes); do $cordon sandbox exec $h -- sh -c \"cat > w/e\$i\" < $work/small; done"

echo "== 2. HTTP (cordon serve on loopback)"
token="bench-files-token"
sha="$(printf %s "$token" | sha256sum | cut -d' ' -f1)"
cat > "$work/serve.yaml" <<YAML
listen: 127.0.0.1:0
min_isolation: container
sandboxes: {state_dir: $work/serve-state, dispose_on_shutdown: true}
limits: {max_request_bytes: 16MiB, requests_per_second: 100000}
credentials:
  - name: bench
    token_sha256: $sha
    scope: bench
    identity: {namespace: bench, name: agent, attested: true}
YAML
"$cordon" serve --config "$work/serve.yaml" </dev/null >"$work/serve.out" 2>&1 &
server=$!
addr=""
for _ in $(seq 1 100); do
  addr="$(grep -o '127.0.0.1:[0-9]*' "$work/serve.out" | head -n1 || true)"
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$work/serve.out" >&2; exit 1; }
api() { curl -fsS -H "authorization: Bearer $token" -H 'content-type: application/json' "http://$addr$1" -d "$2"; }
api /v1/sandboxes '{"thread":"t"}' >/dev/null
api /v1/sandboxes/exec '{"thread":"t","argv":["python3","-c","import os\nfor d in range(100):\n    os.makedirs(f\"tree/d{d}\", exist_ok=True)\n    [open(f\"tree/d{d}/f{f}\", \"w\").close() for f in range(100)]\nopen(\"big\", \"wb\").write(os.urandom(10 << 20))\nopen(\"mid\", \"wb\").write(os.urandom(900 << 10))"]}' >/dev/null
c="curl -fsS -o /dev/null -H 'authorization: Bearer $token' -H 'content-type: application/json'"
small_b64="$(base64 -w0 < "$work/small")"
hyperfine -w 2 -r "$runs" \
  -n "http list depth 2 (10,000 files)" "$c http://$addr/v1/sandboxes/files/list -d '{\"thread\":\"t\",\"path\":\"tree\",\"depth\":2}'" \
  -n "http exec ls -laR" "$c http://$addr/v1/sandboxes/exec -d '{\"thread\":\"t\",\"argv\":[\"ls\",\"-laR\",\"tree\"]}'" \
  -n "http read (10 MiB)" "$c http://$addr/v1/sandboxes/files/read -d '{\"thread\":\"t\",\"path\":\"big\"}'" \
  -n "http read (900 KiB)" "$c http://$addr/v1/sandboxes/files/read -d '{\"thread\":\"t\",\"path\":\"mid\"}'" \
  -n "http exec cat (900 KiB; exec keeps 1 MiB of stdout)" "$c http://$addr/v1/sandboxes/exec -d '{\"thread\":\"t\",\"argv\":[\"cat\",\"mid\"]}'" \
  -n "http write (100 B)" "$c http://$addr/v1/sandboxes/files -d '{\"thread\":\"t\",\"path\":\"w/h\",\"content_base64\":\"$small_b64\"}'" \
  -n "http exec write (100 B, stdin)" "$c http://$addr/v1/sandboxes/exec -d '{\"thread\":\"t\",\"argv\":[\"sh\",\"-c\",\"cat > w/x\"],\"stdin\":\"0123456789\"}'"

echo "== 3. watch"
python3 benches/files/watch_latency.py "$cordon" "$h" 200 "$burst"

echo "== 4. the library (Sandbox::files on a host built as the server builds its own, a keeper per sandbox)"
RUNS="$runs" WRITES="$writes" CORDON_BIN="$cordon" \
  cargo bench --locked -q -p cordon-cli --bench serve_http -- files </dev/null
