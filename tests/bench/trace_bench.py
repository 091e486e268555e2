#!/usr/bin/env python3
"""Osprey trace benchmark: the cost of Triton-style tracing on `simple`.

Starts one build/osprey with a trace file in a temporary directory and
drives `simple` (INT32 [1,16] x2, JSON in and out) over HTTP with
build/tests/bench/load_client, alternating between tracing OFF and tracing
every request (rate=1, level TIMESTAMPS) by POSTing /v2/trace/setting
between runs, so both sides run in the same warm process. Prints, per
concurrency, the median infer/s of each side and their ratio (issue 6's goal:
traced / OFF >= 0.9, i.e. a drop below 10%), with the latencies beside, and
the server's CPU time per request on each side (all its threads, the trace
writer included, from /proc/<pid>/task/*/schedstat), which a busy shared
machine disturbs far less than throughput.

At the end the server is stopped with SIGTERM and the trace file must parse
as JSON; the number of traces it holds is printed. Nothing is asserted on
times; the exit status is 1 when the server failed, a request got an error,
or the trace file is not valid JSON. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402  (same folder: Server, Bench.load, helpers)

LEVELS = {"off": ["OFF"], "timestamps": ["TIMESTAMPS"]}


def set_level(address, level):
    body = json.dumps({"trace_level": LEVELS[level]}).encode()
    req = urllib.request.Request("http://%s/v2/trace/setting" % address,
                                 data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        got = json.loads(r.read())
    if got["trace_level"] != LEVELS[level]:
        raise RuntimeError("trace level not applied: %s" % got)


def cpu_ns(pid):
    """CPU time used so far by all threads of process pid, in ns
    (/proc/<pid>/task/*/schedstat)."""
    total = 0
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "schedstat")) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just exited
    return total


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(root, "build"))
    ap.add_argument("--osprey", help="osprey binary (default BUILD/osprey)")
    ap.add_argument("--model-repository", default=os.path.join(root, "models"))
    ap.add_argument("--concurrency", default="1,16",
                    help="comma-separated concurrencies (default 1,16)")
    ap.add_argument("--duration", type=float, default=1.0,
                    help="measured seconds per run (default 1.0)")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="unmeasured seconds before each run (default 0: the "
                    "process stays warm between runs, and CPU per request "
                    "counts the whole run)")
    ap.add_argument("--repeat", type=int, default=7,
                    help="runs per side, alternating; the median is reported "
                    "(default 7)")
    ap.add_argument("--http-threads", type=int, default=8)
    ap.add_argument("--client-threads", type=int, default=1)
    ap.add_argument("--osprey-arg", action="append", default=[])
    ap.add_argument("--keep-trace-file", action="store_true",
                    help="keep the trace file (hundreds of MB) in the "
                    "temporary directory")
    ap.add_argument("--json-out", help="also write the raw results here")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    concurrencies = [int(x) for x in args.concurrency.split(",") if x]
    args.load_client = os.path.join(args.build_dir, "tests", "bench",
                                    "load_client")
    osprey_bin = args.osprey or os.path.join(args.build_dir, "osprey")
    for path in (args.load_client, osprey_bin):
        if not os.access(path, os.X_OK):
            sys.exit("trace_bench: %s is missing; build first" % path)

    log_dir = tempfile.mkdtemp(prefix="osprey-trace-bench-")
    trace_file = os.path.join(log_dir, "trace.json")
    argv = [osprey_bin, "--model-repository=" + args.model_repository,
            "--http-port=0", "--http-address=127.0.0.1", "--metrics-port=0",
            "--http-thread-count=%d" % args.http_threads,
            "--trace-config=triton,file=" + trace_file,
            "--trace-config=rate=1", "--trace-config=level=OFF"]
    argv += args.osprey_arg
    status = 0
    rows = []
    t_start = time.monotonic()
    server = http_bench.Server("osprey", argv, log_dir)
    try:
        server.wait_started(60)
        http_bench.wait_ready(server.address, ["/v2/health/ready",
                                               "/v2/models/simple/ready"], 60)
        bench = http_bench.Bench(args, server, None)
        for c in concurrencies:
            runs = {"off": [], "timestamps": []}
            for _ in range(args.repeat):
                for level in ("off", "timestamps"):
                    set_level(server.address, level)
                    before = cpu_ns(server.proc.pid)
                    r = bench.load("simple JSON c=%d trace %s" % (c, level),
                                   server, "json-simple", c)
                    done = r["requests"] + r.get("incomplete", 0)
                    r["server_cpu_us"] = ((cpu_ns(server.proc.pid) - before)
                                          / 1e3 / done if done else 0.0)
                    runs[level].append(r)
            set_level(server.address, "off")
            off = http_bench.median_run(runs["off"])
            on = http_bench.median_run(runs["timestamps"])
            # CPU per request is far less sensitive to other load on the
            # machine than throughput: the median of each side's runs.
            for side, rs in ((off, runs["off"]), (on, runs["timestamps"])):
                cpu = sorted(r["server_cpu_us"] for r in rs)
                side["server_cpu_us"] = cpu[(len(cpu) - 1) // 2]
            rows.append((c, off, on))
        for label, r in bench.failures:
            status = 1
            print("ERROR in %s: %d errors; first: %s" %
                  (label, r["errors"], r["first_error"]), file=sys.stderr)
    except (RuntimeError, OSError) as e:
        print("trace_bench: %s" % e, file=sys.stderr)
        status = 1
    finally:
        code = server.stop()
        if code != 0:
            print("trace_bench: osprey exited with %s after SIGTERM (log %s)"
                  "\n%s" % (code, server.log_path, server.log_tail()),
                  file=sys.stderr)
            status = 1

    traces = None
    try:
        with open(trace_file) as f:
            records = json.load(f)
        traces = len({r["id"] for r in records})
    except (OSError, ValueError) as e:
        print("trace_bench: the trace file is not valid JSON: %s" % e,
              file=sys.stderr)
        status = 1

    print("Osprey trace benchmark: %d CPUs; `simple` JSON over HTTP; median "
          "of %d alternating runs of %s s (after %s s warmup) per side; %d "
          "HTTP threads; %d client thread(s)" % (
              os.cpu_count(), args.repeat, args.duration, args.warmup,
              args.http_threads, args.client_threads))
    print()
    print("| concurrency | OFF infer/s | p50/p99 ms | server CPU us/req "
          "| rate=1 TIMESTAMPS infer/s | p50/p99 ms | server CPU us/req "
          "| infer/s traced / OFF | CPU/req traced / OFF |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, off, on in rows:
        r = http_bench.ratio(on["requests_per_s"], off["requests_per_s"])
        print("| %d | %s%s | %s | %.1f | %s%s | %s | %.1f | %.3f %s | %.3f |" % (
            c, http_bench.fmt_rate(off["requests_per_s"]), http_bench.errs(off),
            http_bench.lat(off), off["server_cpu_us"],
            http_bench.fmt_rate(on["requests_per_s"]), http_bench.errs(on),
            http_bench.lat(on), on["server_cpu_us"], r,
            "ok" if r >= 0.9 else "BELOW (goal >= 0.9)",
            http_bench.ratio(on["server_cpu_us"], off["server_cpu_us"])))
    print()
    if traces is not None:
        print("trace file: %d traces, valid JSON after SIGTERM (%.1f MB)" % (
            traces, os.path.getsize(trace_file) / 1e6))
    if not args.keep_trace_file and os.path.exists(trace_file):
        os.remove(trace_file)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "traces": traces}, f, indent=1)
    print("total %.0f s; server log in %s" %
          (time.monotonic() - t_start, log_dir), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
