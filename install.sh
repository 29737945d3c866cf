#!/usr/bin/env bash
# Installs cordon from this checkout: the `cordon` binary and, beside it,
# the microVM backend's guest agent (`cordon-vm-agent`, linked statically:
# it runs as a guest's init), so every backend this machine can run is
# usable after this one command. Then choose this host's floor once:
# `cordon setup` shows what the machine holds, `cordon setup
# --min-isolation RUNG` records it.
#
# Arguments are passed to both `cargo install`s (e.g. `--root DIR`).
# Builds land in target/ (kept, so a second install, or a build of the
# tests, reuses them).
set -euo pipefail
cd "$(dirname "$0")"
command -v cargo >/dev/null || {
  echo "install.sh: needs a Rust toolchain (cargo): https://rustup.rs, or Debian's \`apt-get install cargo\`" >&2
  exit 1
}
target="${CARGO_TARGET_DIR:-$PWD/target}"
echo "install.sh: installing cordon (release build; the first one takes a few minutes)" >&2
cargo install --locked --path crates/cordon-cli --target-dir "$target" "$@"
echo "install.sh: installing the microVM guest agent beside it (static)" >&2
RUSTFLAGS="-C target-feature=+crt-static" \
  cargo install --locked --path crates/cordon-vm-agent --profile guest \
  --target x86_64-unknown-linux-gnu --target-dir "$target" "$@"
bin="$(command -v cordon || true)"
echo "install.sh: done${bin:+ ($bin)}. Next: \`cordon setup\` shows what this machine can hold; \`cordon setup --min-isolation RUNG\` records your floor." >&2
