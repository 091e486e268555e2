#!/usr/bin/env python3
"""End-to-end HTTP benchmark of a large dense model on the GPU vs the CPU.

Part of tests/gpu/check.sh (issue 4). Generates a 4096->4096->4096->1000 MLP
with random FP32 weights (fixed seed) into a temporary model repository, as
two models that differ only in placement (dense_gpu: KIND_GPU, dense_cpu:
KIND_CPU), starts the real server with --strict-gpu (so dense_gpu cannot
silently land on the CPU), and for batch 1 and 64 drives each model with
binary-tensor requests from tests/bench's load_client at concurrency 1.

Prints one line per case:
  RESULT e2e model=dense_gpu batch=64 p50_ms=.. infer_per_s=.. h2d_pct=.. compute_pct=.. d2h_pct=..
where the time shares come from the statistics extension's compute_input
(inputs to the device), compute_infer (kernels) and compute_output (outputs
back to pinned host memory) over the measured interval.
Standard library + numpy only.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from safetensors_file import write_safetensors  # noqa: E402

LAYERS = [4096, 4096, 4096, 1000]


def make_repository(root, gpu_kind):
    rng = np.random.default_rng(1234)
    tensors = []
    for i, (n_in, n_out) in enumerate(zip(LAYERS, LAYERS[1:])):
        scale = 1.0 / np.sqrt(n_in)
        w = rng.uniform(-scale, scale, (n_out, n_in)).astype("<f4")
        b = rng.uniform(-scale, scale, (n_out,)).astype("<f4")
        tensors += [(f"layers.{i}.weight", w.shape, w), (f"layers.{i}.bias", b.shape, b)]
    for name, kind in (("dense_gpu", gpu_kind), ("dense_cpu", "KIND_CPU")):
        os.makedirs(os.path.join(root, name, "1"))
        write_safetensors(os.path.join(root, name, "1", "model.safetensors"), tensors)
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(f"""name: "{name}"
backend: "dense"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {LAYERS[0]} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {LAYERS[-1]} ] }} ]
instance_group [ {{ kind: {kind} count: 1 }} ]
parameters [ {{ key: "activation" value: {{ string_value: "relu" }} }} ]
""")


def write_body(path, batch):
    data = np.random.default_rng(batch).standard_normal((batch, LAYERS[0])).astype("<f4").tobytes()
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [batch, LAYERS[0]], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(header + data)
    return len(header)


def infer_output(url, model, body_path, ihcl):
    """OUTPUT0 of one binary-tensor request, as a float32 array."""
    with open(body_path, "rb") as f:
        body = f.read()
    req = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=body, method="POST",
        headers={"Inference-Header-Content-Length": str(ihcl),
                 "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req) as r:
        header_len = int(r.headers["Inference-Header-Content-Length"])
        data = r.read()
    return np.frombuffer(data[header_len:], dtype="<f4")


def stats(url, model):
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats") as r:
        s = json.load(r)["model_stats"][0]
    inf = s["inference_stats"]
    return {k: inf[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprey", required=True)
    ap.add_argument("--load-client", required=True)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--dry-run-on-cpu", action="store_true",
                    help="place dense_gpu on the CPU too (to try the script on a host without a GPU)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="osprey-e2e-") as work:
        repo = os.path.join(work, "models")
        make_repository(repo, "KIND_CPU" if args.dry_run_on_cpu else "KIND_GPU")
        log = open(os.path.join(work, "server.log"), "w+")
        server = subprocess.Popen([args.osprey, f"--model-repository={repo}", "--http-port=0",
                                   "--strict-gpu", "--metrics-port=0"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(600):
                log.seek(0)
                m = re.search(r"Started HTTPService at [^:]+:(\d+)", log.read())
                if m:
                    port = int(m.group(1))
                    break
                if server.poll() is not None:
                    break
                time.sleep(0.1)
            if port is None:
                log.seek(0)
                sys.exit("server did not start:\n" + log.read())
            url = f"http://127.0.0.1:{port}"
            for model in ("dense_gpu", "dense_cpu"):
                with urllib.request.urlopen(f"{url}/v2/models/{model}/ready") as r:
                    assert r.status == 200, f"{model} not ready"
            for batch in (1, 64):
                body = os.path.join(work, f"body{batch}.bin")
                ihcl = write_body(body, batch)
                # The GPU must answer what the CPU answers before its speed
                # means anything (FP32 on both; the sums differ in order).
                gpu_out = infer_output(url, "dense_gpu", body, ihcl)
                cpu_out = infer_output(url, "dense_cpu", body, ihcl)
                if gpu_out.shape != (batch * LAYERS[-1],) or not np.allclose(
                        gpu_out, cpu_out, rtol=1e-4, atol=1e-5):
                    sys.exit(f"dense_gpu differs from dense_cpu at batch {batch}: "
                             f"max |diff| {np.abs(gpu_out - cpu_out).max()}")
                print(f"CHECK e2e batch={batch} gpu_vs_cpu_max_abs_diff="
                      f"{np.abs(gpu_out - cpu_out).max():.3g}", flush=True)
                for model in ("dense_gpu", "dense_cpu"):
                    before = stats(url, model)
                    out = subprocess.run(
                        [args.load_client, "--url", f"127.0.0.1:{port}",
                         "--path", f"/v2/models/{model}/infer", "--body-file", body,
                         "--ihcl", str(ihcl), "--concurrency", "1", "--warmup", "1",
                         "--duration", str(args.duration), "--json"],
                        capture_output=True, text=True, check=True)
                    result = json.loads(out.stdout)
                    after = stats(url, model)
                    spent = {k: after[k] - before[k] for k in after}
                    total = sum(spent.values()) or 1
                    print(f"RESULT e2e model={model} batch={batch} "
                          f"p50_ms={result['latency_ms']['p50']:.3f} "
                          f"infer_per_s={result['requests_per_s'] * batch:.1f} "
                          f"h2d_pct={100 * spent['compute_input'] / total:.1f} "
                          f"compute_pct={100 * spent['compute_infer'] / total:.1f} "
                          f"d2h_pct={100 * spent['compute_output'] / total:.1f}",
                          flush=True)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
