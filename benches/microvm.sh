#!/usr/bin/env bash
# The microVM backend (issue 19), measured as ratios in one run:
#  1. boot: a bare `qemu -M microvm -kernel K -initrd bare.cpio` whose init
#     (static C) powers off at once — same machine flags, kernel, command
#     line, memory and CPUs as cordon's `BootSpec` — against the same with
#     cordon's own initramfs under that init (what its size costs), then
#     also with cordon's devices and QEMU -sandbox (all of cordon's QEMU
#     but the jail and the agent), and `cordon run -- true` (boot, first
#     exec, dispose); hyperfine;
#  2. boot to first exec: `cordon sandbox up` + its first `exec -- true`,
#     interleaved with the bare boot; the guest console is timestamped on
#     the host as it is written, which splits cordon's boot into phases
#     (host setup to the first kernel line, kernel, the agent's module
#     loading, image mount, serving, the sandbox up);
#  3. warm exec: `cordon sandbox exec H -- true` into a kept microvm
#     sandbox, against the same into a kept container-rung sandbox (the
#     CLI + keeper part both share) and `/bin/true` timed inside the guest;
#  4. the guest's module loading, .ko.xz (as cordon ships them) against the
#     same modules uncompressed, each timed by a bare static init.
# Needs root, qemu-system-x86_64, a `vmlinuz-*-cloud-amd64` kernel in
# /boot, gcc (static libc), cpio, xz, python3 and hyperfine; skips (exit 0)
# with a message when something is missing. RUNS, TIMELINE_RUNS, MODULE_RUNS and
# EXEC_RUNS scale it; IMAGE names the image (CORDON_IMAGE_STORE is used,
# default /var/cache/cordon-ci-images); CORDON_STATE_DIR as in the others.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "!!!!!!!! SKIPPED microvm.sh: $* !!!!!!!!" >&2; exit 0; }
[ "$(id -u)" = 0 ] || skip "building sandboxes needs root"
for t in qemu-system-x86_64 hyperfine gcc cpio xz python3; do
  command -v "$t" >/dev/null || skip "\`$t\` is not installed"
done
kernel="${CORDON_VM_KERNEL:-$(ls -v /boot/vmlinuz-*-cloud-amd64 2>/dev/null | tail -1)}"
[ -n "$kernel" ] && [ -r "$kernel" ] || skip "no guest kernel (/boot/vmlinuz-*-cloud-amd64)"

target="${CARGO_TARGET_DIR:-$PWD/target}"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile guest --locked -q \
  -p cordon-vm-agent --target x86_64-unknown-linux-gnu ||
  skip "the static guest agent did not build"
