#!/usr/bin/env python3
"""Osprey's python backend against Triton 2.51's (issue 21).

The same model.py (an add_sub in the shape of Triton's python-backend
example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32) and the
same config.pbtxt on both servers, both running their stubs in the same
Python (the scratch venv's, with nvidia-pytriton and numpy), alternating
rounds, load_client sending binary tensors over HTTP:

  small   FP32 [1,16] at concurrency 1 and 16    (goal Osprey >= 1.5x)
  big     FP32 [1,1M] (4 MiB each input) at concurrency 1   (goal >= 1.5x)
  BLS     a python model calling add_sub 4 times per request (BLS exec),
          [1,16] at concurrency 1 and 16             (goal >= 1.5x)
  hop     Osprey alone at concurrency 1: the python model against the
          built-in add_sub backend on the same tensors; the latency
          difference is what the stub hop adds (goal < 30 us)

For each: infer/s (median of --repeat runs), server CPU per request (the
server and its stub processes), p50 latency. Triton comes from
nvidia-pytriton in a scratch venv (peer_bench.ensure_venv; never a project
dependency), run with LD_LIBRARY_PATH at the wheel's nvidia_pytriton.libs.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import peer_bench  # noqa: E402
from start_rss import measure_start, tree_cpu_s  # noqa: E402

MODEL_PY = '''import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtype0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"])
        self.dtype1 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT1")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.dtype0))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.dtype1))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses
'''


BLS_MODEL_PY = '''import triton_python_backend_utils as pb_utils

CALLS = 4


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                      pb_utils.get_input_tensor_by_name(request, "INPUT1")]
            for _ in range(CALLS):
                response = pb_utils.InferenceRequest(
                    model_name="add_sub", inputs=inputs,
                    requested_output_names=["OUTPUT0", "OUTPUT1"]).exec()
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
            responses.append(pb_utils.InferenceResponse(response.output_tensors()))
        return responses
'''


def config(name, backend):
    io = 'data_type: TYPE_FP32 dims: [ -1 ]'
    return (f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 8\n'
            f'input [ {{ name: "INPUT0" {io} }}, {{ name: "INPUT1" {io} }} ]\n'
            f'output [ {{ name: "OUTPUT0" {io} }}, {{ name: "OUTPUT1" {io} }} ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n')


def write_repo(root, with_native):
    (root / "add_sub" / "1").mkdir(parents=True)
    (root / "add_sub" / "config.pbtxt").write_text(config("add_sub", "python"))
    (root / "add_sub" / "1" / "model.py").write_text(MODEL_PY)
    (root / "bls" / "1").mkdir(parents=True)
    (root / "bls" / "config.pbtxt").write_text(config("bls", "python"))
    (root / "bls" / "1" / "model.py").write_text(BLS_MODEL_PY)
    if with_native:
        (root / "native_add_sub" / "1").mkdir(parents=True)
        (root / "native_add_sub" / "config.pbtxt").write_text(
            config("native_add_sub", "add_sub"))


def body_file(work, elements):
    """A binary-tensor KServe body for [1, elements]; returns (path, ihcl)."""
    size = 4 * elements
    header = json.dumps({
        "inputs": [{"name": n, "datatype": "FP32", "shape": [1, elements],
                    "parameters": {"binary_data_size": size}}
                   for n in ("INPUT0", "INPUT1")],
        "outputs": [{"name": n, "parameters": {"binary_data": True}}
                    for n in ("OUTPUT0", "OUTPUT1")]}).encode()
    path = work / f"body-{elements}.bin"
    with open(path, "wb") as f:
        f.write(header)
        f.write(bytes(range(256)) * (size // 256) + bytes(size % 256))
        f.write(bytes(size))
    return path, len(header)


def run_load(args, proc, port, model, body, ihcl, concurrency):
    argv = ([] if args.client_cpu is None else ["taskset", "-c", str(args.client_cpu)]) + [
        args.load_client, "--url", f"127.0.0.1:{port}", "--concurrency", str(concurrency),
        "--duration", str(args.duration), "--warmup", str(args.warmup), "--json",
        "--body-file", str(body), "--ihcl", str(ihcl),
        "--path", f"/v2/models/{model}/infer", "--max-response", str(64 << 20)]
    cpu0 = tree_cpu_s(proc.pid)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu = tree_cpu_s(proc.pid) - cpu0
    if not p.stdout.strip():
        raise RuntimeError("load_client failed: " + p.stderr[-2000:])
    j = json.loads(p.stdout)
    if j["errors"] or not j["requests"]:
        raise RuntimeError(f"{model}: {j['errors']} errors, {j['requests']} requests")
    return {"rate": j["requests_per_s"], "p50_ms": j["latency_ms"]["p50"],
            "cpu_us": cpu * 1e6 / j["requests"]}


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--venvs", default=os.environ.get(
        "OSPREY_PEER_VENVS", os.path.expanduser("~/.cache/osprey-peer-bench")))
    ap.add_argument("--venv-name", default="triton-onnx",
                    help="scratch venv with nvidia-pytriton and numpy (shared with onnx_bench)")
    ap.add_argument("--server-cpu", type=int, default=None)
    ap.add_argument("--client-cpu", type=int, default=None)
    ap.add_argument("--hop-only", action="store_true",
                    help="only the stub hop: Osprey alone, its stubs in this Python "
                         "(no Triton, no scratch venv)")
    args = ap.parse_args()
    build = pathlib.Path(args.build_dir)
    args.load_client = str(build / "tests" / "bench" / "load_client")
    osprey = str(build / "osprey")

    work = pathlib.Path(tempfile.mkdtemp(prefix="python-bench-"))
    write_repo(work / "osprey-repo", True)
    pin = [] if args.server_cpu is None else ["taskset", "-c", str(args.server_cpu)]
    servers = {}
    if args.hop_only:
        python = sys.executable
    else:
        python = peer_bench.ensure_venv(os.path.join(args.venvs, args.venv_name),
                                        ["nvidia-pytriton", "numpy"], str(work / "pip.log"))
        tritonserver, backends, env = peer_bench.triton_backends(str(work), python, None)
        write_repo(work / "triton-repo", False)
        port = peer_bench.free_port()
        servers["triton"] = (measure_start(
            pin + [tritonserver, f"--model-repository={work / 'triton-repo'}",
                   f"--backend-directory={backends}", "--http-address=127.0.0.1",
                   f"--http-port={port}", f"--grpc-port={peer_bench.free_port()}",
                   f"--metrics-port={peer_bench.free_port()}"],
            port, env=env, stdout=open(work / "triton.log", "wb"),
            stderr=subprocess.STDOUT, cwd=work)[0], port)
    port = peer_bench.free_port()
    servers["osprey"] = (measure_start(
        pin + [osprey, f"--model-repository={work / 'osprey-repo'}",
               f"--http-port={port}", f"--grpc-port={peer_bench.free_port()}",
               f"--metrics-port={peer_bench.free_port()}",
               f"--backend-config=python,python-executable={python}",
               "--backend-config=python,shm-default-byte-size=16777216"],
        port, stdout=open(work / "osprey.log", "wb"), stderr=subprocess.STDOUT,
        cwd=work)[0], port)
    cases = [("small c=1", "add_sub", 16, 1), ("small c=16", "add_sub", 16, 16),
             ("4 MiB c=1", "add_sub", 1 << 20, 1), ("BLS x4 c=1", "bls", 16, 1),
             ("BLS x4 c=16", "bls", 16, 16)]
    if args.hop_only:
        cases = []
    try:
        if cases:
            print("| case | Osprey infer/s | Triton infer/s | ratio | Osprey CPU us/req "
                  "| Triton CPU us/req | Osprey p50 ms | Triton p50 ms |")
            print("|---|---|---|---|---|---|---|---|")
        for label, model, elements, concurrency in cases:
            body, ihcl = body_file(work, elements)
            runs = {"osprey": [], "triton": []}
            for _ in range(args.repeat):
                for name in ("osprey", "triton"):
                    proc, port = servers[name]
                    runs[name].append(run_load(args, proc, port, model, body, ihcl,
                                               concurrency))
            o, t = runs["osprey"], runs["triton"]
            print(f"| {label} | {median(o, 'rate'):.0f} | {median(t, 'rate'):.0f} "
                  f"| **{median(o, 'rate') / median(t, 'rate'):.2f}x** "
                  f"| {median(o, 'cpu_us'):.0f} | {median(t, 'cpu_us'):.0f} "
                  f"| {median(o, 'p50_ms'):.3f} | {median(t, 'p50_ms'):.3f} |", flush=True)
        print()
        proc, port = servers["osprey"]
        sizes = ((16, "[1,16]"),) if args.hop_only else ((16, "[1,16]"), (1 << 20, "[1,1M]"))
        for elements, label in sizes:
            body, ihcl = body_file(work, elements)
            py, native = [], []
            for _ in range(args.repeat):
                py.append(run_load(args, proc, port, "add_sub", body, ihcl, 1))
                native.append(run_load(args, proc, port, "native_add_sub", body, ihcl, 1))
            hop_us = (median(py, "p50_ms") - median(native, "p50_ms")) * 1000
            print(f"Stub hop at c=1, {label}: python model p50 {median(py, 'p50_ms'):.3f} ms, "
                  f"built-in add_sub p50 {median(native, 'p50_ms'):.3f} ms: "
                  f"**{hop_us:.0f} us added** (per round: "
                  + ", ".join(f"{(p['p50_ms'] - n['p50_ms']) * 1000:.0f}"
                              for p, n in zip(py, native)) + ")")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
