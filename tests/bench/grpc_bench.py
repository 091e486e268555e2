#!/usr/bin/env python3
"""Osprey gRPC benchmark: the gRPC port against the HTTP port of one
server, same model, same concurrency, same kind of client (issue 11):

  (a) `simple` (INT32 [1,16] x2) infer/s over gRPC / over HTTP (binary
      tensors), at concurrency 1, 16 and 64 (goal >= 0.9)
  (b) identity_fp32 with one 16 MiB FP32 tensor: gRPC MB/s / HTTP binary
      MB/s, at concurrency 1 and 4 (goal >= 0.8)

Two load clients:

  --client c (default): the project's own C clients, one process per side:
      build/tests/bench/grpc_load_client (gRPC core's C API, the request
      packed once, raw_input_contents, `concurrency` calls in flight over
      --grpc-channels connections) against build/tests/bench/load_client
      (HTTP/1.1 keep-alive, binary tensors, one request in flight on each of
      `concurrency` connections). Both check every response's values.
  --client tritonclient: the official tritonclient.grpc / tritonclient.http
      (binary tensors), driven from several processes (concurrency = P
      processes x T threads, one client and one request in flight per
      thread), so the Python client's own cost is in both sides alike.
      Needs the test venv (.venv).

--pin S,C pins the server to CPU S and the clients to CPU C (taskset), as
peer_bench.py does: then the rates measure the server, not the sum of
server and client CPU on shared cores (the gRPC client costs about twice
the HTTP client per call).

--triton-identity-backend SO runs the same comparison against a real Triton
instead (the nvidia-pytriton wheel's tritonserver with Triton's C++
identity backend, set up as peer_bench.py does; TRITON_IDENTITY.md), on
`identity_fp32` [1,16]: Triton's own gRPC / HTTP ratio, for reference.
--model identity runs Osprey on that model too.

The two sides of each ratio alternate, --repeat times each, and the median
run of each side is reported with its absolute numbers and the server's CPU
time per request (from /proc, over the whole run; steadier than infer/s on
a shared machine). Nothing is asserted on times; the exit status is 1 only
when a request failed or the server did not exit 0.
"""

import argparse
import json
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
import urllib.request

