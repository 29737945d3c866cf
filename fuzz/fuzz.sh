#!/usr/bin/env bash
# Fuzzes cordon's parsers on the stable toolchain (see "Fuzzing" in
# docs/security.md):
#   fuzz/fuzz.sh                     every target, FUZZ_SECONDS (300) each
#   FUZZ_SECONDS=20 fuzz/fuzz.sh load_spec egress_sni
# Needs cargo-fuzz (`cargo install --locked cargo-fuzz`, installed here when
# missing). RUSTC_BOOTSTRAP=1 lets the stable compiler take the -Z flags
# cargo-fuzz passes; no nightly toolchain is needed. No sanitizer: cordon
# forbids unsafe code, so libFuzzer looks for panics, hangs (FUZZ_TIMEOUT
# seconds per input) and memory blow-ups (2 GiB).
#
# One process (libFuzzer's default: no -jobs, no -workers), at `nice`. New
# inputs that add coverage are merged into fuzz/corpus/TARGET (kept in the
# repository, and replayed by `cargo test`) unless FUZZ_MERGE=0; a crash,
# hang or blow-up is left in fuzz/artifacts/TARGET and the script exits
# non-zero after running the other targets. FUZZ_TARGET_DIR: where to build
# (default fuzz/target; CI keeps one across runs).
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
seconds="${FUZZ_SECONDS:-300}"
per_input="${FUZZ_TIMEOUT:-10}"
all=(load_policy load_spec keeper_wire init_wire egress_target egress_sni egress_inspected image_import vm_frames)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
build=(-s none)
[ -z "${FUZZ_TARGET_DIR:-}" ] || build+=(--target-dir "$FUZZ_TARGET_DIR")
nice cargo fuzz build "${build[@]}"
failed=()
for t in "${targets[@]}"; do
  new="new/$t"
  rm -rf "$new" && mkdir -p "$new" "corpus/$t" "artifacts/$t"
  echo "== fuzz $t for ${seconds}s"
  rc=0
  nice cargo fuzz run "${build[@]}" "$t" "$new" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout="$per_input" -rss_limit_mb=2048 \
    -print_final_stats=1 >"new/$t.log" 2>&1 || rc=$?
  grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec|SUMMARY|.*panicked at)' \
    "new/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "new/$t.log" >&2
    failed+=("$t")
    continue
  fi
  if [ "${FUZZ_MERGE:-1}" = 1 ] && [ -n "$(ls -A "$new")" ]; then
    nice cargo fuzz run "${build[@]}" "$t" "corpus/$t" "$new" -- -merge=1 -use_counters=0 2>&1 \
      | grep -E 'MERGE-OUTER: [0-9]+ new files' || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found something in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
