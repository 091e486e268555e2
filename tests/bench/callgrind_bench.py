#!/usr/bin/env python3
"""Instructions per request, from callgrind: a measure of the request path
that a loaded machine does not disturb (wall-clock rates do).

Starts a server (osprey, or the libmicrohttpd echo server for the floor)
under `valgrind --tool=callgrind`, sends --warmup-requests worth of load,
zeroes the counters (callgrind_control -z), runs load_client for
--duration seconds, dumps (callgrind_control -d) and prints the server's
user-space instructions (Ir, every thread) divided by the requests that
completed meanwhile. With --top N it also prints the N functions with the
most instructions of their own (callgrind_annotate).

What it does not see: time in the kernel (syscalls, futex wake-ups and
context switches of thread hand-offs) and cache misses; pair it with
`perf record -e cpu-clock` or the server CPU per request of peer_bench.py.

  tests/bench/callgrind_bench.py                       # every case
  tests/bench/callgrind_bench.py --cases simple --top 25
  tests/bench/callgrind_bench.py --osprey OLD/osprey   # another build

Cases: simple (`simple` JSON, INT32 [1,16] x2), identity (identity_fp32
JSON [1,16]), binary16 (identity_fp32 [1,16] with binary tensors), echo
(the echo server, a body as large as `simple`'s). Never run by ctest.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from http_bench import Server, wait_ready  # noqa: E402

CASES = {
    # name: (server, load_client arguments)
    "simple": ("osprey", ["--mode", "json-simple"]),
    "identity": ("osprey", ["--mode", "json-fp32", "--elements", "16"]),
    "binary16": ("osprey", ["--mode", "binary-fp32", "--elements", "16"]),
    "echo": ("echo", ["--mode", "raw", "--body-bytes", "344"]),
}


def total_ir(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError("no totals in " + path)


def top_functions(path, n):
    p = subprocess.run(["callgrind_annotate", "--inclusive=no",
                        "--threshold=100", path],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    rows = []
    for line in p.stdout.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.*)", line)
        if m and not re.search(r"PROGRAM TOTALS|:clone |:start_thread ",
                                m.group(3)):
            rows.append((int(m.group(1).replace(",", "")), m.group(2),
                         m.group(3)))
    return rows[:n]


def run_case(args, name, workdir):
    kind, load_args = CASES[name]
    out = os.path.join(workdir, "cg-%s.out" % name)
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out]
    if kind == "osprey":
        argv = valgrind + [args.osprey, "--model-repository=" + args.models,
                           "--http-port=0", "--metrics-port=0",
                           "--grpc-port=0"]
        argv += args.osprey_arg
    else:
        argv = valgrind + [args.echo_server, "--port", "0"]
    server = Server(name, argv, workdir)
    try:
        server.wait_started(120)
        if kind == "osprey":
            wait_ready(server.address, ["/v2/health/ready"], 120)

        def load(seconds):
            p = subprocess.run(
                [args.load_client, "--url", server.address, "--concurrency",
                 str(args.concurrency), "--threads", "1", "--duration",
                 str(seconds), "--json"] + load_args,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                raise RuntimeError("load_client: " + p.stderr.strip())
            return json.loads(p.stdout)

        load(args.warmup)
        subprocess.run(["callgrind_control", "-z", str(server.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL)
        r = load(args.duration)
        subprocess.run(["callgrind_control", "-d", str(server.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        dumps = sorted(glob.glob(out + ".*"), key=os.path.getmtime)
        if not dumps:
            raise RuntimeError("callgrind wrote no dump (see %s)" %
                               server.log_path)
        ir = total_ir(dumps[-1])
        requests = r["requests"]
        return {"case": name, "requests": requests, "ir": ir,
                "ir_per_request": ir / max(requests, 1),
                "errors": r["errors"], "dump": dumps[-1]}
    finally:
        server.stop(60)


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.path.join(ROOT, "build")
    p.add_argument("--build-dir", default=build)
    p.add_argument("--osprey", help="server binary (default BUILD/osprey)")
    p.add_argument("--osprey-arg", action="append", default=[])
    p.add_argument("--models", default=os.path.join(ROOT, "models"))
    p.add_argument("--cases", default="simple,identity,binary16,echo")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--duration", type=float, default=6.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--top", type=int, default=0,
                   help="print the N functions with the most own Ir")
    p.add_argument("--keep", action="store_true",
                   help="keep the callgrind dumps (their folder is printed)")
    args = p.parse_args()
    args.osprey = args.osprey or os.path.join(args.build_dir, "osprey")
    args.load_client = os.path.join(args.build_dir, "tests/bench/load_client")
    args.echo_server = os.path.join(args.build_dir, "tests/bench/echo_server")
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    workdir = tempfile.mkdtemp(prefix="osprey-callgrind-")
    # The servers run in workdir (osprey creates its queue store in its
    # working directory): every path becomes absolute first.
    for name in ("osprey", "models", "load_client", "echo_server"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    os.chdir(workdir)
    print("| case | concurrency | requests | Ir per request |")
    print("|---|---:|---:|---:|")
    results = []
    for name in args.cases.split(","):
        r = run_case(args, name, workdir)
        results.append(r)
        print("| %s | %d | %d | %s |" % (name, args.concurrency, r["requests"],
                                         format(int(r["ir_per_request"]), ",")),
              flush=True)
        if r["errors"]:
            print("  errors: %d" % r["errors"], file=sys.stderr)
    for r in results if args.top else []:
        print("\n%s: top %d functions by own Ir (per request)" %
              (r["case"], args.top))
        for ir, pct, fn in top_functions(r["dump"], args.top):
            print("%10s %6s%%  %s" % (format(ir // max(r["requests"], 1), ","),
                                      pct, fn))
    if args.keep:
        print("\ndumps in " + workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
