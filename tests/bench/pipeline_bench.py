#!/usr/bin/env python3
"""Ensemble and response-cache benchmark (issue 22), on the CPU device.

Writes a temporary model repository and starts build/osprey with
--cache-config=local,size=64MiB, then drives pairs of models with
build/tests/bench/load_client (closed loop, keep-alive, one binary request
in flight per connection), alternating the two sides of each pair
--repeat times, and prints a markdown table of infer/s, their ratio and
p50/p99 latency:

  ensemble   "ens_two": an ensemble of two identity steps (FP32 [1, N])
             against "one": the same identity model called alone (goal of
             the issue: ensemble / one >= 0.9)
  cache      "simple_cached" (add_sub, response_cache on) sent the same
             request every time, so every request after the first is a hit,
             against "simple" (the same model without the cache) at c=16
             (goal: hit / run >= 1.0; hit latency p50 < 50 us server time)

With --triton-python (the python of a virtual environment holding the
nvidia-pytriton wheel, e.g. the one peer_bench.py makes), a third pair:

  vs Triton  "ens_chain": an ensemble of --steps identity steps on Osprey
             against the same ensemble on Triton (the wheel's tritonserver)
             whose steps are python-backend identity models, one CPU
             instance each (goal: Osprey / Triton >= 2)

With --redis (redis-server on the PATH), the response cache's hit latency:
a second Osprey with --cache-config=redis,... on a redis-server started on
a free loopback port, and three sides alternated at --redis-concurrency
(default 1, so p50 is one request's latency): "simple" run by the model,
"simple_cached" hit in the local cache, "simple_cached" hit in Redis.

The server time of a hit is read from the statistics endpoint: the mean
request duration (success.ns / success.count) over the measured runs of the
cached model, all of them hits after the first. Nothing is asserted; the
exit status is 1 only when the server failed or a request got an error.
Only the Python standard library is used.
"""

import argparse
import array
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batching_bench import process_cpu_s  # noqa: E402
from http_bench import Server, median_run, wait_ready  # noqa: E402
import peer_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def identity(name, dtype, dims):
    return ('name: "%s"\nbackend: "identity"\nmax_batch_size: 8\n'
            'input [ { name: "INPUT0" data_type: %s dims: %s } ]\n'
            'output [ { name: "OUTPUT0" data_type: %s dims: %s } ]\n'
            % (name, dtype, dims, dtype, dims))


def add_sub(name, cached):
    text = ('name: "%s"\nbackend: "add_sub"\nmax_batch_size: 8\n'
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },\n'
            '        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },\n'
            '         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]\n' % name)
    return text + ("response_cache { enable: true }\n" if cached else "")


ENSEMBLE = '''name: "ens_two"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "step_a" model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      output_map { key: "OUTPUT0" value: "middle" } },
    { model_name: "step_b" model_version: -1
      input_map { key: "INPUT0" value: "middle" }
      output_map { key: "OUTPUT0" value: "OUTPUT0" } }
  ]
}
'''


def chain(n):
    """An ensemble of n steps step_0 .. step_<n-1>, one after the other."""
    steps = []
    for k in range(n):
        src = "INPUT0" if k == 0 else "t%d" % k
        dst = "OUTPUT0" if k == n - 1 else "t%d" % (k + 1)
        steps.append('    { model_name: "step_%d" model_version: -1\n'
                     '      input_map { key: "INPUT0" value: "%s" }\n'
                     '      output_map { key: "OUTPUT0" value: "%s" } }' % (k, src, dst))
    return ENSEMBLE.replace('"ens_two"', '"ens_chain"').split("ensemble_scheduling")[0] + (
        "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n")


def write_models(root, models, files=None):
    for name, text in models.items():
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(text)
        for fname, data in (files or {}).get(name, {}).items():
            with open(os.path.join(root, name, "1", fname), "w") as f:
                f.write(data)


def triton_repo(root, n):
    """The chain for Triton: python-backend identity steps."""
    models, files = {"ens_chain": chain(n)}, {}
    for k in range(n):
        name = "step_%d" % k
        models[name] = (identity(name, "TYPE_FP32", "[ -1 ]")
                        .replace('backend: "identity"', 'backend: "python"')
                        + "instance_group [ { count: 1 kind: KIND_CPU } ]\n")
        files[name] = {"model.py": peer_bench.TRITON_IDENTITY_PY}
    write_models(root, models, files)


