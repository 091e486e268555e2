#!/usr/bin/env python3
"""Osprey HTTP benchmark: Osprey against a bare libmicrohttpd echo server.

Starts build/osprey (port 0) and build/tests/bench/echo_server side by side,
drives both with build/tests/bench/load_client, and prints the ratios of
issue 3's benchmark, with the absolute numbers beside them:

  (a) `simple` JSON infer/s / echo req/s, same body size, concurrency 1, 16, 128
      (goal >= 0.7)
  (b) identity_fp32 with a 16 MiB FP32 binary tensor: Osprey MB/s / echo MB/s
      for the same body (goal >= 0.8)
  (c) identity_fp32 binary / JSON throughput for [1,16], [1,1000], [1,262144]

The two sides of each ratio run alternately, --repeat times each, and the
median run of each side is reported, so that background load hits both
alike. Nothing here is asserted on times; the exit status is 1 only when a
server failed or a request got an error (non-200, I/O, wrong content).
Only the Python standard library is used.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

STARTED = re.compile(rb"Started HTTPService at ([^\s:]+):(\d+)")
SIXTEEN_MIB_FP32 = 4 * 1024 * 1024  # elements


class Server:
    """A server process whose output goes to a log file; knows its port."""

    def __init__(self, name, argv, log_dir):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.address = None
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            m = STARTED.search(line)
            if m and not self._started.is_set():
                host = m.group(1).decode()
                if host in ("0.0.0.0", "::", "[::]"):
                    host = "127.0.0.1"
                self.address = "%s:%s" % (host, m.group(2).decode())
                self._started.set()
        self._started.set()  # exited: wake the waiter

    def wait_started(self, timeout):
        self._started.wait(timeout)
        if self.address is None:
            raise RuntimeError("%s did not start (see %s):\n%s" %
                               (self.name, self.log_path, self.log_tail()))

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=15):
        """SIGTERM, then wait; returns the exit status (None if killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._reader.join(5)
                self.log.close()
                return None
        self._reader.join(5)
        self.log.close()
        return self.proc.returncode


def wait_ready(address, paths, timeout):
    """Polls each path until it answers 200; raises on timeout."""
    deadline = time.monotonic() + timeout
    for path in paths:
        while True:
            try:
                with urllib.request.urlopen("http://%s%s" % (address, path),
                                            timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("%s%s never became ready" % (address, path))
            time.sleep(0.1)


class Bench:
    def __init__(self, args, osprey, echo):
        self.args = args
        self.osprey = osprey
        self.echo = echo
        self.failures = []  # (label, first_error)

    def load(self, label, server, mode, concurrency, duration=None, **extra):
        """Runs load_client once and returns its JSON result."""
        a = self.args
        argv = [a.load_client, "--url", server.address, "--mode", mode,
                "--concurrency", str(concurrency),
                "--threads", str(min(a.client_threads, concurrency)),
                "--duration", str(duration or a.duration),
                "--warmup", str(a.warmup), "--json"]
        for k, v in extra.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if p.returncode not in (0, 1) or not p.stdout.strip():
            raise RuntimeError("load_client failed (%d): %s" %
                               (p.returncode, p.stderr.strip()))
        r = json.loads(p.stdout)
        r["label"] = label
        if r["errors"] or r["requests"] == 0:
            self.failures.append((label, r))
        if not server.alive():
            raise RuntimeError("%s died during '%s':\n%s" %
                               (server.name, label, server.log_tail()))
        if a.verbose:
            print("  %-40s %10.1f req/s %9.2f MB/s p50 %.3f ms p99 %.3f ms"
                  " errors %d" % (label, r["requests_per_s"],
                                  r["request_mb_per_s"],
                                  r["latency_ms"]["p50"],
                                  r["latency_ms"]["p99"], r["errors"]),
                  file=sys.stderr, flush=True)
        return r

    def pair(self, first, second):
        """Runs two loads alternately --repeat times and returns the median
        run of each side (by infer/s), errors summed over all runs.

        first and second are (label, server, mode, concurrency, extra);
        second's extra may be a function of first's result."""
        runs = ([], [])
        for _ in range(self.args.repeat):
            for side, (label, server, mode, c, extra) in enumerate(
                    (first, second)):
                if callable(extra):
                    extra = extra(runs[0][-1])
                runs[side].append(self.load(label, server, mode, c, **extra))
        return tuple(median_run(r) for r in runs)

    def case_a(self):
        rows = []
        for c in self.args.a_concurrency:
            o, e = self.pair(
                ("(a) osprey simple JSON c=%d" % c, self.osprey,
                 "json-simple", c, {}),
                ("(a) echo same body c=%d" % c, self.echo, "raw", c,
                 lambda o: {"body_bytes": o["request_body_bytes"]}))
            rows.append((c, o, e))
        return rows

    def case_b(self):
        rows = []
        for c in self.args.b_concurrency:
            o, e = self.pair(
                ("(b) osprey 16 MiB binary c=%d" % c, self.osprey,
                 "binary-fp32", c, {"elements": SIXTEEN_MIB_FP32}),
                ("(b) echo same body c=%d" % c, self.echo, "raw", c,
                 lambda o: {"body_bytes": o["request_body_bytes"]}))
            rows.append((c, o, e))
        return rows

    def case_c(self):
        rows = []
        c = self.args.c_concurrency
        for n in (16, 1000, 262144):
            b, j = self.pair(
                ("(c) osprey binary [1,%d] c=%d" % (n, c), self.osprey,
                 "binary-fp32", c, {"elements": n}),
                ("(c) osprey JSON [1,%d] c=%d" % (n, c), self.osprey,
                 "json-fp32", c, {"elements": n}))
            rows.append((n, b, j))
        return rows


def median_run(runs):
    """The run with the median infer/s, carrying the errors of all runs."""
    ordered = sorted(runs, key=lambda r: r["requests_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["errors"] = sum(r["errors"] for r in runs)
    chosen["runs"] = len(runs)
    return chosen


def ratio(x, y):
    return x / y if y else float("nan")


def fmt_rate(r):
    return "{:,.0f}".format(r) if r >= 100 else "{:,.1f}".format(r)


def lat(r):
    return "%.2f / %.2f" % (r["latency_ms"]["p50"], r["latency_ms"]["p99"])


def errs(r):
    return "" if not r["errors"] else " (%d errors)" % r["errors"]


def mark(value, goal):
    return "%.2f %s" % (value, "ok" if value >= goal else "BELOW")


def tables(a_rows, b_rows, c_rows, env):
    """Returns the results as markdown lines."""
    out = ["Osprey HTTP benchmark: %s" % env, ""]
    if a_rows:
        out += ["(a) `simple` JSON infer/s vs echo req/s, same body size "
                "(goal >= 0.7)", "",
                "| concurrency | body B | Osprey infer/s | p50/p99 ms "
                "| echo req/s | p50/p99 ms | ratio |",
                "|---:|---:|---:|---:|---:|---:|---:|"]
        for c, o, e in a_rows:
            out.append("| %d | %d | %s%s | %s | %s%s | %s | %s |" % (
                c, o["request_body_bytes"], fmt_rate(o["requests_per_s"]),
                errs(o), lat(o), fmt_rate(e["requests_per_s"]), errs(e),
                lat(e), mark(ratio(o["requests_per_s"],
                                   e["requests_per_s"]), 0.7)))
        out.append("")
    if b_rows:
        out += ["(b) identity_fp32, 16 MiB FP32 binary tensor: MB/s of "
                "request body vs echo (goal >= 0.8)", "",
                "| concurrency | body B | Osprey MB/s | infer/s | p50/p99 ms "
                "| echo MB/s | req/s | p50/p99 ms | ratio |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c, o, e in b_rows:
            out.append("| %d | %d | %.0f%s | %s | %s | %.0f%s | %s | %s | %s |"
                       % (c, o["request_body_bytes"], o["request_mb_per_s"],
                          errs(o), fmt_rate(o["requests_per_s"]), lat(o),
                          e["request_mb_per_s"], errs(e),
                          fmt_rate(e["requests_per_s"]), lat(e),
                          mark(ratio(o["request_mb_per_s"],
                                     e["request_mb_per_s"]), 0.8)))
        out.append("")
    if c_rows:
        out += ["(c) identity_fp32 binary vs JSON tensors, concurrency %d"
                % c_rows[0][1]["concurrency"], "",
                "| shape | binary body B | binary infer/s | p50/p99 ms "
                "| JSON body B | JSON infer/s | p50/p99 ms | binary/JSON |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for n, b, j in c_rows:
            out.append("| [1,%d] | %d | %s%s | %s | %d | %s%s | %s | %.2f |" % (
                n, b["request_body_bytes"], fmt_rate(b["requests_per_s"]),
                errs(b), lat(b), j["request_body_bytes"],
                fmt_rate(j["requests_per_s"]), errs(j), lat(j),
                ratio(b["requests_per_s"], j["requests_per_s"])))
        out.append("")
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(root, "build"))
    ap.add_argument("--osprey", help="osprey binary (default BUILD/osprey)")
    ap.add_argument("--model-repository",
                    default=os.path.join(root, "models"))
    ap.add_argument("--duration", type=float, default=0.6,
                    help="measured seconds per run (default 0.6)")
    ap.add_argument("--warmup", type=float, default=0.2,
                    help="unmeasured seconds before each run (default 0.2)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="runs per side of each ratio, alternating; the "
                    "median is reported (default 5)")
    ap.add_argument("--http-threads", type=int, default=8,
                    help="HTTP thread pool of both servers (default 8)")
    ap.add_argument("--echo-io", choices=("poll", "epoll"), default="poll",
                    help="echo_server event loop; Osprey uses poll (default)")
    ap.add_argument("--client-threads", type=int, default=1,
                    help="load_client worker threads (default 1)")
    ap.add_argument("--a-concurrency", default="1,16,128")
    ap.add_argument("--b-concurrency", default="1,4")
    ap.add_argument("--c-concurrency", type=int, default=16)
    ap.add_argument("--cases", default="abc", help="subset of 'abc' to run")
    ap.add_argument("--osprey-arg", action="append", default=[],
                    help="extra osprey argument (repeatable)")
    ap.add_argument("--json-out", help="also write all raw results here")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print each point as it finishes (to stderr)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    args.a_concurrency = [int(x) for x in args.a_concurrency.split(",") if x]
    args.b_concurrency = [int(x) for x in args.b_concurrency.split(",") if x]
    bench_dir = os.path.join(args.build_dir, "tests", "bench")
    args.load_client = os.path.join(bench_dir, "load_client")
    echo_bin = os.path.join(bench_dir, "echo_server")
    osprey_bin = args.osprey or os.path.join(args.build_dir, "osprey")
    for path in (args.load_client, echo_bin, osprey_bin):
        if not os.access(path, os.X_OK):
            sys.exit("http_bench: %s is missing; build first "
                     "(cmake --build %s)" % (path, args.build_dir))

    log_dir = tempfile.mkdtemp(prefix="osprey-bench-")
    servers = []
    status = 0
    t_start = time.monotonic()
    try:
        echo = Server("echo_server", [echo_bin, "--port", "0", "--threads",
                                      str(args.http_threads), "--io",
                                      args.echo_io], log_dir)
        servers.append(echo)
        osprey = Server("osprey", [
            osprey_bin, "--model-repository=" + args.model_repository,
            "--http-port=0", "--http-address=127.0.0.1", "--metrics-port=0",
            "--http-thread-count=%d" % args.http_threads] + args.osprey_arg,
            log_dir)
        servers.append(osprey)
        echo.wait_started(10)
        osprey.wait_started(60)
        wait_ready(osprey.address, ["/v2/health/ready",
                                    "/v2/models/simple/ready",
                                    "/v2/models/identity_fp32/ready"], 60)

        bench = Bench(args, osprey, echo)
        a_rows = bench.case_a() if "a" in args.cases else []
        b_rows = bench.case_b() if "b" in args.cases else []
        c_rows = bench.case_c() if "c" in args.cases else []

        env = "%d CPUs; median of %d alternating runs of %s s (after %s s " \
              "warmup) per side; %d HTTP threads; echo on %s; %d client " \
              "thread(s)" % (os.cpu_count(), args.repeat, args.duration,
                             args.warmup, args.http_threads, args.echo_io,
                             args.client_threads)
        print("\n".join(tables(a_rows, b_rows, c_rows, env)))
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"a": a_rows, "b": b_rows, "c": c_rows}, f,
                          indent=1)
        for label, r in bench.failures:
            status = 1
            print("ERROR in %s: %d errors (status %d, io %d, content %d), "
                  "%d ok; statuses %s; first: %s" % (
                      label, r["errors"], r["status_errors"],
                      r["io_errors"], r["verify_errors"], r["requests"],
                      r["statuses"], r["first_error"]), file=sys.stderr)
    except (RuntimeError, OSError) as e:
        print("http_bench: %s" % e, file=sys.stderr)
        status = 1
    finally:
        for s in reversed(servers):
            code = s.stop()
            if code != 0:
                print("http_bench: %s exited with %s after SIGTERM (log %s)"
                      "\n%s" % (s.name, code, s.log_path, s.log_tail()),
                      file=sys.stderr)
                status = 1
    print("total %.0f s; server logs in %s" %
          (time.monotonic() - t_start, log_dir), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