cargo build --release --locked -q -p cordon-cli
work="$(mktemp -d)"
# A private copy: others building in a shared target dir cannot swap them.
cp "$target/release/cordon" "$target/x86_64-unknown-linux-gnu/guest/cordon-vm-agent" "$work/"
cordon="$work/cordon"
export CORDON_IMAGE_STORE="${CORDON_IMAGE_STORE:-/var/cache/cordon-ci-images}"
export CORDON_STATE_DIR="${CORDON_STATE_DIR:-$work/state}"
case "$CORDON_STATE_DIR" in /run/cordon*) echo "use a private CORDON_STATE_DIR" >&2; exit 2 ;; esac
image="${IMAGE:-ci-bookworm-python3}"
printf 'kind: run\nimage: %s\n' "$image" >"$work/spec.yaml"
cleanup() {
  for h in $(cat "$work"/handles 2>/dev/null); do "$cordon" sandbox down "$h" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
up() { # up SCOPE BACKEND: a kept sandbox's handle
  local h
  h="$("$cordon" sandbox up -q --scope "$1" --thread t --backend "$2" \
    --min-isolation container --spec "$work/spec.yaml")"
  echo "$h" >>"$work/handles"
  echo "$h"
}

echo "== load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# A warm-up that also builds (or finds) cordon's cached initramfs.
out="$("$cordon" run -q --backend microvm --min-isolation container --spec "$work/spec.yaml" -- uname -r 2>&1)" ||
  skip "cordon cannot run a microvm sandbox here: $out"
echo "guest kernel: $out ($kernel)"

# The bare guest: a static init that powers off at once.
mkdir -p "$work/bare"
cat >"$work/bare/init.c" <<'EOF'
#include <sys/reboot.h>
#include <unistd.h>
int main(void) { sync(); reboot(RB_POWER_OFF); for (;;) pause(); }
EOF
gcc -static -O2 -o "$work/bare/init" "$work/bare/init.c"
(cd "$work/bare" && echo init | cpio -o -H newc --quiet >"$work/bare.cpio")

# cordon's QEMU command line, read off a kept sandbox's QEMU (the one new).
qemus() { { pgrep -f '^[^ ]*qemu-system-x86_64 -M microvm' || true; } | sort; }
qemus >"$work/qemus.before"
h="$(up bench-args microvm)"
pid="$(qemus | comm -13 "$work/qemus.before" - | head -1)"
[ -n "$pid" ] || skip "cannot find the QEMU of a kept sandbox"
qargs="$(tr '\0' ' ' </proc/"$pid"/cmdline)"
"$cordon" sandbox down "$h" >/dev/null
arg() { sed -E "s/.* $1 ([^ ]+).*/\\1/" <<<"$qargs"; }
mem="$(arg -m)" smp="$(arg -smp)" initramfs="$(arg -initrd)"
cmdline="$(sed -E 's/.* -append (.*) -sandbox .*/\1/' <<<"$qargs")"
machine="$(arg -M)" accel="$(arg -accel)" cpu="$(arg -cpu)"
echo "cordon's QEMU: -M $machine -accel $accel -cpu $cpu -m $mem -smp $smp"
echo "cordon's command line: $cmdline"
# The same init over cordon's initramfs (a later archive's /init wins).
cat "$initramfs" "$work/bare.cpio" >"$work/padded.cpio"
echo "initramfs: bare $(stat -c %s "$work/bare.cpio") B, cordon's $(stat -c %s "$initramfs") B ($initramfs)"
python3 - "$initramfs" <<'EOF'
import sys
d = open(sys.argv[1], 'rb').read(); i = 0; rows = []
while i + 110 <= len(d):
    h = d[i:i + 110]; ns = int(h[94:102], 16); fs = int(h[54:62], 16)
    name = d[i + 110:i + 110 + ns - 1].decode(); i = (i + 110 + ns + 3) & ~3
    if name == 'TRAILER!!!': break
    if fs: rows.append((fs, name))
    i = (i + fs + 3) & ~3
for fs, name in sorted(rows, reverse=True): print(f"  {fs:>9} B  {name}")
EOF
bare_cmd() { # bare_cmd INITRD CONSOLE [MORE QEMU ARGS]
  echo "qemu-system-x86_64 -M $machine -accel $accel -cpu $cpu -nodefaults -no-user-config" \
    "-nographic -display none -no-reboot -m $mem -smp $smp -chardev file,id=con,path=$2" \
    "-serial chardev:con -kernel $kernel -initrd $1 -append '$cmdline' ${3:-}"
}
# cordon's devices (control port, image disk) and QEMU's -sandbox, unjailed.
devices="$(sed -E 's/.*(-chardev socket.*-device virtio-blk-device,drive=img).*/\1/' <<<"$qargs" |
  sed -E "s|path=[^,]*ctl.sock|path=$work/ctl.sock|") -sandbox $(sed -E 's/.* -sandbox ([^ ]+).*/\1/' <<<"$qargs")"
echo "cordon's devices: $devices"