def make_repo(root, n_chain):
    models = {
        "one": identity("one", "TYPE_FP32", "[ -1 ]"),
        "step_a": identity("step_a", "TYPE_FP32", "[ -1 ]"),
        "step_b": identity("step_b", "TYPE_FP32", "[ -1 ]"),
        "ens_two": ENSEMBLE,
        "simple": add_sub("simple", False),
        "simple_cached": add_sub("simple_cached", True),
        "ens_chain": chain(n_chain),
    }
    for k in range(n_chain):
        models["step_%d" % k] = identity("step_%d" % k, "TYPE_FP32", "[ -1 ]")
    write_models(root, models)


def write_body(path, inputs):
    """A binary request of `inputs` [(name, datatype, shape, bytes)]; returns
    its Inference-Header-Content-Length."""
    header = json.dumps({
        "inputs": [{"name": n, "datatype": t, "shape": s,
                    "parameters": {"binary_data_size": len(b)}} for n, t, s, b in inputs],
    }, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(header + b"".join(b for _, _, _, b in inputs))
    return len(header)


def model_stats(address, model):
    with urllib.request.urlopen("http://%s/v2/models/%s/stats" % (address, model),
                                timeout=10) as r:
        return json.load(r)["model_stats"][0]


def success_count(address, model):
    return model_stats(address, model)["inference_stats"]["success"]["count"]


def start_triton(args, work, n):
    """Triton serving the python-backend chain; returns its Server."""
    root = os.path.join(work, "triton-repo")
    triton_repo(root, n)
    tritonserver, backends, env = peer_bench.triton_backends(
        work, args.triton_python, None)
    return Server("triton", [
        "env", "LD_LIBRARY_PATH=" + env["LD_LIBRARY_PATH"], "PATH=" + env["PATH"],
        tritonserver, "--model-repository=" + root, "--backend-directory=" + backends,
        "--http-address=127.0.0.1", "--http-port=%d" % peer_bench.free_port(),
        "--grpc-port=%d" % peer_bench.free_port(),
        "--metrics-port=%d" % peer_bench.free_port(), "--log-verbose=0"], work)


def run_load(args, address, model, body, ihcl, concurrency, pid=None):
    """One load_client run; with `pid`, also the server's CPU µs per request
    the model answered, warm-up included on both sides of the division
    (steadier than infer/s on a shared machine)."""
    cpu_before = process_cpu_s(pid) if pid else 0.0
    done_before = success_count(address, model) if pid else 0
    argv = [args.load_client, "--url", address,
            "--path", "/v2/models/%s/infer" % model,
            "--body-file", body, "--ihcl", str(ihcl),
            "--concurrency", str(concurrency), "--threads", str(args.client_threads),
            "--duration", str(args.duration), "--warmup", str(args.warmup), "--json"]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError("load_client failed (%d): %s" % (p.returncode, p.stderr.strip()))
    r = json.loads(p.stdout)
    if pid:
        r["cpu_us"] = ((process_cpu_s(pid) - cpu_before) * 1e6
                       / max(1, success_count(address, model) - done_before))
    if args.verbose:
        print("  %-14s %9.1f infer/s  p50 %6.3f ms  p99 %6.3f ms  errors %d"
              % (model, r["requests_per_s"], r["latency_ms"]["p50"],
                 r["latency_ms"]["p99"], r["errors"]), file=sys.stderr, flush=True)
    return r


def median(values):
    v = sorted(values)
    return v[len(v) // 2]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--osprey", help="server binary (default BUILD/osprey)")
    p.add_argument("--load-client", help="default BUILD/tests/bench/load_client")
    p.add_argument("--elements", type=int, default=1024,
                   help="FP32 elements of the identity requests")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--client-threads", type=int, default=1)
    p.add_argument("--duration", type=float, default=3.0, help="measured s per run")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--repeat", type=int, default=3, help="alternating runs per side")
    p.add_argument("--http-threads", type=int, default=8)
    p.add_argument("--steps", type=int, default=4, help="steps of the chain against Triton")
    p.add_argument("--triton-python",
                   help="python of a venv with nvidia-pytriton: compare with Triton")
    p.add_argument("--redis", action="store_true",
                   help="also the redis cache's hits against the local cache's")
    p.add_argument("--redis-concurrency", type=int, default=1)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    args.osprey = args.osprey or os.path.join(args.build_dir, "osprey")
    args.load_client = args.load_client or os.path.join(
        args.build_dir, "tests", "bench", "load_client")
    return args


def start_redis(work):
    """redis-server on a free loopback port, no persistence; (proc, port)."""
    port = peer_bench.free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def redis_rows(args, work, repo, local, body, ihcl):
    """The hit latency of the redis cache against the local cache's and
    against running the model: rows (label, run, mean server µs)."""
    redis, port = start_redis(work)
    server = Server("osprey-redis", [
        args.osprey, "--model-repository=" + repo, "--http-port=0",
        "--http-address=127.0.0.1", "--metrics-port=0", "--grpc-port=0",
        "--cache-config=redis,host=127.0.0.1,port=%d,connect_timeout=1000,"
        "socket_timeout=1000,pool_size=%d" % (port, max(1, args.redis_concurrency)),
        "--http-thread-count=%d" % args.http_threads], work)
    try:
        server.wait_started(60)
        wait_ready(server.address, ["/v2/health/ready"], 60)
        sides = [("running `simple` (no cache)", local, "simple"),
                 ("local cache hit", local, "simple_cached"),
                 ("redis cache hit", server, "simple_cached")]
        runs = {label: [] for label, _, _ in sides}
        before = {label: model_stats(srv.address, m)["inference_stats"]["success"]
                  for label, srv, m in sides}
        for _ in range(args.repeat):
            for label, srv, model in sides:
                r = run_load(args, srv.address, model, body, ihcl,
                             args.redis_concurrency, srv.proc.pid)
                if r["errors"] or r["requests"] == 0:
                    raise RuntimeError("errors in %s: %s" % (label, r.get("first_error")))
                runs[label].append(r)
        rows = []
        for label, srv, model in sides:
            after = model_stats(srv.address, model)["inference_stats"]["success"]
            b = before[label]
            server_us = (after["ns"] - b["ns"]) / max(1, after["count"] - b["count"]) / 1e3
            rows.append((label, median_run(runs[label]), server_us))
        hits = model_stats(server.address, "simple_cached")["inference_stats"]
        return rows, hits
    finally:
        server.stop()
        redis.terminate()
        redis.wait(10)


def main():
    args = parse_args()
    for path in (args.osprey, args.load_client):
        if not os.access(path, os.X_OK):
            sys.exit("pipeline_bench: %s is missing; build first" % path)
    work = tempfile.mkdtemp(prefix="osprey-pipeline-bench-")
    repo = os.path.join(work, "repo")
    make_repo(repo, args.steps)
    rng = random.Random(22)
    floats = array.array("f", (rng.random() for _ in range(args.elements))).tobytes()
    ints = array.array("i", range(16)).tobytes()
    id_body = os.path.join(work, "identity.bin")
    id_ihcl = write_body(id_body, [("INPUT0", "FP32", [1, args.elements], floats)])
    simple_body = os.path.join(work, "simple.bin")
    simple_ihcl = write_body(simple_body, [("INPUT0", "INT32", [1, 16], ints),
                                           ("INPUT1", "INT32", [1, 16], ints)])
    pairs = [("ensemble of 2 identity steps ÷ one identity model", "ens_two", "one",
              id_body, id_ihcl, 0.9),
             ("cache hit ÷ running `simple`", "simple_cached", "simple",
              simple_body, simple_ihcl, 1.0)]
    status = 0
    server = Server("osprey", [
        args.osprey, "--model-repository=" + repo, "--http-port=0",
        "--http-address=127.0.0.1", "--metrics-port=0", "--grpc-port=0",
        "--cache-config=local,size=67108864",
        "--http-thread-count=%d" % args.http_threads], work)
    try:
        server.wait_started(60)
        wait_ready(server.address, ["/v2/health/ready"], 60)
        rows = []
        for label, a, b, body, ihcl, goal in pairs:
            runs = {a: [], b: []}
            before = model_stats(server.address, a)["inference_stats"]["success"]
            for _ in range(args.repeat):
                for model in (a, b):
                    r = run_load(args, server.address, model, body, ihcl,
                                 args.concurrency, server.proc.pid)
                    runs[model].append(r)
                    if r["errors"] or r["requests"] == 0:
                        status = 1
                        print("ERROR in %s: %s" % (model, r.get("first_error")),
                              file=sys.stderr)
                    if not server.alive():
                        raise RuntimeError("osprey died:\n" + server.log_tail())
            after = model_stats(server.address, a)["inference_stats"]["success"]
            server_us = (after["ns"] - before["ns"]) / max(1, after["count"] - before["count"]) / 1e3
            ra, rb = median_run(runs[a]), median_run(runs[b])
            cpu = (median([r["cpu_us"] for r in runs[a]]),
                   median([r["cpu_us"] for r in runs[b]]))
            rows.append((label, ra, rb, goal, server_us, cpu))
        if args.triton_python:
            triton = start_triton(args, work, args.steps)
            try:
                triton.wait_started(120)
                wait_ready(triton.address, ["/v2/models/ens_chain/ready"], 120)
                runs = {"osprey": [], "triton": []}
                for _ in range(args.repeat):
                    for side, address in (("osprey", server.address),
                                          ("triton", triton.address)):
                        r = run_load(args, address, "ens_chain", id_body, id_ihcl,
                                     args.concurrency)
                        runs[side].append(r)
                        if r["errors"] or r["requests"] == 0:
                            status = 1
                            print("ERROR in %s: %s" % (side, r.get("first_error")),
                                  file=sys.stderr)
                rows.append(("ensemble of %d identity steps: Osprey ÷ Triton (python "
                             "steps)" % args.steps, median_run(runs["osprey"]),
                             median_run(runs["triton"]), 2.0, float("nan"),
                             None))
            finally:
                triton.stop()
        hits = model_stats(server.address, "simple_cached")["inference_stats"]
        print("| pair | infer/s | infer/s (baseline) | ratio (goal) | p50 / p99 ms | "
              "p50 / p99 ms (baseline) | server CPU µs/request (baseline) | "
              "mean server time of the first side |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, ra, rb, goal, server_us, cpu in rows:
            ratio = ra["requests_per_s"] / rb["requests_per_s"] if rb["requests_per_s"] else 0
            print("| %s | %.0f | %.0f | **%.2f** (%.1f) | %.3f / %.3f | %.3f / %.3f | %s | %s |"
                  % (label, ra["requests_per_s"], rb["requests_per_s"], ratio, goal,
                     ra["latency_ms"]["p50"], ra["latency_ms"]["p99"],
                     rb["latency_ms"]["p50"], rb["latency_ms"]["p99"],
                     "%.1f (%.1f)" % cpu if cpu else "",
                     "%.1f µs" % server_us if server_us == server_us else ""))
        print()
        print("c=%d, %d FP32 elements per identity request, %d alternating runs of %.1f s "
              "per side (median run shown); cache hits %d, misses %d; %d CPUs"
              % (args.concurrency, args.elements, args.repeat, args.duration,
                 hits["cache_hit"]["count"], hits["cache_miss"]["count"], os.cpu_count()))
        if args.redis:
            rows, rhits = redis_rows(args, work, repo, server, simple_body, simple_ihcl)
            print()
            print("| side | infer/s | p50 / p99 ms | mean server time |")
            print("|---|---:|---:|---:|")
            for label, r, server_us in rows:
                print("| %s | %.0f | %.3f / %.3f | %.1f µs |"
                      % (label, r["requests_per_s"], r["latency_ms"]["p50"],
                         r["latency_ms"]["p99"], server_us))
            print()
            print("`simple` (add_sub, INT32 [1, 16] x2), c=%d, %d alternating runs of "
                  "%.1f s per side (median run shown); redis cache hits %d, misses %d"
                  % (args.redis_concurrency, args.repeat, args.duration,
                     rhits["cache_hit"]["count"], rhits["cache_miss"]["count"]))
    finally:
        rc = server.stop()
        if rc not in (0, None):
            print("osprey exited with %s" % rc, file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
