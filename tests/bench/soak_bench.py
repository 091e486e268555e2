#!/usr/bin/env python3
"""Osprey soak: a long closed-loop load at high concurrency, watching the
server's memory. Not run in CI.

Starts build/osprey on the example repository (port 0), warms it up, then
drives it with build/tests/bench/load_client at --concurrency (default 128)
for --duration seconds (default 600), in --interval slices. After each slice
it samples the server's VmRSS (/proc/<pid>/status) and prints one line:
elapsed time, requests and errors so far, throughput of the slice, RSS.
At the end it reports the RSS after warm-up, the peak, the final value and
the growth, with the first error seen.

Exit status: 1 when a request failed, the server died, or (with
--max-growth-mib) RSS grew by more than that; 0 otherwise. Only the Python
standard library is used.

  tests/bench/soak_bench.py                       # 10 minutes, c=128
  tests/bench/soak_bench.py --duration 60 --mode binary-fp32 --elements 65536
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_bench import Server, wait_ready  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 1 << 20


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_slice(args, address, seconds, warmup=0.0):
    """One load_client run; returns its JSON result."""
    argv = [args.load_client, "--url", address, "--mode", args.mode,
            "--concurrency", str(args.concurrency),
            "--threads", str(min(args.client_threads, args.concurrency)),
            "--duration", str(seconds), "--warmup", str(warmup),
            "--elements", str(args.elements), "--json"]
    if args.model:
        argv += ["--model", args.model]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError("load_client failed (%d): %s" %
                           (p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--osprey", help="server binary (default BUILD/osprey)")
    ap.add_argument("--model-repository", default=os.path.join(ROOT, "models"))
    ap.add_argument("--duration", type=float, default=600,
                    help="measured seconds in all (default 600)")
    ap.add_argument("--interval", type=float, default=30,
                    help="seconds per slice between RSS samples (default 30)")
    ap.add_argument("--warmup", type=float, default=5,
                    help="unmeasured seconds of load before the baseline")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--client-threads", type=int, default=4)
    ap.add_argument("--http-threads", type=int, default=8)
    ap.add_argument("--mode", default="json-simple",
                    help="load_client --mode (default json-simple)")
    ap.add_argument("--model", help="load_client --model")
    ap.add_argument("--elements", type=int, default=16,
                    help="load_client --elements for the fp32 modes")
    ap.add_argument("--max-growth-mib", type=float,
                    help="fail when RSS grows more than this after warm-up")
    ap.add_argument("--osprey-arg", action="append", default=[],
                    help="extra osprey argument (repeatable)")
    args = ap.parse_args()
    args.load_client = os.path.join(args.build_dir, "tests", "bench",
                                    "load_client")
    osprey_bin = args.osprey or os.path.join(args.build_dir, "osprey")
    for path in (args.load_client, osprey_bin):
        if not os.access(path, os.X_OK):
            sys.exit("soak_bench: %s is missing; build first" % path)

    log_dir = tempfile.mkdtemp(prefix="osprey-soak-")
    osprey = Server("osprey", [
        osprey_bin, "--model-repository=" + args.model_repository,
        "--http-port=0", "--http-address=127.0.0.1", "--metrics-port=0",
        "--http-thread-count=%d" % args.http_threads] + args.osprey_arg,
        log_dir)
    status = 0
    try:
        osprey.wait_started(60)
        wait_ready(osprey.address, ["/v2/health/ready"], 60)
        pid = osprey.proc.pid
        start_rss = rss_bytes(pid)
        if args.warmup > 0:
            run_slice(args, osprey.address, args.warmup)
        base = rss_bytes(pid)
        peak = base
        print("soak: %s, concurrency %d, %.0f s; RSS %.1f MiB at start, "
              "%.1f MiB after warm-up" % (args.mode, args.concurrency,
                                          args.duration, start_rss / MIB,
                                          base / MIB), flush=True)
        total_req = total_err = 0
        first_error = None
        elapsed = 0.0
        while elapsed < args.duration and osprey.alive():
            seconds = min(args.interval, args.duration - elapsed)
            r = run_slice(args, osprey.address, seconds)
            elapsed += seconds
            total_req += r["requests"]
            total_err += r["errors"]
            if r["errors"] and first_error is None:
                first_error = r.get("first_error")
            now = rss_bytes(pid) if osprey.alive() else 0
            peak = max(peak, now)
            print("%6.0f s  %10d req  %6d err  %9.0f req/s  RSS %8.1f MiB "
                  "(%+.1f)" % (elapsed, total_req, total_err,
                               r["requests_per_s"], now / MIB,
                               (now - base) / MIB), flush=True)
        alive = osprey.alive()
        final = rss_bytes(pid) if alive else 0
        growth = final - base
        print("soak: %d requests, %d errors; RSS after warm-up %.1f MiB, "
              "peak %.1f MiB, final %.1f MiB, growth %+.1f MiB" %
              (total_req, total_err, base / MIB, peak / MIB, final / MIB,
               growth / MIB))
        if first_error:
            print("soak: first error: %s" % first_error)
        if not alive:
            print("soak: the server died; log: %s\n%s" %
                  (osprey.log_path, osprey.log_tail()))
            status = 1
        if total_err or total_req == 0:
            status = 1
        if args.max_growth_mib is not None and \
                growth > args.max_growth_mib * MIB:
            print("soak: growth above --max-growth-mib %.1f" %
                  args.max_growth_mib)
            status = 1
    finally:
        rc = osprey.stop()
        if rc not in (0, None) and status == 0:
            print("soak: the server exited with status %s" % rc)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