runs="${RUNS:-10}"
echo
echo "== 1. boot to poweroff (hyperfine, $runs runs each)"
hyperfine -N --warmup 1 --runs "$runs" --export-json "$work/boot.json" --export-markdown "$work/boot.md" \
  -n bare "$(bare_cmd "$work/bare.cpio" "$work/bare/console.log")" \
  -n bare-cordon-initramfs "$(bare_cmd "$work/padded.cpio" "$work/bare/console2.log")" \
  -n bare-cordon-initramfs-devices "$(bare_cmd "$work/padded.cpio" "$work/bare/console3.log" "$devices")" \
  -n "cordon run -- true" "$cordon run -q --backend microvm --min-isolation container --spec $work/spec.yaml -- true" >/dev/null
cat "$work/boot.md"
python3 - "$work/boot.json" <<'EOF'
import json, sys
r = {x['command']: x for x in json.load(open(sys.argv[1]))['results']}
b = r['bare']['median']
for name, x in r.items():
    print(f"  {name:<32} median {x['median']:.3f} s  ratio to bare {x['median'] / b:.2f}x")
EOF

echo
n="${TIMELINE_RUNS:-5}"
echo "== 2. boot to first exec, phases (host clock on the guest console; $n rounds, interleaved with the bare boot)"
cat >"$work/timeline.py" <<'EOF'
import glob, json, os, subprocess, sys, time
cordon, spec, bare = sys.argv[1], sys.argv[2], sys.argv[3]
def started(path, t0b):
    """When the process whose command line names `path` was forked (s since
    t0b, CLOCK_BOOTTIME; 10 ms resolution), or None."""
    for pid in os.listdir('/proc'):
        try:
            if pid.isdigit() and path.encode() in open(f'/proc/{pid}/cmdline', 'rb').read():
                ticks = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[19])
                return ticks / os.sysconf('SC_CLK_TCK') - t0b
        except OSError:
            pass
    return None
def follow(console_glob, proc, t0, stop):
    """Timestamps each console line as it appears, until stop() holds; the
    first event is QEMU's start."""
    t0b = t0 - time.time() + time.clock_gettime(time.CLOCK_BOOTTIME)
    path, seen, events, buf, qemu = None, 0, [], b'', None
    before = set(glob.glob(console_glob))
    while True:
        if path is None:
            new = [p for p in glob.glob(console_glob) if p not in before]
            path = new[0] if new else None
        if path and qemu is None:
            qemu = started(path, t0b)
            if qemu is not None:
                events.append((qemu, 'QEMU started'))
        if path:
            try:
                with open(path, 'rb') as f:
                    f.seek(seen); chunk = f.read()
            except FileNotFoundError:
                chunk = b''
            seen += len(chunk); buf += chunk
            while b'\n' in buf:
                line, buf = buf.split(b'\n', 1)
                events.append((time.time() - t0, line.decode(errors='replace').strip()))
        if stop():
            return sorted(events)
        time.sleep(0.002)
def bare_round():
    con = f'/tmp/vmb-bare-{os.getpid()}.log'
    if os.path.exists(con): os.remove(con)
    cmd = [a.replace('@CONSOLE@', con) for a in json.loads(bare)]
    t0 = time.time(); p = subprocess.Popen(cmd)
    ev = follow(con, p, t0, lambda: p.poll() is not None)
    total = time.time() - t0; os.remove(con)
    return total, ev
def cordon_round():
    t0 = time.time()
    p = subprocess.Popen([cordon, 'sandbox', 'up', '-q', '--scope', 'bench-tl', '--thread', 't',
        '--backend', 'microvm', '--min-isolation', 'container', '--spec', spec], stdout=subprocess.PIPE, text=True)
    ev = follow('/tmp/cordon-microvm-*/run/console.log', p, t0, lambda: p.poll() is not None)
    h = p.stdout.read().strip(); t_up = time.time() - t0
    subprocess.run([cordon, 'sandbox', 'exec', h, '--', 'true'], check=True)
    t_exec = time.time() - t0
    subprocess.run([cordon, 'sandbox', 'down', h], check=True, stdout=subprocess.DEVNULL)
    return t_up, t_exec, ev
