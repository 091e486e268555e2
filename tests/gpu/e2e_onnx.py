#!/usr/bin/env python3
"""The ONNX runtime on a GPU, end to end (part of tests/gpu/check.sh, issue 23).

Generates the real architectures of tests/onnx/architectures.py (ResNet-18,
a 2-layer BERT encoder; random weights, fixed seeds) into a temporary model
repository, each as several models that differ only in placement and
options:

  <arch>_gpu         KIND_GPU, FP32
  <arch>_gpu_graphs  KIND_GPU, FP32, parameter cuda_graphs=true
  <arch>_gpu_tf32    KIND_GPU, parameter allow_tf32=true
  <arch>_gpu_fp16    KIND_GPU, parameter precision=fp16
  <arch>_cpu         KIND_CPU (the reference when onnxruntime is missing)

starts the real server with --strict-gpu, checks each GPU model's outputs
against onnxruntime's CPU execution provider (else against <arch>_cpu) with
the tolerance of its precision (TOLERANCES), then measures throughput over
HTTP binary with tests/bench's load_client at concurrency 1 for each batch
size, with and without CUDA graphs, and (batches after the first) with
TF32 and with FP16. Prints

  CHECK onnx model=resnet18_gpu_graphs batch=8 max_abs_diff=.. tol=.. ok=1
  RESULT onnx arch=resnet18 graphs=on batch=8 p50_ms=.. infer_per_s=..
  RESULT onnx_prec arch=resnet18 prec=fp16 batch=8 p50_ms=.. infer_per_s=..

and exits 1 when a check fails, 3 when the onnx package is missing. --dry-run places every model on the CPU
and uses small batches and a short duration, to try the script on a host
without a GPU (tests/integration/test_gpu_scripts.py runs it so).
"""

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "onnx"))
try:
    import architectures  # noqa: E402 (needs the onnx package)
except ImportError as e:  # a bare GPU host: check.sh reports NOT RUN
    architectures = None
    MISSING = f"cannot build the models: {e} (pip install onnx onnxruntime)"

# Largest |got - want| allowed, relative to the output's largest magnitude
# (at least 1), against onnxruntime's FP32 CPU results, per precision.
# FP32: sums in another order (cuBLAS, the kernels). TF32 and FP16 keep 11
# significant bits of every product's operands (every MatMul, Gemm, Einsum
# and Conv but depthwise ones) and sum in FP32: on the fake GPU (tests/
# fake_cuda, whose cuBLAS rounds as tensor cores do) ResNet-18 comes out
# within 4.0e-4 (TF32) and 3.7e-4 (FP16) at batch 8 (the largest output
# 178, the worst error 0.071), BERT within 4.5e-4, the MLP within 5.1e-4;
# FP32 within 5e-7.
TOLERANCES = {"fp32": 1e-4, "tf32": 2e-3, "fp16": 2e-3}

# variant suffix -> (precision, instance kind on a GPU host, parameters)
VARIANTS = {
    "gpu": ("fp32", "KIND_GPU", {}),
    "gpu_graphs": ("fp32", "KIND_GPU", {"cuda_graphs": "true"}),
    "gpu_tf32": ("tf32", "KIND_GPU", {"allow_tf32": "true"}),
    "gpu_fp16": ("fp16", "KIND_GPU", {"precision": "fp16"}),
    "cpu": ("fp32", "KIND_CPU", {}),
}
SEQ = 128
DTYPES = {np.dtype(np.float32): ("FP32", "TYPE_FP32"),
          np.dtype(np.int64): ("INT64", "TYPE_INT64")}


def model_config(name, kind, params, max_batch):
    """config.pbtxt text: the inputs and outputs come from auto-complete."""
    text = (f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch}\n'
            f"instance_group [ {{ kind: {kind} count: 1 }} ]\n")
    for key, value in params.items():
        text += f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    return text


def make_repository(root, archs, dry_run, max_batch):
    """Writes every (arch, variant) model under root; returns the model
    names by arch."""
    names = {}
    for arch in archs:
        path = architectures.write(arch, root)
        names[arch] = []
        for suffix, (_, kind, params) in VARIANTS.items():
            name = f"{arch}_{suffix}"
            (root / name / "1").mkdir(parents=True)
            os.link(path, root / name / "1" / "model.onnx")
            (root / name / "config.pbtxt").write_text(
                model_config(name, "KIND_CPU" if dry_run else kind, params, max_batch))
            names[arch].append(name)
        path.unlink()
    return names


def request_body(feeds, outputs):
    """(body bytes, Inference-Header-Content-Length) of a binary request."""
    inputs, blobs = [], []
    for name, array in feeds.items():
        data = np.ascontiguousarray(array).tobytes()
        inputs.append({"name": name, "shape": list(array.shape),
                       "datatype": DTYPES[array.dtype][0],
                       "parameters": {"binary_data_size": len(data)}})
        blobs.append(data)
    header = json.dumps({"inputs": inputs,
                         "outputs": [{"name": o, "parameters": {"binary_data": True}}
                                     for o in outputs]},
                        separators=(",", ":")).encode()
    return header + b"".join(blobs), len(header)


