#!/usr/bin/env python3
"""Dynamic batching benchmark (issue 5): the same dense model with and
without `dynamic_batching`, at concurrency 32 on the CPU device.

Writes a temporary model repository holding, for each model shape, a
"plain" and a "batched" copy that differ only in the dynamic_batching block
(same weights, same max_batch_size, same instance count):

  digits   digits_mlp's shape and weights (64 -> 64 -> 10, relu, softmax)
  dense1k  1024 -> 1024 -> 1024 -> 10 (relu), random weights written here
           as safetensors (fixed seed)

starts build/osprey on free ports, drives each copy with
build/tests/bench/load_client (closed loop, keep-alive, one binary FP32
request of batch 1 in flight per connection), alternating plain and batched
runs --repeat times, and prints a markdown table: infer/s of each and their
ratio (goal >= 3x), p99 latency of each, and the average batch size of the
batched runs (inference_count / execution_count from the statistics
endpoint, over the measured runs). Nothing is asserted on times; the exit
status is 1 only when the server failed or a request got an error.
Only the Python standard library is used.
"""

import argparse
import array
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_bench import Server, median_run, wait_ready  # noqa: E402
from safetensors_file import write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the model repository ------------------------------------------------------------


def random_mlp(sizes, seed):
    """Layers for sizes [in, h1, ..., out]: uniform(+-1/sqrt(in)) weights
    (PyTorch's nn.Linear default) and small biases."""
    rng = random.Random(seed)
    tensors = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1.0 / math.sqrt(n_in)
        w = array.array("f", (rng.uniform(-bound, bound) for _ in range(n_in * n_out)))
        b = array.array("f", (rng.uniform(-bound, bound) for _ in range(n_out)))
        tensors += [("layers.%d.weight" % i, (n_out, n_in), w),
                    ("layers.%d.bias" % i, (n_out,), b)]
    return tensors


def config(name, n_in, n_out, max_batch, instances, batching, output_activation):
    text = (
        'name: "%s"\nbackend: "dense"\nmax_batch_size: %d\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ %d ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ %d ] } ]\n'
        'instance_group [ { count: %d kind: KIND_CPU } ]\n'
        'parameters [ { key: "activation" value: { string_value: "relu" } },\n'
        '  { key: "output_activation" value: { string_value: "%s" } } ]\n'
        % (name, max_batch, n_in, n_out, instances, output_activation))
    if batching is not None:
        text += batching
    return text


def make_repo(root, args):
    """Writes the models; returns [(label, n_in, plain name, batched name)]."""
    batching = "dynamic_batching { max_queue_delay_microseconds: %d }\n" % args.delay_us
    digits_weights = os.path.join(ROOT, "models", "digits_mlp", "1", "model.safetensors")
    cases = []
    specs = [("digits", "digits_mlp-shaped 64-64-10", 64, 10, "softmax", None),
             ("dense1k", "dense 1024-1024-1024-10", 1024, 10, "none",
              [1024, 1024, 1024, 10])]
    for key, label, n_in, n_out, out_act, sizes in specs:
        if key not in args.models:
            continue
        weights = None
        if sizes is not None:
            weights = os.path.join(root, key + ".safetensors")
            write_safetensors(weights, random_mlp(sizes, seed=5))
        names = []
        for variant, block in (("plain", None), ("batched", batching)):
            name = "%s_%s" % (key, variant)
            vdir = os.path.join(root, name, "1")
            os.makedirs(vdir)
            shutil.copyfile(weights or digits_weights,
                            os.path.join(vdir, "model.safetensors"))
            with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
                f.write(config(name, n_in, n_out, args.max_batch_size,
                               args.instances, block, out_act))
            names.append(name)
        cases.append((label, n_in, names[0], names[1]))
    return cases