def at(ev, needle):
    return next((t for t, l in ev if needle in l), float('nan'))
marks = [('QEMU started', 'QEMU started'), ('first kernel line', '] '), ('agent up (kernel booted)', 'cordon-vm-agent: up'),
         ('modules loaded', 'cordon-vm-agent: root moved'), ('image mounted', 'cordon-vm-agent: image '),
         ('warm-sandbox check', 'cordon-vm-agent: this kernel can hold'), ('serving', 'cordon-vm-agent: serving'), ('sandbox up (guest)', 'the sandbox is up')]
rows = []
for i in range(int(sys.argv[4])):
    bt, bev = bare_round()
    up, ex, ev = cordon_round()
    last = ev
    rows.append(dict(bare=bt, bare_qemu=at(bev, 'QEMU started'), bare_first=at(bev, '] '), up=up, first_exec=ex,
                     **{k: at(ev, n) for k, n in marks}))
    print(f"  round {i + 1}: bare boot-to-poweroff {bt:.3f} s; cordon up {up:.3f} s, first exec done {ex:.3f} s", flush=True)
med = lambda k: sorted(r[k] for r in rows)[len(rows) // 2]
print(f"  medians (s since launch):")
print(f"    bare: QEMU started {med('bare_qemu'):.3f}, first kernel line {med('bare_first'):.3f}, powered off {med('bare'):.3f}")
prev = 0.0
for k, _ in marks + [('up', None), ('first_exec', None)]:
    print(f"    cordon: {k:<26} {med(k):.3f}  (+{med(k) - prev:.3f})"); prev = med(k)
print(f"  boot to first exec {med('first_exec'):.3f} s = {med('first_exec') / med('bare'):.2f}x the bare boot-to-poweroff ({med('bare'):.3f} s)")
print(f"  ratio per round: " + ', '.join(f"{r['first_exec'] / r['bare']:.2f}" for r in rows))
print("  the last round's console, host clock (s since `sandbox up` started):")
for t, l in last: print(f"    {t:7.3f}  {l}")
EOF
bare_json="$(python3 -c 'import json,shlex,sys; print(json.dumps(shlex.split(sys.argv[1])))' "$(bare_cmd "$work/bare.cpio" @CONSOLE@)")"
python3 "$work/timeline.py" "$cordon" "$work/spec.yaml" "$bare_json" "$n"

echo
erun="${EXEC_RUNS:-100}"
echo "== 3. warm exec of true (hyperfine, $erun runs each)"
hv="$(up bench-vm microvm)"
hc="$(up bench-ct container)"
hyperfine -N --warmup 5 --runs "$erun" --export-json "$work/exec.json" --export-markdown "$work/exec.md" \
  -n microvm "$cordon sandbox exec $hv -- true" \
  -n container "$cordon sandbox exec $hc -- true" >/dev/null
cat "$work/exec.md"
guest="$("$cordon" sandbox exec "$hv" -- sh -c 'n=200; i=0; s=$(date +%s%N); while [ $i -lt $n ]; do /bin/true; i=$((i+1)); done; m=$(date +%s%N); i=0; while [ $i -lt $n ]; do i=$((i+1)); done; e=$(date +%s%N); echo $(( ((m-s)-(e-m))/n ))')"
python3 - "$work/exec.json" "$guest" <<'EOF'
import json, sys
r = {x['command']: x for x in json.load(open(sys.argv[1]))['results']}
vm, ct, g = r['microvm']['median'], r['container']['median'], int(sys.argv[2]) / 1e9
print(f"  /bin/true inside the guest (fork+exec+wait from sh, loop cost taken out): {g * 1e3:.2f} ms")
print(f"  cordon sandbox exec, microvm {vm * 1e3:.2f} ms, container {ct * 1e3:.2f} ms")
print(f"  microvm round trip minus in-guest true: {(vm - g) * 1e3:.2f} ms (ratio {vm / g:.2f}x)")
print(f"  microvm minus container (the VM's part beyond CLI + keeper): {(vm - ct) * 1e3:.2f} ms")
print(f"  microvm minus container minus in-guest true: {(vm - ct - g) * 1e3:.2f} ms")
EOF
echo
mr="${MODULE_RUNS:-3}"
echo "== 4. loading the guest's modules: .ko.xz (as cordon ships them) against plain .ko ($mr boots each, interleaved)"
# A static init that finit_module()s the modules cordon's initramfs loads, in
# its order, timing the calls, then powers off.
mkdir -p "$work/mod"
cat >"$work/mod/init.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(void) {
  mkdir("/dev", 0755); mount("devtmpfs", "/dev", "devtmpfs", 0, 0);
  dup2(open("/dev/console", O_WRONLY), 1);
  char ext[16] = "", name[64]; FILE *o = fopen("/order", "r");
  double total = 0;
  if (o && fscanf(o, "%15s", ext) == 1)
    while (fscanf(o, "%63s", name) == 1) {
      char p[96]; snprintf(p, sizeof p, "/m/%s%s", name, ext);
      int fd = open(p, O_RDONLY | O_CLOEXEC); double s = now();
      long r = syscall(SYS_finit_module, fd, "", strstr(ext, "xz") ? 4 : 0);
      total += now() - s; if (r) printf("MODFAIL %s\n", p); close(fd);
    }
  printf("MODTOTAL %.1f\n", total * 1e3);
  fflush(stdout); sync(); reboot(RB_POWER_OFF); for (;;) pause();
}
EOF
gcc -static -O2 -o "$work/mod/init" "$work/mod/init.c"
mkdir -p "$work/mod/x"
(cd "$work/mod/x" && cpio -id --quiet 'modules/*' <"$initramfs")
mods="$(sed 's|.*/||; s|\.ko.*||' "$work/mod/x/modules/order" | tr '\n' ' ')"
for v in xz plain; do
  mkdir -p "$work/mod/$v/m" && cp "$work/mod/init" "$work/mod/$v/"
  for m in $mods; do
    if [ $v = xz ]; then cp "$work/mod/x/modules/$m.ko.xz" "$work/mod/$v/m/"
    else xz -dc "$work/mod/x/modules/$m.ko.xz" >"$work/mod/$v/m/$m.ko"; fi
  done
  { if [ $v = xz ]; then echo .ko.xz; else echo .ko; fi; tr ' ' '\n' <<<"$mods"; } >"$work/mod/$v/order"
  (cd "$work/mod/$v" && find . -mindepth 1 | sed 's|^\./||' | cpio -o -H newc --quiet >"$work/mod/$v.cpio")
done
echo "  modules: $mods; an initramfs of them: xz $(stat -c %s "$work/mod/xz.cpio") B, plain $(stat -c %s "$work/mod/plain.cpio") B"
for i in $(seq "$mr"); do
  for v in xz plain; do
    eval "$(bare_cmd "$work/mod/$v.cpio" "$work/mod/$v.log")"
    echo "$v $(sed -n 's/^MODTOTAL //p' "$work/mod/$v.log" | tr -d '\r')" >>"$work/mod/totals"
    grep MODFAIL "$work/mod/$v.log" || true
  done
done
python3 - "$work/mod/totals" <<'EOF'
import sys
t = {}
for l in open(sys.argv[1]):
    v, ms = l.split(); t.setdefault(v, []).append(float(ms))
med = {v: sorted(x)[len(x) // 2] for v, x in t.items()}
print(f"  finit_module total, median: xz {med['xz']:.1f} ms, plain {med['plain']:.1f} ms"
      f" (plain/xz {med['plain'] / med['xz']:.2f}); all runs (ms): {t}")
EOF
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
