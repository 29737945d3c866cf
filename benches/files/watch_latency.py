"""Watch latency and a burst's bound (issue 32), for benches/files-api.sh.

Runs `cordon sandbox watch H` and, in the sandbox, a writer that makes N
files 20 ms apart, each stamped with the time it was written (the same
wall clock inside and out); the latency of each is when its `created`
line reached this reader minus that stamp. Then a burst of BURST writes
with the reader reading, and the watching processes' peak memory.
Usage: watch_latency.py CORDON HANDLE N BURST
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

cordon, handle, n, burst = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# A directory of this run's own: files already there would change, not be made.
D = f"lat-{os.getpid()}"

def run(script):
    return subprocess.run(
        [cordon, "sandbox", "exec", handle, "--", "python3", "-c", script],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True,
    ).stdout


run(f"import os; os.makedirs('{D}', exist_ok=True)")
watch = subprocess.Popen(
    [cordon, "sandbox", "watch", handle, D],
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
)
seen = {}
overflows = [0]
lines = [0]


def reader():
    for line in watch.stdout:
        now = time.time()
        lines[0] += 1
        e = json.loads(line)
        if e.get("event") == "overflow":
            overflows[0] += 1
        p = e.get("path", "")
        if e.get("event") == "created" and p not in seen:
            seen[p] = now


threading.Thread(target=reader, daemon=True).start()
# The watch is in place once a change made after it is seen.
for i in range(100):
    run(f"open('{D}/ready-{i}', 'w').close()")
    time.sleep(0.2)
    if f"{D}/ready-{i}" in seen:
        break
else:
    sys.exit("the watch never saw a change")
stamps = run(
    "import time\n"
    f"for i in range({n}):\n"
    f"    t = time.time(); open(f'{D}/f{{i}}', 'w').close(); print(i, t)\n"
    "    time.sleep(0.02)\n"
)
time.sleep(1)
lat = []
for line in stamps.split("\n"):
    if not line:
        continue
    i, t = line.split()
    got = seen.get(f"{D}/f{i}")
    if got is not None:
        lat.append((got - float(t)) * 1000)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
print(f"watch latency, {len(lat)} of {n} files seen: p50 {q(0.5):.1f} ms, p95 {q(0.95):.1f} ms, max {lat[-1]:.1f} ms")


def peak(pattern):
    """The peak resident memory (VmHWM, KiB) of processes whose command line matches."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            if re.search(pattern, cmd):
                hwm = re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{pid}/status").read())
                out[pid] = (cmd[:60], int(hwm.group(1)))
        except OSError:
            pass
    return out


import signal


def burst_once(stopped):
    """BURST writes; with `stopped`, the reader (`sandbox watch`) is held
    still meanwhile (SIGSTOP), so the watch must bound what waits."""
    before = peak(re.escape(handle) + "|sandbox watch")
    lines_before, over_before = lines[0], overflows[0]
    if stopped:
        os.kill(watch.pid, signal.SIGSTOP)
    t0 = time.time()
    run(
        "import os\n"
        f"for i in range({burst}):\n"
        f"    fd = os.open(f'{D}/b{{i % 5000}}', os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.write(fd, b'x'); os.close(fd)\n"
    )
    took = time.time() - t0
    if stopped:
        time.sleep(1)
        os.kill(watch.pid, signal.SIGCONT)
    time.sleep(2)
    after = peak(re.escape(handle) + "|sandbox watch")
    how = "the reader held still" if stopped else "the reader reading"
    print(f"burst, {how}: {burst} writes in {took:.1f} s; {lines[0] - lines_before} events reached the reader, {overflows[0] - over_before} overflow(s)")
    for pid, (cmd, hwm) in sorted(after.items()):
        was = before.get(pid, (cmd, 0))[1]
        print(f"  peak memory {hwm / 1024:.1f} MiB (before {was / 1024:.1f} MiB): {cmd}")


burst_once(False)
burst_once(True)
# The watch goes on after an overflow.
run(f"open('{D}/after-burst', 'w').close()")
time.sleep(1)
print("after the bursts, a new file seen:", f"{D}/after-burst" in seen)
watch.terminate()