HTTP_RE = re.compile(r"Started HTTPService at \S+:(\d+)")
GRPC_RE = re.compile(r"Started GRPCInferenceService at \S+:(\d+)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIXTEEN_MIB_FP32 = 4 * 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ---- tritonclient mode ------------------------------------------------------

def make_inputs(mod, case):
    import numpy as np
    if case == "simple":
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        ins = [mod.InferInput("INPUT0", [1, 16], "INT32"),
               mod.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        return "simple", ins
    x = np.ones((1, SIXTEEN_MIB_FP32), dtype=np.float32)
    ins = [mod.InferInput("INPUT0", [1, SIXTEEN_MIB_FP32], "FP32")]
    ins[0].set_data_from_numpy(x)
    return "identity_fp32", ins


def tritonclient_worker(args):
    """One process: `threads` closed-loop clients for `duration` seconds.
    Returns (requests, errors, first error)."""
    proto, url, case, threads, duration, warmup = args
    if proto == "grpc":
        import tritonclient.grpc as mod
    else:
        import tritonclient.http as mod
    counts = [0] * threads
    errors = [0] * threads
    first = []
    start = time.monotonic() + warmup
    stop = start + duration

    def run(i):
        if proto == "grpc":
            c = mod.InferenceServerClient(url)
        else:
            c = mod.InferenceServerClient(url, connection_timeout=60,
                                          network_timeout=60)
        model, ins = make_inputs(mod, case)
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
            except Exception as e:  # counted and reported, the run goes on
                errors[i] += 1
                first.append(str(e))
        c.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts), sum(errors), first[0] if first else ""


class TritonClientLoad:
    name = ("tritonclient.grpc vs tritonclient.http (binary tensors), "
            "P processes x T threads = concurrency, one client per thread")

    def __init__(self, opts):
        self.opts = opts
        self.pool = mp.get_context("spawn").Pool(8)

    def run(self, proto, url, case, c):
        o = self.opts
        procs = min(c, os.cpu_count() or 1, 8)
        per = [c // procs + (1 if i < c % procs else 0) for i in range(procs)]
        results = self.pool.map(tritonclient_worker,
                                [(proto, url, case, t, o.duration, o.warmup)
                                 for t in per])
        n = sum(r[0] for r in results)
        size = 128 if case == "simple" else SIXTEEN_MIB_FP32 * 4
        return {"requests": n, "requests_per_s": n / o.duration,
                "request_mb_per_s": n * size / o.duration / 1e6,
                "latency_ms": None,
                "errors": sum(r[1] for r in results),
                "first_error": next((r[2] for r in results if r[2]), "")}

    def close(self):
        self.pool.close()
        self.pool.join()


# ---- C client mode ----------------------------------------------------------

class CLoad:
    def __init__(self, opts):
        self.opts = opts
        bench = os.path.join(opts.build_dir, "tests", "bench")
        self.http = os.path.join(bench, "load_client")
        self.grpc = os.path.join(bench, "grpc_load_client")
        for path in (self.http, self.grpc):
            if not os.access(path, os.X_OK):
                sys.exit("grpc_bench: %s is missing; build first" % path)
        self.name = ("the project's C clients: grpc_load_client (gRPC core C "
                     "API, request packed once, %s) vs load_client (HTTP/1.1 "
                     "keep-alive, binary tensors, one connection per request "
                     "in flight); %d client thread(s) each" % (
                         "one connection per call in flight"
                         if opts.grpc_channels == 0 else
                         "%d connection(s)" % opts.grpc_channels,
                         opts.client_threads))

    def run(self, proto, url, case, c):
        o = self.opts
        small = (["--mode", "simple"] if o.model == "simple" else
                 ["--mode", "fp32", "--elements", "16"])
        if proto == "http":
            small = ["--mode", "binary-" + small[1]] + small[2:]
        common = ["--url", url, "--concurrency", str(c),
                  "--threads", str(min(o.client_threads, c)),
                  "--duration", str(o.duration), "--warmup", str(o.warmup),
                  "--json"]
        if proto == "grpc":
            channels = c if o.grpc_channels == 0 else min(o.grpc_channels, c)
            argv = [self.grpc, "--channels", str(channels)] + common + (
                small if case == "simple" else
                ["--mode", "fp32", "--elements", str(SIXTEEN_MIB_FP32)])
        else:
            argv = [self.http] + common + (
                small if case == "simple" else
                ["--mode", "binary-fp32", "--elements", str(SIXTEEN_MIB_FP32)])
        argv = pin_prefix(o, 1) + argv
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if p.returncode not in (0, 1) or not p.stdout.strip():
            raise RuntimeError("%s failed (%d): %s" %
                               (argv[0], p.returncode, p.stderr.strip()))
        r = json.loads(p.stdout)
        if r["requests"] == 0 and not r["errors"]:
            r["errors"] = 1
            r["first_error"] = r["first_error"] or "no request completed"
        return r

    def close(self):
        pass


# ---- the benchmark ----------------------------------------------------------

def pin_prefix(opts, which):
    """taskset argv for the server (which=0) or the clients (1) under --pin."""
    if not opts.pin:
        return []
    return ["taskset", "-c", opts.pin.split(",")[which]]


def start_triton(opts, log_path):
    """tritonserver with the C++ identity backend on identity_fp32 (as
    peer_bench.py sets it up); returns (process, http port, grpc port)."""
    import peer_bench  # noqa: E402 (same folder)
    work = os.path.dirname(log_path)
    python = peer_bench.ensure_venv(os.path.join(opts.venvs, "triton"),
                                    ["nvidia-pytriton"],
                                    os.path.join(work, "pip.log"))
    tritonserver, backends, env = peer_bench.triton_backends(
        work, python, opts.triton_identity_backend)
    root = os.path.join(work, "repo-triton")
    peer_bench.triton_cpp_repo(root)
    http_port, grpc_port = peer_bench.free_port(), peer_bench.free_port()
    srv = subprocess.Popen(pin_prefix(opts, 0) + [
        tritonserver, "--model-repository=" + root,
        "--backend-directory=" + backends,
        "--http-address=127.0.0.1", "--http-port=%d" % http_port,
        "--grpc-address=127.0.0.1", "--grpc-port=%d" % grpc_port,
        "--metrics-port=%d" % peer_bench.free_port(), "--log-verbose=0"],
        env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and srv.poll() is None:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/v2/health/ready"
                                        % http_port, timeout=1):
                time.sleep(0.5)
                return srv, http_port, grpc_port
        except OSError:
            time.sleep(0.1)
    srv.kill()
    srv.wait()
    raise RuntimeError("tritonserver did not start; log in %s" % log_path)


def start_server(opts, log_path):
    if opts.triton_identity_backend:
        return start_triton(opts, log_path)
    log = open(log_path, "wb")
    queue_dir = os.path.join(os.path.dirname(log_path), "queue")
    srv = subprocess.Popen(pin_prefix(opts, 0) + [opts.osprey,
                            "--model-repository=%s" % os.path.join(ROOT, "models"),
                            "--http-port=0", "--grpc-port=0", "--metrics-port=0",
                            "--http-address=127.0.0.1",
                            "--grpc-address=127.0.0.1",
                            "--queue-dir=" + queue_dir] + opts.osprey_arg,
                           stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = open(log_path, errors="replace").read()
        h, g = HTTP_RE.search(text), GRPC_RE.search(text)
        if h and g:
            time.sleep(0.5)
            return srv, int(h.group(1)), int(g.group(1))
        if srv.poll() is not None:
            break
        time.sleep(0.05)
    srv.kill()
    srv.wait()
    raise RuntimeError("osprey did not start; log in %s" % log_path)


def median_run(runs):
    """The run with the median infer/s, with the median server CPU per
    request of all runs and their errors summed."""
    ordered = sorted(runs, key=lambda r: r["requests_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["cpu_us"] = statistics.median(r["cpu_us"] for r in runs)
    chosen["errors"] = sum(r["errors"] for r in runs)
    return chosen


def fmt_rate(r):
    return "{:,.0f}".format(r) if r >= 100 else "{:,.1f}".format(r)


def lat(r):
    if not r.get("latency_ms"):
        return "-"
    return "%.2f / %.2f" % (r["latency_ms"]["p50"], r["latency_ms"]["p99"])


def mark(value, goal):
    return "%.2f %s" % (value, "ok" if value >= goal else "BELOW")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", choices=("c", "tritonclient"), default="c")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--osprey", help="osprey binary (default BUILD/osprey)")
    ap.add_argument("--osprey-arg", action="append", default=[],
                    help="extra osprey argument (repeatable)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--client-threads", type=int, default=1,
                    help="C clients' threads per side (default 1)")
    ap.add_argument("--grpc-channels", type=int, default=0,
                    help="grpc_load_client connections; 0 = one per call in "
                    "flight, as HTTP has (default 0)")
    ap.add_argument("--a-concurrency", default="1,16,64")
    ap.add_argument("--b-concurrency", default="1,4")
    ap.add_argument("--model", choices=("simple", "identity"), default="simple",
                    help="(a)'s model: `simple` or `identity_fp32` [1,16]")
    ap.add_argument("--pin", metavar="S,C",
                    help="pin the server to CPU S and the clients to CPU C")
    ap.add_argument("--triton-identity-backend", metavar="SO",
                    help="measure Triton (C++ identity backend) instead; "
                    "implies --model identity")
    ap.add_argument("--venvs", default=os.path.expanduser(
        "~/.cache/osprey-peer-bench"), help="peer_bench.py's scratch venvs")
    ap.add_argument("--json-out", help="also write the median runs here")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print each run as it finishes (to stderr)")
    opts = ap.parse_args()
    opts.osprey = opts.osprey or os.path.join(opts.build_dir, "osprey")
    if opts.triton_identity_backend:
        opts.model = "identity"
    if opts.model != "simple" and opts.client != "c":
        ap.error("--model identity and --triton-identity-backend need --client c")

    log_dir = tempfile.mkdtemp(prefix="osprey-grpc-bench-")
    log_path = os.path.join(log_dir, "osprey.log")
    try:
        srv, http_port, grpc_port = start_server(opts, log_path)
    except RuntimeError as e:
        print("grpc_bench: %s" % e, file=sys.stderr)
        return 1
    urls = {"grpc": "127.0.0.1:%d" % grpc_port,
            "http": "127.0.0.1:%d" % http_port}
    load = CLoad(opts) if opts.client == "c" else TritonClientLoad(opts)
    failures = []
    rows = []
    try:
        for case, concs in (("simple", opts.a_concurrency),
                            ("large", opts.b_concurrency)):
            for c in [int(x) for x in concs.split(",") if x]:
                runs = {"grpc": [], "http": []}
                for _ in range(opts.repeat):
                    for proto in ("grpc", "http"):
                        cpu0 = cpu_seconds(srv.pid)
                        r = load.run(proto, urls[proto], case, c)
                        cpu = cpu_seconds(srv.pid) - cpu0
                        # CPU over warmup + duration, requests over the
                        # duration: scale the count to the whole run.
                        total = r["requests"] * (opts.warmup + opts.duration) \
                            / opts.duration
                        r["cpu_us"] = cpu / total * 1e6 if total else 0
                        if r["errors"]:
                            failures.append((proto, case, c, r))
                        if opts.verbose:
                            print("  %-4s %-6s c=%-3d %10.1f infer/s %9.1f "
                                  "MB/s  server CPU %.1f us/req  errors %d" % (
                                      proto, case, c, r["requests_per_s"],
                                      r["request_mb_per_s"], r["cpu_us"],
                                      r["errors"]), file=sys.stderr, flush=True)
                        runs[proto].append(r)
                        if srv.poll() is not None:
                            raise RuntimeError("osprey died; log in %s" % log_path)
                rows.append((case, c, {p: median_run(v) for p, v in runs.items()}))
    except RuntimeError as e:
        print("grpc_bench: %s" % e, file=sys.stderr)
        failures.append(("-", "-", 0, {"errors": 1, "first_error": str(e)}))
    finally:
        load.close()
        if srv.poll() is None:
            srv.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=60)
    if rc != 0:
        failures.append(("-", "-", 0, {"errors": 1,
                                       "first_error": "osprey exited %d" % rc}))

    print("Server: %s%s.\n" % (
        "Triton 2.51 (nvidia-pytriton) with the C++ identity backend"
        if opts.triton_identity_backend else "osprey",
        "; server on CPU %s, clients on CPU %s" % tuple(opts.pin.split(","))
        if opts.pin else "; server and clients share the CPUs"))
    print("Load client: %s. Median of %d alternating runs of %g s (after "
          "%g s warmup) per side, %d CPUs; server CPU is utime+stime per "
          "request.\n" % (load.name, opts.repeat, opts.duration, opts.warmup,
                          os.cpu_count()))
    print("| case | c | gRPC | p50/p99 ms | server CPU µs/req | HTTP "
          "| p50/p99 ms | server CPU µs/req | gRPC / HTTP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case, c, med in rows:
        g, h = med["grpc"], med["http"]
        if case == "simple":
            label = ("(a) `simple` infer/s" if opts.model == "simple" else
                     "(a) `identity_fp32` [1,16] infer/s")
            key, goal, fmt = "requests_per_s", 0.9, fmt_rate
        else:
            label, key, goal = "(b) 16 MiB FP32 `identity_fp32` MB/s", "request_mb_per_s", 0.8
            fmt = lambda x: "%.0f" % x  # noqa: E731
        ratio = g[key] / h[key] if h[key] else float("nan")
        print("| %s | %d | %s | %s | %.1f | %s | %s | %.1f | %s |" % (
            label, c, fmt(g[key]), lat(g), g["cpu_us"], fmt(h[key]), lat(h),
            h["cpu_us"], mark(ratio, goal)))
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump([{"case": case, "concurrency": c, **med}
                       for case, c, med in rows], f, indent=1)
    for proto, case, c, r in failures:
        print("ERROR %s %s c=%s: %d errors; first: %s" % (
            proto, case, c, r["errors"], r.get("first_error", "")),
            file=sys.stderr)
    if failures:
        print("server log in %s" % log_path, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
