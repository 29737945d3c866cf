"""Small HTTP requests, one connection each, against ADDR (host:port, or
host:port/prefix with an AUTH header line in the environment):
sequential for latency (p50, p99), then CONCURRENCY threads for a fixed
number of seconds for requests/s. Prints one JSON line."""
import json
import socket
import statistics
import sys
import threading
import time

import os

addr, n, concurrency, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
# ADDR may carry a path prefix (a preview URL's), and AUTH a header line.
hostport, _, prefix = addr.partition("/")
host, port = hostport.rsplit(":", 1)
port = int(port)
auth = os.environ.get("AUTH")
REQ = (f"GET /{prefix + '/' if prefix else ''}small HTTP/1.0\r\nHost: x\r\n"
       + (f"{auth}\r\n" if auth else "") + "\r\n").encode()


def one():
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(REQ)
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    if not got.startswith(b"HTTP/1.0 200") and not got.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"unexpected answer: {got[:80]!r}")


for _ in range(20):
    one()
lat = []
for _ in range(n):
    t = time.perf_counter()
    one()
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
done = [0] * concurrency
stop = time.perf_counter() + seconds


def worker(i):
    while time.perf_counter() < stop:
        one()
        done[i] += 1


threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
t0 = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.perf_counter() - t0
print(json.dumps({
    "p50_ms": round(statistics.median(lat), 3),
    "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 3),
    "rps": round(sum(done) / elapsed, 1),
}))
