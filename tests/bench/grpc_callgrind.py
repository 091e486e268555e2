#!/usr/bin/env python3
"""Server instructions per request over gRPC and over HTTP, from callgrind:
the measure of the gRPC frontend's cost that a loaded machine does not
disturb (wall-clock rates do).

Starts osprey under `valgrind --tool=callgrind`, warms each case up, zeroes
the counters (callgrind_control -z), drives the case for --duration seconds
with the C load clients (grpc_load_client / load_client), dumps
(callgrind_control -d) and prints the server's user-space instructions (Ir,
every thread) divided by the requests that completed meanwhile. --top N
also prints the N functions with the most instructions of their own.

Not seen: kernel time (syscalls, futex wake-ups of thread hand-offs,
copies in and out of sockets) and cache misses; pair it with
`perf record -e cpu-clock` or grpc_bench.py's server CPU per request.

  tests/bench/grpc_callgrind.py                         # every case
  tests/bench/grpc_callgrind.py --cases grpc-simple --top 30

Cases: grpc-simple / http-simple (`simple`, INT32 [1,16] x2, binary
tensors), grpc-16mib / http-16mib (identity_fp32, one 16 MiB FP32 tensor).
Never run by ctest.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HTTP_RE = re.compile(r"Started HTTPService at \S+:(\d+)")
GRPC_RE = re.compile(r"Started GRPCInferenceService at \S+:(\d+)")
sys.path.insert(0, HERE)
from callgrind_bench import top_functions, total_ir  # noqa: E402
SIXTEEN_MIB_FP32 = 4 * 1024 * 1024

CASES = {
    # name: (port, client, client arguments)
    "grpc-simple": ("grpc", "grpc_load_client", ["--mode", "simple"]),
    "http-simple": ("http", "load_client", ["--mode", "binary-simple"]),
    "grpc-16mib": ("grpc", "grpc_load_client",
                   ["--mode", "fp32", "--elements", str(SIXTEEN_MIB_FP32)]),
    "http-16mib": ("http", "load_client",
                   ["--mode", "binary-fp32", "--elements", str(SIXTEEN_MIB_FP32)]),
}


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--osprey", help="server binary (default BUILD/osprey)")
    p.add_argument("--osprey-arg", action="append", default=[])
    p.add_argument("--cases", default="grpc-simple,http-simple,grpc-16mib,http-16mib")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--keep", action="store_true",
                   help="keep the callgrind dumps (their folder is printed)")
    args = p.parse_args()
    osprey = args.osprey or os.path.join(args.build_dir, "osprey")
    bench = os.path.join(args.build_dir, "tests", "bench")
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    workdir = tempfile.mkdtemp(prefix="osprey-grpc-callgrind-")
    out = os.path.join(workdir, "cg.out")
    log_path = os.path.join(workdir, "osprey.log")
    log = open(log_path, "wb")
    srv = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         osprey, "--model-repository=" + os.path.join(ROOT, "models"),
         "--http-port=0", "--grpc-port=0", "--metrics-port=0",
         "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
         "--queue-dir=" + os.path.join(workdir, "queue")] + args.osprey_arg,
        stdout=log, stderr=subprocess.STDOUT)
    ports = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(ports) < 2:
        text = open(log_path, errors="replace").read()
        for name, rx in (("http", HTTP_RE), ("grpc", GRPC_RE)):
            m = rx.search(text)
            if m:
                ports[name] = int(m.group(1))
        time.sleep(0.2)
    status = 0
    results = []
    try:
        if len(ports) < 2:
            raise RuntimeError("osprey did not start; log in " + log_path)
        time.sleep(2)
        print("| case | concurrency | requests | Ir per request |")
        print("|---|---:|---:|---:|")
        for n, name in enumerate(args.cases.split(",")):
            port, client, extra = CASES[name]

            def load(seconds):
                r = subprocess.run(
                    [os.path.join(bench, client), "--url",
                     "127.0.0.1:%d" % ports[port], "--concurrency",
                     str(args.concurrency), "--duration", str(seconds),
                     "--json"] + extra,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    raise RuntimeError("%s: %s" % (client, r.stderr.strip()))
                return json.loads(r.stdout)

            load(args.warmup)
            subprocess.run(["callgrind_control", "-z", str(srv.pid)],
                           check=True, stdout=subprocess.DEVNULL)
            r = load(args.duration)
            subprocess.run(["callgrind_control", "-d", name, str(srv.pid)],
                           check=True, stdout=subprocess.DEVNULL)
            time.sleep(0.5)
            dumps = sorted(glob.glob(out + ".*"), key=os.path.getmtime)
            ir = total_ir(dumps[-1])
            requests = max(r["requests"], 1)
            results.append((name, requests, dumps[-1]))
            print("| %s | %d | %d | %s |" % (name, args.concurrency, requests,
                                             format(ir // requests, ",")),
                  flush=True)
    except RuntimeError as e:
        print("grpc_callgrind: %s" % e, file=sys.stderr)
        status = 1
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(120)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    for name, requests, dump in results if args.top else []:
        print("\n%s: top %d functions by own Ir (per request)" % (name, args.top))
        for ir, pct, fn in top_functions(dump, args.top):
            print("%10s %6s%%  %s" % (format(ir // requests, ","), pct, fn))
    if args.keep:
        print("\ndumps in " + workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
