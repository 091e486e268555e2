#!/usr/bin/env python3
"""TF Serving REST predict against KServe v2 JSON infer, side by side.

One osprey server; the same model and the same payload sent both ways:

  (a) identity_fp32 with an FP32 [1,16] tensor at concurrency 1, 16, 64:
      POST /v1/models/identity_fp32:predict {"instances": [[...]]}
      vs POST /v2/models/identity_fp32/infer with JSON data.
      Ratio TF Serving infer/s / KServe infer/s (goal >= 0.9).
  (b) JSON parsing cost: an FP32 [1,262144] tensor at concurrency 1, in
      Mfloat/s per server CPU-second (from /proc), both ways.

The two sides run alternately, --repeat times each, and the median run
of each side is reported. Nothing is asserted on times; the exit status is
1 only when a server failed or a request got an error.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_bench import Server, median_run, wait_ready  # noqa: E402

MODEL = "identity_fp32"


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def bodies(n, tmp):
    """The same n floats as a TF Serving and a KServe v2 JSON body."""
    rng = random.Random(7)
    values = ", ".join("%.6g" % rng.uniform(-1, 1) for _ in range(n))
    tf = '{"instances": [[%s]]}' % values
    ks = ('{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],'
          '"data":[%s]}]}' % (n, values))
    paths = []
    for name, text in (("tf", tf), ("kserve", ks)):
        path = os.path.join(tmp, "%s_%d.json" % (name, n))
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
    return paths


def run(args, server, path, body, concurrency, duration):
    """One load_client run; its JSON result plus the server's CPU time."""
    argv = [args.load_client, "--url", server.address, "--path", path,
            "--body-file", body, "--content-type", "application/json",
            "--concurrency", str(concurrency),
            "--threads", str(min(args.client_threads, concurrency)),
            "--duration", str(duration), "--warmup", str(args.warmup),
            "--json"]
    cpu0 = cpu_seconds(server.proc.pid)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    cpu = cpu_seconds(server.proc.pid) - cpu0
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError("load_client failed (%d): %s" %
                           (p.returncode, p.stderr.strip()))
    r = json.loads(p.stdout)
    r["server_cpu_s"] = cpu
    # load_client also sends during the warmup; count those requests too.
    r["all_requests"] = r["requests_per_s"] * (duration + args.warmup)
    if not server.alive():
        raise RuntimeError("osprey died:\n" + server.log_tail())
    return r


def pair(args, server, tf_body, ks_body, concurrency, duration):
    tf_runs, ks_runs = [], []
    for _ in range(args.repeat):
        tf_runs.append(run(args, server, "/v1/models/%s:predict" % MODEL,
                           tf_body, concurrency, duration))
        ks_runs.append(run(args, server, "/v2/models/%s/infer" % MODEL,
                           ks_body, concurrency, duration))
    return median_run(tf_runs), median_run(ks_runs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(root, "build"))
    ap.add_argument("--model-repository", default=os.path.join(root, "models"))
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--client-threads", type=int, default=1)
    ap.add_argument("--concurrency", default="1,16,64")
    args = ap.parse_args()
    args.load_client = os.path.join(args.build_dir, "tests", "bench",
                                    "load_client")
    osprey_bin = os.path.join(args.build_dir, "osprey")
    tmp = tempfile.mkdtemp(prefix="osprey-tfs-bench-")
    server = Server("osprey", [
        osprey_bin, "--model-repository=" + args.model_repository,
        "--http-port=0", "--http-address=127.0.0.1", "--metrics-port=0"], tmp)
    status = 0
    errors = 0
    try:
        server.wait_started(60)
        wait_ready(server.address, ["/v2/models/%s/ready" % MODEL], 60)
        tf_small, ks_small = bodies(16, tmp)
        print("(a) %s FP32 [1,16], JSON both ways; median of %d alternating "
              "runs of %s s per side" % (MODEL, args.repeat, args.duration))
        print()
        print("| concurrency | TF Serving infer/s | p50/p99 ms | KServe v2 "
              "infer/s | p50/p99 ms | ratio |")
        print("|---:|---:|---:|---:|---:|---:|")
        for c in [int(x) for x in args.concurrency.split(",") if x]:
            tf, ks = pair(args, server, tf_small, ks_small, c, args.duration)
            errors += tf["errors"] + ks["errors"]
            print("| %d | %s | %.2f / %.2f | %s | %.2f / %.2f | %.2f |" % (
                c, "{:,.0f}".format(tf["requests_per_s"]),
                tf["latency_ms"]["p50"], tf["latency_ms"]["p99"],
                "{:,.0f}".format(ks["requests_per_s"]),
                ks["latency_ms"]["p50"], ks["latency_ms"]["p99"],
                tf["requests_per_s"] / ks["requests_per_s"]))
        n = 262144
        tf_big, ks_big = bodies(n, tmp)
        tf, ks = pair(args, server, tf_big, ks_big, 1, args.duration * 2)
        errors += tf["errors"] + ks["errors"]
        print()
        print("(b) FP32 [1,%d] as JSON, concurrency 1: server Mfloat per "
              "CPU-second (infer/s)" % n)
        print()
        print("| path | infer/s | Mfloat/s per core | ratio |")
        print("|---|---:|---:|---:|")
        rates = []
        for label, r in (("TF Serving `instances`", tf),
                         ("KServe v2 `data`", ks)):
            per_core = (r["all_requests"] * n / 1e6 / r["server_cpu_s"]
                        if r["server_cpu_s"] else float("nan"))
            rates.append(per_core)
            print("| %s | %.1f | %.1f | %s |" % (
                label, r["requests_per_s"], per_core,
                "%.2f" % (rates[0] / per_core) if len(rates) == 2 else ""))
        if errors:
            print("ERROR: %d requests failed" % errors, file=sys.stderr)
            status = 1
    except (RuntimeError, OSError) as e:
        print("tfserving_bench: %s" % e, file=sys.stderr)
        status = 1
    finally:
        if server.stop() != 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
