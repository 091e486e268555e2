#!/usr/bin/env python3
"""GPU tensors of python models through DLPack, on a real GPU.

Part of tests/gpu/check.sh. Serves tests/integration/python_models/py_dlpack
(whose model.py cudaMallocs device memory through the CUDA runtime with
ctypes and returns it with pb_utils.Tensor.from_dlpack) on GPU 0, plain
and with FORCE_CPU_ONLY_INPUT_TENSORS "no", with the stubs loading the
CUDA runtime the server uses. Checks over HTTP (binary tensors) what
tests/integration/test_python_dlpack.py checks on the fake GPUs: a GPU
output arrives byte for byte (1000 floats and 4 MiB), the to_dlpack round
trip, the non-contiguous error, GPU tensors as BLS inputs, GPU inputs,
a GPU input handed straight back, and that the stub frees what it lent.
Then times 4 MiB outputs: p50 of a GPU tensor (one CUDA IPC open, a
device-to-host copy, a close) against a numpy one (through the region).

Prints CHECK python_dlpack name=... ok=0|1 per check and
  RESULT python_dlpack mib=4 gpu_p50_ms=.. numpy_p50_ms=..
Exit status 0 when every check passed. Standard library + numpy only.
Without a GPU it runs over the fake GPUs:
  --osprey build/osprey_fakegpu --cuda-runtime build/libosprey_fake_cudart.so
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "integration" / "python_models"
GPU_OUT, ROUND_TRIP, NON_CONTIGUOUS, NUMPY, DOUBLE, BLS, PASS_BACK = range(7)


def cuda_runtime_of(osprey):
    """The libcudart the server loads (its CUDA module's), or None."""
    for program in (pathlib.Path(osprey).parent / "libosprey_cuda.so", pathlib.Path(osprey)):
        if not program.exists():
            continue
        out = subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout
        m = re.search(r"libcudart\.so\S*\s+=>\s+(\S+)", out)
        if m and m.group(1) != "not":
            return m.group(1)
    return None


def make_repository(root):
    for name, extra in (("py_dlpack", ""),
                        ("py_dlpack_gpu_inputs",
                         'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" '
                         'value: { string_value: "no" } }\n')):
        shutil.copytree(MODELS / "py_dlpack", root / name)
        config = root / name / "config.pbtxt"
        text = config.read_text().replace('name: "py_dlpack"', f'name: "{name}"')
        config.write_text(text.replace("gpus: [ 1 ]", "gpus: [ 0 ]") + extra)
    shutil.copytree(MODELS / "py_add_sub", root / "py_add_sub")


def start(osprey, repo, workdir, env):
    log = open(workdir / "server.log", "wb")
    proc = subprocess.Popen(
        [osprey, f"--model-repository={repo}", "--http-port=0", "--grpc-port=0",
         "--metrics-port=0", "--strict-gpu",
         f"--backend-config=python,python-executable={sys.executable}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = (workdir / "server.log").read_text(errors="replace")
        m = re.search(r"Started HTTPService at (\S+):(\d+)", text)
        if m:
            url = f"http://127.0.0.1:{m.group(2)}"
            try:
                urllib.request.urlopen(url + "/v2/health/ready", timeout=5)
                return proc, url
            except (urllib.error.URLError, ConnectionError):
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not get ready:\n" + text[-3000:])


def infer(url, model, mode, values):
    """(outputs by name as numpy arrays, None) or (None, error text)."""
    values = np.ascontiguousarray(values, np.float32)
    mode_bytes = np.array([mode], np.int32).tobytes()
    header = json.dumps({
        "inputs": [
            {"name": "MODE", "shape": [1], "datatype": "INT32",
             "parameters": {"binary_data_size": len(mode_bytes)}},
            {"name": "IN", "shape": [len(values)], "datatype": "FP32",
             "parameters": {"binary_data_size": values.nbytes}}],
        "outputs": [{"name": n, "parameters": {"binary_data": True}}
                    for n in ("OUT", "LIVE", "IN_ON_GPU")]}).encode()
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=header + mode_bytes + values.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(header)),
                 "Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            body = r.read()
            length = int(r.headers["Inference-Header-Content-Length"])
    except urllib.error.HTTPError as e:
        return None, json.loads(e.read()).get("error", "")
    meta, pos, outputs = json.loads(body[:length]), length, {}
    types = {"FP32": np.float32, "INT64": np.int64, "BOOL": np.bool_}
    for out in meta["outputs"]:
        size = out["parameters"]["binary_data_size"]
        outputs[out["name"]] = np.frombuffer(body[pos:pos + size], types[out["datatype"]])
        pos += size
    return outputs, None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--osprey", required=True)
    parser.add_argument("--cuda-runtime", help="libcudart the stubs load "
                        "(default: the one the server's CUDA module links)")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    args.osprey = os.path.abspath(args.osprey)  # the server runs in its own folder
    env = dict(os.environ, OSPREY_PYTHON_STUB_DIR=str(ROOT / "backends" / "python" / "stub"))
    runtime = args.cuda_runtime or cuda_runtime_of(args.osprey)
    if runtime:
        env["OSPREY_PYTHON_CUDA_RUNTIME"] = os.path.abspath(runtime)
    work = pathlib.Path(tempfile.mkdtemp(prefix="osprey-dlpack-"))
    failed = 0

    def check(name, ok, detail=""):
        nonlocal failed
        failed += not ok
        print(f"CHECK python_dlpack name={name} ok={int(bool(ok))}"
              + (f" ({detail})" if detail and not ok else ""), flush=True)

    try:
        repo = work / "repo"
        repo.mkdir()
        make_repository(repo)
        proc, url = start(args.osprey, repo, work, env)
        rng = np.random.default_rng(11)
        small = rng.standard_normal(1000).astype(np.float32)
        large = rng.standard_normal(1 << 20).astype(np.float32)  # 4 MiB
        for name, values in (("gpu_output_1000", small), ("gpu_output_4mib", large)):
            out, err = infer(url, "py_dlpack", GPU_OUT, values)
            check(name, out is not None and out["OUT"].tobytes() == values.tobytes(), err)
        out, err = infer(url, "py_dlpack", ROUND_TRIP, small)
        check("to_dlpack_round_trip", out is not None and np.array_equal(out["OUT"], small), err)
        out, err = infer(url, "py_dlpack", NON_CONTIGUOUS, small)
        check("non_contiguous_refused", err is not None and "not contiguous" in err, err)
        four = small[:4]
        out, err = infer(url, "py_dlpack", BLS, four)
        check("bls_gpu_inputs", out is not None and np.array_equal(out["OUT"], four * 2), err)
        out, err = infer(url, "py_dlpack_gpu_inputs", DOUBLE, small)
        check("gpu_inputs", out is not None and bool(out["IN_ON_GPU"][0])
              and np.array_equal(out["OUT"], small * 2), err)
        out, err = infer(url, "py_dlpack_gpu_inputs", PASS_BACK, large)
        check("gpu_input_handed_back", out is not None and
              out["OUT"].tobytes() == large.tobytes(), err)
        deadline, live = time.monotonic() + 10, None
        while time.monotonic() < deadline and live != 0:
            out, err = infer(url, "py_dlpack", NUMPY, small[:1])
            live = int(out["LIVE"][0]) if out is not None else None
        check("lent_tensors_freed", live == 0, f"LIVE {live}")

        times = {}
        for label, mode in (("gpu", GPU_OUT), ("numpy", NUMPY)):
            spent = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                infer(url, "py_dlpack", mode, large)
                spent.append(time.perf_counter() - t0)
            times[label] = 1000 * float(np.median(spent))
        print("RESULT python_dlpack mib=4 gpu_p50_ms=%.2f numpy_p50_ms=%.2f"
              % (times["gpu"], times["numpy"]), flush=True)

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log = (work / "server.log").read_text(errors="replace")
        check("server_exit_clean", rc == 0, f"exit {rc}")
        check("no_ipc_handle_left_open", "still open" not in log)
        if failed:
            print(log[-4000:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
