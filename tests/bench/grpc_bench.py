#!/usr/bin/env python3
"""Osprey gRPC benchmark: the gRPC port against the HTTP port of one
server, same model, same concurrency, same kind of client (issue 11):

  (a) `simple` (INT32 [1,16] x2) infer/s over gRPC / over HTTP (binary
      tensors), at concurrency 1, 16 and 64 (goal >= 0.9)
  (b) identity_fp32 with one 16 MiB FP32 tensor: gRPC MB/s / HTTP binary
      MB/s, at concurrency 1 and 4 (goal >= 0.8)

The load client is the official tritonclient (tritonclient.grpc on one
side, tritonclient.http with binary data on the other), driven from
several processes (concurrency c = P processes x T threads, one client per
thread, one request in flight per thread), so the Python client's own cost
is in both sides alike. The two sides of each ratio alternate, --repeat
times each, and the median run of each side is reported. Nothing is
asserted on times; the exit status is 1 only when a request failed or the
server did not exit 0. Needs the test venv (.venv).
"""

import argparse
import multiprocessing as mp
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HTTP_RE = re.compile(r"Started HTTPService at \S+:(\d+)")
GRPC_RE = re.compile(r"Started GRPCInferenceService at \S+:(\d+)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIXTEEN_MIB_FP32 = 4 * 1024 * 1024


def make_inputs(mod, case):
    if case == "simple":
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"),
               mod.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        return "simple", ins, 2 * 64
    x = np.ones((1, SIXTEEN_MIB_FP32), dtype=np.float32)
    ins = [mod.InferInput("INPUT0", [1, SIXTEEN_MIB_FP32], "FP32")]
    ins[0].set_data_from_numpy(x)
    return "identity_fp32", ins, x.nbytes


def worker(args):
    """One process: `threads` closed-loop clients for `duration` seconds.
    Returns (requests, request bytes, errors)."""
    proto, url, case, threads, duration, warmup = args
    if proto == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod
    counts = [0] * threads
    errors = [0] * threads
    start = time.monotonic() + warmup
    stop = start + duration

    def run(i):
        if proto == "grpc":
            c = mod.InferenceServerClient(url)
        else:
            c = mod.InferenceServerClient(url, connection_timeout=60,
                                          network_timeout=60)
        model, ins, _ = make_inputs(mod, case)
        outs = None if proto == "grpc" else [
            mod.InferRequestedOutput(n, binary_data=True)
            for n in (["OUTPUT0", "OUTPUT1"] if case == "simple" else ["OUTPUT0"])]
        while True:
            now = time.monotonic()
            if now >= stop:
                break
            try:
                c.infer(model, ins, outputs=outs)
                if now >= start:
                    counts[i] += 1
            except Exception:
                errors[i] += 1
        c.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    size = 128 if case == "simple" else SIXTEEN_MIB_FP32 * 4
    return sum(counts), sum(counts) * size, sum(errors)


def measure(pool, proto, url, case, concurrency, duration, warmup):
    procs = min(concurrency, os.cpu_count() or 1, 8)
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    results = pool.map(worker, [(proto, url, case, t, duration, warmup) for t in per])
    n = sum(r[0] for r in results)
    b = sum(r[1] for r in results)
    errors = sum(r[2] for r in results)
    return n / duration, b / duration / 1e6, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--osprey", default=os.path.join(ROOT, "build", "osprey"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--a-concurrency", default="1,16,64")
    ap.add_argument("--b-concurrency", default="1,4")
    opts = ap.parse_args()

    log_dir = tempfile.mkdtemp(prefix="osprey-grpc-bench-")
    log_path = os.path.join(log_dir, "osprey.log")
    log = open(log_path, "wb")
    srv = subprocess.Popen([opts.osprey, f"--model-repository={os.path.join(ROOT, 'models')}",
                            "--http-port=0", "--grpc-port=0", "--metrics-port=0"],
                           stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    http_port = grpc_port = None
    while time.monotonic() < deadline and not (http_port and grpc_port):
        text = open(log_path, errors="replace").read()
        h, g = HTTP_RE.search(text), GRPC_RE.search(text)
        http_port = int(h.group(1)) if h else None
        grpc_port = int(g.group(1)) if g else None
        time.sleep(0.05)
    if not (http_port and grpc_port):
        print("osprey did not start; log in", log_path, file=sys.stderr)
        srv.kill()
        return 1
    time.sleep(0.5)
    urls = {"grpc": f"127.0.0.1:{grpc_port}", "http": f"127.0.0.1:{http_port}"}
    failed = False
    rows = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(8) as pool:
        for case, concs in (("simple", opts.a_concurrency), ("large", opts.b_concurrency)):
            for c in [int(x) for x in concs.split(",")]:
                runs = {"grpc": [], "http": []}
                for _ in range(opts.repeat):
                    for proto in ("grpc", "http"):
                        rps, mbs, errors = measure(pool, proto, urls[proto], case, c,
                                                   opts.duration, opts.warmup)
                        failed = failed or errors > 0
                        runs[proto].append((rps, mbs))
                med = {p: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
                       for p, v in runs.items()}
                rows.append((case, c, med))
    srv.send_signal(signal.SIGTERM)
    rc = srv.wait(timeout=60)
    failed = failed or rc != 0

    print("Load client: tritonclient.grpc vs tritonclient.http (binary tensors), "
          "P processes x T threads = concurrency, "
          f"median of {opts.repeat} alternating runs of {opts.duration:g} s, {os.cpu_count()} CPUs.\n")
    print("| case | concurrency | gRPC | HTTP | gRPC / HTTP |")
    print("|---|---|---|---|---|")
    for case, c, med in rows:
        if case == "simple":
            g, h = med["grpc"][0], med["http"][0]
            print(f"| (a) `simple` infer/s | {c} | {g:.0f} | {h:.0f} | {g / h:.2f} |")
        else:
            g, h = med["grpc"][1], med["http"][1]
            print(f"| (b) 16 MiB FP32 `identity_fp32` MB/s | {c} | {g:.0f} | {h:.0f} | {g / h:.2f} |")
    if failed:
        print("\nrequests failed or the server did not exit 0; log in", log_path, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
