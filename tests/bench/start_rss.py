#!/usr/bin/env python3
"""Start-to-ready time and idle RSS of a server process tree.

    tests/bench/start_rss.py                       # build/osprey on models/
    tests/bench/start_rss.py --osprey BIN --models DIR --repeat 5

Starts the server --repeat times; each time measures the wall time from
exec to the first 200 of GET /v2/health/ready (polled every millisecond),
the server's CPU time until then, and after --settle seconds the resident
memory (VmRSS) of the process and all its descendants. Prints the median
and one line per run; with --result, `RESULT start_rss ready_s=...
cpu_s=... rss_mib=...` for tests/gpu/check.sh. Also a library: peer_bench.py
uses tree_rss_kib and measure_start for every peer server.
"""

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """pid and every process below it."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return seen


def tree_rss_kib(pid):
    """VmRSS of pid and its descendants, KiB."""
    total = 0
    for p in descendants(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_cpu_s(pid):
    """User + system CPU seconds of pid and its live descendants."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for p in descendants(pid):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError):
            pass
    return total


def ready(port, path="/v2/health/ready", host="127.0.0.1"):
    try:
        c = http.client.HTTPConnection(host, port, timeout=1)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 200
    except OSError:
        return False


def measure_start(argv, port, env=None, timeout=120.0, settle=1.0,
                  ready_path="/v2/health/ready", **popen):
    """Starts argv, waits until `port` answers ready_path with 200. Returns
    (process, ready seconds, CPU seconds to ready, idle RSS KiB after
    `settle` s). The caller stops the process."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, **popen)
    while not ready(port, ready_path):
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s before it was ready" %
                               (argv[0], proc.returncode))
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise RuntimeError("%s not ready after %.0f s" % (argv[0], timeout))
        time.sleep(0.001)
    ready_s = time.monotonic() - t0
    cpu_s = tree_cpu_s(proc.pid)
    time.sleep(settle)
    return proc, ready_s, cpu_s, tree_rss_kib(proc.pid)


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--osprey", default=os.path.join(ROOT, "build", "osprey"))
    p.add_argument("--models", default=os.path.join(ROOT, "models"))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--result", action="store_true",
                   help="also print a RESULT line (tests/gpu/check.sh)")
    args = p.parse_args()
    runs = []
    workdir = tempfile.mkdtemp(prefix="osprey-start-rss-")
    args.osprey = os.path.abspath(args.osprey)
    args.models = os.path.abspath(args.models)
    for _ in range(args.repeat):
        port = free_port()
        argv = [args.osprey, "--model-repository=" + args.models,
                "--http-port=%d" % port, "--metrics-port=%d" % free_port(),
                "--grpc-port=%d" % free_port()]
        # A scratch working directory: the server creates its queue store
        # (--queue-dir) there.
        proc, ready_s, cpu_s, rss = measure_start(
            argv, port, settle=args.settle, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=workdir)
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(os.path.join(workdir, "osprey-queue"), ignore_errors=True)
        runs.append((ready_s, cpu_s, rss / 1024))
        print("start to ready %.4f s, CPU %.3f s, idle RSS %.1f MiB" % runs[-1])
    med = [statistics.median(r[i] for r in runs) for i in range(3)]
    print("median: start to ready %.4f s, CPU %.3f s, idle RSS %.1f MiB" %
          tuple(med))
    if args.result:
        print("RESULT start_rss ready_s=%.4f cpu_s=%.3f rss_mib=%.1f" %
              tuple(med))
    return 0


if __name__ == "__main__":
    sys.exit(main())
