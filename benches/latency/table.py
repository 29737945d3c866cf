"""One latency table for every backend present (issue 33), in one run.

For each backend: create (`sandbox up`, cold), its first exec, the two
together (a start: what the bare engine's one command does), warm execs
(`sandbox exec H -- /bin/true`), dispose (`sandbox down`), and `cordon
serve`'s HTTP create and exec — p50 and p99 of each, each beside the bare
engine doing the nearest thing, measured in the same run. Times are whole
processes (what an agent host pays per call), from this script.

Arguments (JSON, one per backend): {"name", "args": [...cordon's landing
args], "bare_start": [...] or null, "bare_exec": {"setup": [...],
"exec": [...], "teardown": [...]} or null, "runs": N}. Environment: CORDON
(the binary), RUNS (default 20), WARM (warm execs per sandbox, default 10).
"""
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

cordon = os.environ["CORDON"]
default_runs = int(os.environ.get("RUNS", "20"))
warm_n = int(os.environ.get("WARM", "10"))
devnull = subprocess.DEVNULL


def timed(argv, check=True):
    t = time.perf_counter()
    p = subprocess.run(argv, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ms = (time.perf_counter() - t) * 1000
    if check and p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.decode()[-400:]}")
    return ms, p.stdout.decode()


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


def summary(xs):
    return {"p50": round(statistics.median(xs), 1), "p99": round(pct(xs, 0.99), 1), "n": len(xs)}


def cli_rows(b):
    runs = b.get("runs") or default_runs
    create, first, start, warm, dispose = [], [], [], [], []
    for i in range(runs):
        ms, h = timed([cordon, "sandbox", "up", "-q", "--scope", "latency", "--thread", f"{b['name']}-{i}", *b["args"]])
        h = h.strip()
        create.append(ms)
        ms, _ = timed([cordon, "sandbox", "exec", h, "--", "/bin/true"])
        first.append(ms)
        start.append(create[-1] + ms)
        for _ in range(warm_n):
            ms, _ = timed([cordon, "sandbox", "exec", h, "--", "/bin/true"])
            warm.append(ms)
        ms, _ = timed([cordon, "sandbox", "down", h])
        dispose.append(ms)
    return {
        "create": summary(create),
        "first exec": summary(first),
        "start (create + first exec)": summary(start),
        "warm exec": summary(warm),
        "dispose": summary(dispose),
    }


def bare_rows(b):
    out = {}
    runs = b.get("runs") or default_runs
    if b.get("bare_start"):
        out["start (create + first exec)"] = summary([timed(b["bare_start"])[0] for _ in range(runs)])
    be = b.get("bare_exec")
    if be:
        if be.get("setup"):
            timed(be["setup"])
        try:
            out["warm exec"] = summary([timed(be["exec"])[0] for _ in range(runs * warm_n // 2 or 1)])
        finally:
            if be.get("teardown"):
                timed(be["teardown"], check=False)
    return out


def http_rows(b, addr, token):
    runs = b.get("runs") or default_runs
    head = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(path, body):
        t = time.perf_counter()
        req = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(), headers=head)
        with urllib.request.urlopen(req, timeout=600) as r:
            r.read()
        return (time.perf_counter() - t) * 1000

    create, execs = [], []
    for i in range(runs):
        thread = f"{b['name']}-http-{i}"
        create.append(post("/v1/sandboxes", {"thread": thread}))
        for _ in range(warm_n):
            execs.append(post("/v1/sandboxes/exec", {"thread": thread, "argv": ["/bin/true"]}))
        post("/v1/sandboxes/dispose", {"thread": thread})
    return {"HTTP create": summary(create), "HTTP exec": summary(execs)}


def main():
    backends = [json.loads(a) for a in sys.argv[1:]]
    serve_addr = os.environ.get("SERVE_ADDRS", "{}")
    serve = json.loads(serve_addr)
    token = os.environ.get("SERVE_TOKEN", "")
    with open("/proc/loadavg") as f:
        load_before = " ".join(f.read().split()[:3])
    results = {}
    for b in backends:
        name = b["name"]
        print(f"-- {name}", file=sys.stderr, flush=True)
        r = {"cordon": cli_rows(b), "bare": bare_rows(b)}
        if name in serve:
            r["cordon"].update(http_rows(b, serve[name], token))
        results[name] = r
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])
    print(f"load average {load_before} before, {load_after} after; {os.cpu_count()} cores")
    print()
    print("| backend | what | cordon p50 ms | cordon p99 ms | bare p50 ms | bare p99 ms | p50 ÷ bare |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        for what, c in r["cordon"].items():
            bare = r["bare"].get(what)
            if bare:
                ratio = f"{c['p50'] / bare['p50']:.2f}×"
                bp50, bp99 = bare["p50"], bare["p99"]
            else:
                ratio, bp50, bp99 = "", "", ""
            print(f"| {name} | {what} (n={c['n']}) | {c['p50']} | {c['p99']} | {bp50} | {bp99} | {ratio} |")
    print()
    print("json: " + json.dumps(results))


main()
