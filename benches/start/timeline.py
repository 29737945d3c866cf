#!/usr/bin/env python3
"""Medians of where one `cordon run -- /bin/true` spends its wall time,
from `perf script -F comm,pid,tid,time,event,trace` of the kernel's
tracepoints (benches/start-timeline.sh records them). Each run is the
process tree of one exec of `cordon`; each milestone's time is measured
from that exec, and each step is the gap between two milestones."""

import re
import statistics
import sys

LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+(?P<time>[\d.]+):\s+(?P<event>\S+):\s*(?P<trace>.*)$")


def parse(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                d = m.groupdict()
                d["pid"], d["tid"], d["time"] = int(d["pid"]), int(d["tid"]), float(d["time"])
                out.append(d)
    return out


def runs(events):
    """Each run: the events of the tree under one exec of cordon."""
    found, current, tree = [], None, set()
    for e in events:
        ev, tr = e["event"], e["trace"]
        if ev == "sched:sched_process_exec" and tr.startswith("filename=") and tr.split()[0].endswith("/cordon"):
            current = {"t0": e["time"], "root": e["pid"], "events": []}
            tree = {e["pid"]}
            found.append(current)
            continue
        if current is None:
            continue
        if ev == "sched:sched_process_fork":
            m = re.search(r"child_pid=(\d+)", tr)
            if m and (e["pid"] in tree or e["tid"] in tree):
                tree.add(int(m.group(1)))
        if e["pid"] in tree or e["tid"] in tree:
            current["events"].append(e)
    return found


def milestones(run):
    t0, root, got = run["t0"], run["root"], {}

    def first(name, t):
        got.setdefault(name, (t - t0) * 1000)

    def last(name, t):
        got[name] = (t - t0) * 1000

    init_pid, true_pid = None, None
    for e in run["events"]:
        ev, tr, t = e["event"], e["trace"], e["time"]
        if ev == "syscalls:sys_enter_mount" and e["pid"] == root:
            first("volume mounted (call)", t)
        elif ev == "sched:sched_process_exec" and "cordon-init" in tr:
            first("cordon-init exec'd", t)
            init_pid = e["pid"]
        elif ev == "syscalls:sys_enter_unshare" and e["pid"] == init_pid:
            first("stage 1 unshare", t)
        elif ev == "sched:sched_process_exec" and "/proc/self/exe" in tr:
            first("stage 2 exec'd", t)
        elif ev == "syscalls:sys_enter_pivot_root":
            first("pivot_root", t)
        elif ev == "sched:sched_process_exec" and tr.startswith("filename=/usr/bin/true"):
            first("/bin/true exec'd", t)
            true_pid = e["pid"]
        elif ev == "sched:sched_process_exit" and e["pid"] == true_pid and true_pid is not None:
            first("/bin/true exited", t)
        elif ev == "syscalls:sys_enter_umount" and e["pid"] == root:
            last("volume unmounted (call)", t)
        elif ev == "sched:sched_process_exit" and e["pid"] == root and e["tid"] == root:
            last("cordon exited", t)
    return got


def main():
    rung, path = sys.argv[1], sys.argv[2]
    all_runs = [milestones(r) for r in runs(parse(path))]
    all_runs = [r for r in all_runs if "cordon exited" in r and "/bin/true exited" in r]
    if not all_runs:
        sys.exit(f"{rung}: no complete run in {path}")
    names = []
    for r in all_runs:
        for n in sorted(r, key=r.get):
            if n not in names:
                names.append(n)
    med = {n: statistics.median(r[n] for r in all_runs if n in r) for n in names}
    order = sorted(names, key=med.get)
    print(f"\n{rung} rung: {len(all_runs)} runs; median ms from `cordon`'s exec")
    print("| milestone | at (median) | step from the one before |")
    print("| --- | --- | --- |")
    prev = 0.0
    for n in order:
        print(f"| {n} | {med[n]:.2f} | {med[n] - prev:+.2f} |")
        prev = med[n]


if __name__ == "__main__":
    main()
