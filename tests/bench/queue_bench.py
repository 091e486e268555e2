#!/usr/bin/env python3
"""Queue service benchmark (issue 13), in one run, ratios with the absolute
numbers beside them:

  (a) put throughput, 1 KiB items, concurrency 16 (load_client, keep-alive):
      the embedded store (default --queue-fsync=batch, every put durable
      before its 200) / the Redis store through the same server, and /
      `redis-benchmark` XADD of the same size directly (the physical
      baseline, Redis's default of no fsync; goal: embedded >= 0.5x), and /
      the same XADD with Redis's appendfsync always (every XADD durable
      before its reply, as the embedded store's puts are);
  (b) end-to-end queue latency of `simple` (put -> the sink result seen by
      a watching client) at concurrency 1 and 16, beside the synchronous
      HTTP infer latency of the same request (load_client). The puts and
      the watch are Python clients (requests, websocket-client), whose own
      cost bounds the items/s of this table at 16;
  (c) the queue's own throughput: load_client puts `simple` requests at
      concurrency 16 for --duration seconds while the built-in worker runs
      them into the sink; items/s is the puts over the time from the first
      put to the last sink item, beside synchronous HTTP infer/s.

Never asserted; prints markdown. Needs build/ (osprey, load_client) and
the test venv (requests, websocket-client). The Redis columns need
redis-server and redis-benchmark, and an osprey built with the Redis store.

usage: .venv/bin/python tests/bench/queue_bench.py [--duration S] [--latency-items N]
"""

import argparse
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import harness  # noqa: E402
import queue_util as qu  # noqa: E402

LOAD = ROOT / "build" / "tests" / "bench" / "load_client"


def load(url, path, body_file, concurrency, duration, mode=None, warmup=0.5):
    argv = [str(LOAD), "--url", url, "--path", path, "--concurrency",
            str(concurrency), "--threads", "2", "--duration", str(duration),
            "--warmup", str(warmup), "--json"]
    argv += ["--mode", mode] if mode else ["--body-file", body_file,
                                           "--verify-every", "0"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    r = json.loads(out.stdout)
    if r["errors"]:
        raise RuntimeError(f"load_client errors: {r['first_error']}")
    return r


def start(repo, args, workdir):
    return harness.OspreyServer(repo, ["--http-address=127.0.0.1"] + args,
                                workdir=workdir).start()


def put_throughput(args, tmp, body, duration, redis):
    repo = qu.empty_repo(tmp)
    rows = {}
    common = ["--queue-service=bench", "--queue-max-length=1000000000"]
    server = start(repo, common + [f"--queue-dir={tmp}/qdir"], tmp / "emb")
    try:
        rows["embedded"] = load(server.hostport, "/api/predict/bench", body, 16,
                                duration)["requests_per_s"]
    finally:
        server.stop()
    if redis and qu.redis_store_available():
        server = start(repo, common + [f"--queue-store={redis.url}"], tmp / "red")
        try:
            rows["redis"] = load(server.hostport, "/api/predict/bench", body, 16,
                                 duration)["requests_per_s"]
        finally:
            server.stop()
    if redis and shutil.which("redis-benchmark"):
        rows["xadd"] = redis_benchmark_xadd(redis.port)
        # Every XADD durable before its reply: Redis writes its AOF and
        # fsyncs once per event-loop turn, before answering that turn's
        # clients (its group commit).
        redis_command(redis.port, "CONFIG SET appendonly yes")
        redis_command(redis.port, "CONFIG SET appendfsync always")
        time.sleep(1)  # the AOF rewrite that appendonly yes starts
        rows["xadd_always"] = redis_benchmark_xadd(redis.port)
    return rows


def redis_command(port, inline):
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(inline.encode() + b"\r\n")
        reply = s.recv(256)
    if not reply.startswith(b"+OK"):
        raise RuntimeError(f"redis {inline}: {reply!r}")


def redis_benchmark_xadd(port):
    """XADD of a 1 KiB value by redis-benchmark, 16 clients: requests/s."""
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", "16", "-n", "200000",
         "-q", "XADD", "benchstream", "*", "data", "x" * 1024],
        capture_output=True, text=True, timeout=300).stdout
    for line in out.replace("\r", "\n").splitlines():
        if "requests per second" in line:
            return float(line.split(":")[1].split()[0])
    raise RuntimeError(f"redis-benchmark printed no rate: {out[-200:]}")


def queue_throughput(tmp, body_file, concurrency, duration):
    """Puts by load_client, run by the built-in worker into the sink: items
    per second from the first put to the last sink item."""
    repo = harness.make_repo(tmp / "repo-tp", ["simple"])
    server = start(repo, [f"--queue-dir={tmp}/qdir-tp",
                          "--queue-max-length=100000000"], tmp / "tp")
    try:
        sink = qu.RawQueue(server.url + "/api/predict/simple/sink", token="")
        t0 = time.perf_counter()
        n = load(server.hostport, "/api/predict/simple", body_file, concurrency,
                 duration, warmup=0)["requests"]
        put_end = time.perf_counter()
        while sink.length() < n:
            if time.perf_counter() - put_end > 60:
                raise RuntimeError("the worker did not finish the items")
            time.sleep(0.005)
        return {"items": n, "items_per_s": n / (time.perf_counter() - t0),
                "drain_s": time.perf_counter() - put_end}
    finally:
        server.stop()