def parse_response(data, header_len):
    """{output name: array} of a binary response."""
    header = json.loads(data[:header_len])
    out, offset = {}, header_len
    for o in header["outputs"]:
        size = o["parameters"]["binary_data_size"]
        dtype = {"FP32": np.float32, "INT64": np.int64}[o["datatype"]]
        out[o["name"]] = np.frombuffer(data[offset:offset + size], dtype).reshape(o["shape"])
        offset += size
    return out


def within(got, want, precision):
    """(max |diff|, ok) of got against want at precision's tolerance:
    max |diff| <= tol * max(1, max |want|)."""
    if got.shape != want.shape:
        return float("inf"), False
    want64 = want.astype(np.float64)
    diff = float(np.abs(got.astype(np.float64) - want64).max(initial=0.0))
    scale = max(1.0, float(np.abs(want64).max(initial=0.0)))
    return diff, bool(diff <= TOLERANCES[precision] * scale)


def reference(model_path, feeds):
    """onnxruntime's CPU outputs, or None without onnxruntime."""
    try:
        import onnxruntime
    except ImportError:
        return None
    sess = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


class Server:
    def __init__(self, osprey, repo, work):
        self.log = open(os.path.join(work, "server.log"), "w+")
        self.proc = subprocess.Popen(
            [osprey, f"--model-repository={repo}", "--http-port=0", "--grpc-port=0",
             "--metrics-port=0", "--strict-gpu"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=work)
        self.port = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.log.seek(0)
            m = re.search(r"Started HTTPService at [^:]+:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if self.port is None:
            self.log.seek(0)
            self.stop()
            sys.exit("server did not start:\n" + self.log.read()[-4000:])

    def infer(self, model, body, ihcl):
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v2/models/{model}/infer", data=body,
            method="POST", headers={"Inference-Header-Content-Length": str(ihcl),
                                    "Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req, timeout=300) as r:
            header_len = int(r.headers["Inference-Header-Content-Length"])
            return parse_response(r.read(), header_len)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprey", required=True)
    ap.add_argument("--load-client", required=True)
    ap.add_argument("--archs", default="resnet18,bert")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--dry-run", action="store_true",
                    help="every model on the CPU, batches 1,2, 0.3 s each")
    args = ap.parse_args(argv)
    if architectures is None:
        print(MISSING, flush=True)
        return 3
    archs = args.archs.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    if args.dry_run:
        batches, args.duration = [1, 2], 0.3
    failed = False
    with tempfile.TemporaryDirectory(prefix="osprey-e2e-onnx-") as work:
        repo = pathlib.Path(work) / "models"
        repo.mkdir()
        names = make_repository(repo, archs, args.dry_run, max(batches))
        server = Server(args.osprey, repo, work)
        try:
            for arch in archs:
                model_file = repo / f"{arch}_cpu" / "1" / "model.onnx"
                for batch in batches:
                    feeds = architectures.feeds(arch, batch, seq=SEQ, seed=batch)
                    outputs = ["last_hidden_state"] if arch == "bert" else ["output"]
                    want = reference(model_file, feeds)
                    body, ihcl = request_body(feeds, outputs)
                    if want is None:
                        want = server.infer(f"{arch}_cpu", body, ihcl)
                    for name in names[arch]:
                        precision = VARIANTS[name[len(arch) + 1:]][0]
                        got = server.infer(name, body, ihcl)
                        for o in outputs:
                            diff, ok = within(got[o], want[o], precision)
                            failed |= not ok
                            print(f"CHECK onnx model={name} batch={batch} output={o} "
                                  f"max_abs_diff={diff:.3g} tol={TOLERANCES[precision]} "
                                  f"ok={int(ok)}", flush=True)
                    body_path = os.path.join(work, f"{arch}_{batch}.bin")
                    with open(body_path, "wb") as f:
                        f.write(body)
                    def throughput(model):
                        out = subprocess.run(
                            [args.load_client, "--url", f"127.0.0.1:{server.port}",
                             "--path", f"/v2/models/{model}/infer", "--body-file", body_path,
                             "--ihcl", str(ihcl), "--concurrency", "1", "--warmup", "2",
                             "--duration", str(args.duration), "--json"],
                            capture_output=True, text=True, check=True)
                        r = json.loads(out.stdout)
                        return (f"p50_ms={r['latency_ms']['p50']:.3f} "
                                f"infer_per_s={r['requests_per_s'] * batch:.1f}")

                    for graphs, model in (("off", f"{arch}_gpu"), ("on", f"{arch}_gpu_graphs")):
                        print(f"RESULT onnx arch={arch} graphs={graphs} batch={batch} "
                              f"{throughput(model)}", flush=True)
                    # the reduced precisions where tensor cores have work:
                    # every batch but the smallest
                    if batch != batches[0]:
                        for prec in ("tf32", "fp16"):
                            print(f"RESULT onnx_prec arch={arch} prec={prec} batch={batch} "
                                  f"{throughput(f'{arch}_gpu_{prec}')}", flush=True)
        finally:
            server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