def write_body(path, n_in, seed):
    """One binary request of shape [1, n_in]; returns its IHCL."""
    rng = random.Random(seed)
    data = array.array("f", (rng.random() for _ in range(n_in))).tobytes()
    header = json.dumps({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, n_in],
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(header + data)
    return len(header)


# ---- runs -------------------------------------------------------------------------------


def model_counts(address, model):
    with urllib.request.urlopen("http://%s/v2/models/%s/stats" % (address, model),
                                timeout=10) as r:
        s = json.load(r)["model_stats"][0]
    return s["inference_count"], s["execution_count"]


def process_cpu_s(pid):
    """User + system CPU seconds the process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(args, address, model, body, ihcl, pid):
    argv = [args.load_client, "--url", address,
            "--path", "/v2/models/%s/infer" % model,
            "--body-file", body, "--ihcl", str(ihcl),
            "--concurrency", str(args.concurrency),
            "--threads", str(args.client_threads),
            "--duration", str(args.duration), "--warmup", str(args.warmup),
            "--json"]
    before = model_counts(address, model)
    cpu_before = process_cpu_s(pid)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu = process_cpu_s(pid) - cpu_before
    if p.returncode not in (0, 1) or not p.stdout.strip():
        raise RuntimeError("load_client failed (%d): %s" % (p.returncode, p.stderr.strip()))
    r = json.loads(p.stdout)
    after = model_counts(address, model)
    r["inferences"] = after[0] - before[0]
    r["executions"] = after[1] - before[1]
    # Server CPU per inference (warm-up included on both sides of the
    # division): steadier than infer/s on a machine shared with other work.
    r["cpu_us_per_infer"] = cpu * 1e6 / max(1, r["inferences"])
    if args.verbose:
        print("  %-18s %9.1f infer/s  p50 %7.2f ms  p99 %7.2f ms  batch %.2f  "
              "CPU %.1f us/infer  errors %d"
              % (model, r["requests_per_s"], r["latency_ms"]["p50"],
                 r["latency_ms"]["p99"], r["inferences"] / max(1, r["executions"]),
                 r["cpu_us_per_infer"], r["errors"]), file=sys.stderr, flush=True)
    return r


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if v else float("nan")


def table(rows, env):
    out = ["| model | infer/s without | infer/s with | throughput ratio | "
           "p99 ms without | p99 ms with | p99 ratio (with ÷ without) | avg batch with | "
           "server CPU µs/infer without / with | CPU ratio (without ÷ with) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, plain, batched, avg_batch, cpu_plain, cpu_batched in rows:
        rp, rb = plain["requests_per_s"], batched["requests_per_s"]
        lp, lb = plain["latency_ms"]["p99"], batched["latency_ms"]["p99"]
        out.append("| %s | %.0f | %.0f | **%.2fx** | %.2f | %.2f | %.2f | %.1f | "
                   "%.1f / %.1f | %.2fx |" % (
                       label, rp, rb, rb / rp if rp else float("nan"), lp, lb,
                       lb / lp if lp else float("nan"), avg_batch, cpu_plain,
                       cpu_batched, cpu_plain / cpu_batched if cpu_batched
                       else float("nan")))
    out.append("")
    out.append(env)
    return out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--osprey", help="server binary (default BUILD/osprey)")
    p.add_argument("--load-client", help="default BUILD/tests/bench/load_client")
    p.add_argument("--models", default="digits,dense1k",
                   help="comma-separated subset of digits,dense1k")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--client-threads", type=int, default=1)
    p.add_argument("--duration", type=float, default=4.0, help="measured s per run")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3, help="alternating runs per side")
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--delay-us", type=int, default=0,
                   help="max_queue_delay_microseconds of the batched copies")
    p.add_argument("--instances", type=int, default=1,
                   help="CPU instances of every copy")
    p.add_argument("--http-threads", type=int, default=8)
    p.add_argument("--osprey-arg", action="append", default=[])
    p.add_argument("--json-out", help="write the raw runs here")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.osprey = args.osprey or os.path.join(args.build_dir, "osprey")
    args.load_client = args.load_client or os.path.join(
        args.build_dir, "tests", "bench", "load_client")
    return args


def main():
    args = parse_args()
    for path in (args.osprey, args.load_client):
        if not os.access(path, os.X_OK):
            sys.exit("batching_bench: %s is missing; build first" % path)
    work = tempfile.mkdtemp(prefix="osprey-batching-bench-")
    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    status = 0
    server = None
    t_start = time.monotonic()
    try:
        cases = make_repo(repo, args)
        server = Server("osprey", [
            args.osprey, "--model-repository=" + repo, "--http-port=0",
            "--http-address=127.0.0.1", "--metrics-port=0", "--grpc-port=0",
            "--http-thread-count=%d" % args.http_threads] + args.osprey_arg, work)
        server.wait_started(120)
        wait_ready(server.address, ["/v2/health/ready"], 120)

        rows, raw = [], []
        for label, n_in, plain, batched in cases:
            body = os.path.join(work, "body_%d.bin" % n_in)
            ihcl = write_body(body, n_in, seed=n_in)
            runs = ([], [])
            for _ in range(args.repeat):
                for side, model in enumerate((plain, batched)):
                    r = run_load(args, server.address, model, body, ihcl,
                                 server.proc.pid)
                    runs[side].append(r)
                    if r["errors"] or r["requests"] == 0:
                        status = 1
                        print("ERROR in %s: %s" % (model, r.get("first_error")),
                              file=sys.stderr)
                    if not server.alive():
                        raise RuntimeError("osprey died:\n" + server.log_tail())
            inferences = sum(r["inferences"] for r in runs[1])
            executions = sum(r["executions"] for r in runs[1])
            rows.append((label, median_run(runs[0]), median_run(runs[1]),
                         inferences / max(1, executions),
                         median(r["cpu_us_per_infer"] for r in runs[0]),
                         median(r["cpu_us_per_infer"] for r in runs[1])))
            raw.append({"model": label, "plain": runs[0], "batched": runs[1]})

        env = ("%d CPUs; concurrency %d (binary FP32 [1,N] requests, keep-alive); "
               "median of %d alternating %s s runs per side after %s s warmup; "
               "max_batch_size %d, %d CPU instance(s) each; batched copies: "
               "dynamic_batching { max_queue_delay_microseconds: %d }"
               % (os.cpu_count(), args.concurrency, args.repeat, args.duration,
                  args.warmup, args.max_batch_size, args.instances, args.delay_us))
        print("\n".join(table(rows, env)))
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(raw, f, indent=1)
    except (RuntimeError, OSError) as e:
        print("batching_bench: %s" % e, file=sys.stderr)
        status = 1
    finally:
        if server is not None:
            code = server.stop()
            if code != 0:
                print("batching_bench: osprey exited with %s after SIGTERM\n%s"
                      % (code, server.log_tail()), file=sys.stderr)
                status = 1
    print("total %.0f s; work folder %s" % (time.monotonic() - t_start, work),
          file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