def queue_latency(server, concurrency, items):
    """put -> sink result seen by one watching client, per item (seconds)."""
    inq = qu.RawQueue(server.url + "/api/predict/simple", token="")
    sink = qu.RawQueue(server.url + "/api/predict/simple/sink", token="",
                       uid=f"bench-{concurrency}", gid=f"bench-{concurrency}")
    w = sink.watch(-1, 1000, auto_commit=True)
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}).encode()
    sent, seen, lat = {}, {}, []
    lock = threading.Lock()
    done = threading.Event()

    def reader():
        while not done.is_set():
            f = w.next(timeout=0.5)
            if f is None:
                continue
            t = time.perf_counter()
            with lock:
                seen[f["tags"]["requestId"]] = t
                ev = events.pop(f["tags"]["requestId"], None)
            if ev:
                ev.set()

    events = {}

    def client(n):
        q = qu.RawQueue(inq.base, token="")
        for _ in range(n):
            ev = threading.Event()
            t0 = time.perf_counter()
            r = q.put(body)
            rid = r.headers["X-Eas-Queueservice-Request-Id"]
            with lock:
                if rid in seen:
                    ev.set()
                else:
                    events[rid] = ev
                sent[rid] = t0
            ev.wait(30)

    rt = threading.Thread(target=reader)
    rt.start()
    per = max(1, items // concurrency)
    threads = [threading.Thread(target=client, args=(per,)) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done.set()
    rt.join()
    w.drop()
    lat = sorted(seen[r] - sent[r] for r in sent if r in seen)
    return {"p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))],
            "items_per_s": len(lat) / wall, "n": len(lat)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=4)
    ap.add_argument("--latency-items", type=int, default=400)
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="queue-bench-"))
    body = tmp / "kib.bin"
    body.write_bytes(os.urandom(1024))
    redis = None
    try:
        redis = qu.RedisServer()
    except Exception as e:  # noqa: BLE001
        print(f"(no redis-server: {e})", file=sys.stderr)
    try:
        puts = put_throughput(a, tmp, str(body), a.duration, redis)
        json_body = tmp / "simple.json"
        json_body.write_text(json.dumps({"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}))
        tput = queue_throughput(tmp, str(json_body), 16, a.duration)
        repo = harness.make_repo(tmp / "repo", ["simple"])
        server = start(repo, [f"--queue-dir={tmp}/qdir2"], tmp / "lat")
        try:
            sync = {c: load(server.hostport, "/v2/models/simple/infer", None, c,
                            a.duration, mode="json-simple") for c in (1, 16)}
            q = {c: queue_latency(server, c, a.latency_items) for c in (1, 16)}
        finally:
            server.stop()
    finally:
        if redis:
            redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    emb = puts["embedded"]
    print("### (a) put throughput, 1 KiB items, concurrency 16\n")
    print("| store | puts/s | embedded / this |")
    print("|---|---:|---:|")
    print(f"| embedded (--queue-fsync=batch, durable) | {emb:,.0f} | 1.00 |")
    for key, name in (("redis", "Redis Streams through Osprey"),
                      ("xadd", "redis-benchmark XADD directly (no fsync)"),
                      ("xadd_always", "redis-benchmark XADD directly, "
                       "appendfsync always (durable)")):
        if key in puts:
            print(f"| {name} | {puts[key]:,.0f} | {emb / puts[key]:.2f} |")
        else:
            print(f"| {name} | n/a | n/a |")
    print("\n### (b) `simple`: queue round trip (put -> sink result on a watch) "
          "beside synchronous HTTP infer\n")
    print("| concurrency | queue p50 ms | queue p99 ms | queue items/s | "
          "HTTP infer p50 ms | HTTP infer p99 ms | HTTP infer/s | queue p50 / HTTP p50 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in (1, 16):
        s = sync[c]
        print(f"| {c} | {q[c]['p50_ms']:.2f} | {q[c]['p99_ms']:.2f} | "
              f"{q[c]['items_per_s']:,.0f} | {s['latency_ms']['p50']:.2f} | "
              f"{s['latency_ms']['p99']:.2f} | {s['requests_per_s']:,.0f} | "
              f"{q[c]['p50_ms'] / s['latency_ms']['p50']:.1f} |")
    print("\n### (c) `simple` through the queue, puts by load_client at "
          "concurrency 16\n")
    print("| queue items/s (put to sink) | items | sink caught up after the "
          "last put, s | HTTP infer/s | queue / HTTP |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {tput['items_per_s']:,.0f} | {tput['items']:,} | "
          f"{tput['drain_s']:.2f} | {sync[16]['requests_per_s']:,.0f} | "
          f"{tput['items_per_s'] / sync[16]['requests_per_s']:.2f} |")


if __name__ == "__main__":
    main()
