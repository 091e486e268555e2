#!/usr/bin/env python3
"""Osprey's ONNX runtime against onnxruntime (issue 20), side by side.

(a) In-process: the same models (tests/onnx/architectures.py: ResNet-18,
    MobileNetV2, a 2-layer BERT encoder at sequence 128, an MLP; random
    weights) at batch 1 and 8 with 1 and 2 threads. Osprey's side is
    build/tests/onnx/onnx_time (the runtime on the CPU device, threads from
    OSPREY_CPU_THREADS and OPENBLAS_NUM_THREADS); onnxruntime's is an
    InferenceSession with intra_op_num_threads, run from this script. The
    two sides alternate, --repeat runs of --seconds each, and the medians of
    the per-run median latencies are compared: ratio = onnxruntime latency /
    Osprey latency (throughput ratio; > 1 means Osprey is faster).
(b) Served: ResNet-18 over HTTP binary (tritonclient) at concurrency 1,
    end-to-end latency against the runtime's own (onnx_time) latency.
(c) Memory: ResNet-18 with 4 CPU instances, RSS after one request per
    instance against weights + 4 arenas + 30 MiB.
(d) The per-op time breakdown of the slowest model (OSPREY_ONNX_PROFILE).
(e) Against Triton 2.51 (nvidia-pytriton's tritonserver, set up in a scratch
    venv as peer_bench.py does) serving the same model through its python
    backend with onnxruntime inside, what a PyTriton user runs: infer/s at
    concurrency 4 over HTTP binary, two instances of one thread on each
    side, both servers up on this machine, rounds alternating between
    them, median of --repeat rounds (goal: Osprey >= 2x). ResNet-18 (compute-bound: the ratio is about the runtimes'
    speed ratio) and the MLP (serving-bound: the ratio is mostly the cost
    of a request outside the model), as --models picks them.

    .venv/bin/python tests/bench/onnx_bench.py [--repeat 3] [--seconds 2]
        [--models resnet18,mobilenet_v2,bert,mlp] [--batches 1,8]
        [--threads 1,2] [--cases abcd] (e: --cases abcde, --venvs DIR)
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
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "onnx"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import architectures  # noqa: E402

SEQ = 128


def specs(name, batch):
    """onnx_time's input specs for a model."""
    if name in ("resnet18", "mobilenet_v2"):
        return [f"input:FP32:{batch}x3x224x224"]
    if name == "mlp":
        return [f"input:FP32:{batch}x784"]
    return [f"input_ids:INT64:{batch}x{SEQ}:1000", f"attention_mask:INT64:{batch}x{SEQ}:2",
            f"token_type_ids:INT64:{batch}x{SEQ}:2"]


def thread_env(threads, profile=False):
    env = dict(os.environ)
    env["OSPREY_CPU_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    if profile:
        env["OSPREY_ONNX_PROFILE"] = "1"
    return env


def osprey_run(tool, model, name, batch, threads, seconds, profile=False):
    out = subprocess.run([str(tool), str(model), str(seconds)] + specs(name, batch),
                         capture_output=True, text=True, env=thread_env(threads, profile),
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def ort_session(model, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def ort_run(sess, feeds, seconds):
    """Median latency and median process CPU time per run, in ms."""
    sess.run(None, feeds)
    times, cpu = [], []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t, c = time.perf_counter(), time.process_time()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(times) * 1e3, statistics.median(cpu) * 1e3


def case_a(args, tool, models):
    print("### (a) in-process: onnxruntime latency / Osprey latency\n")
    print("(CPU ratio: the same of the process CPU time per run, shown at one "
          "thread, where it is the work's own time and a shared machine moves it "
          "least; at two threads onnxruntime's spinning workers count too)\n")
    print("| model | batch | threads | Osprey ms | onnxruntime ms | ratio | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    slowest = None
    for name in args.models:
        for batch in args.batches:
            feeds = architectures.feeds(name, batch, seq=SEQ)
            for threads in args.threads:
                sess = ort_session(models[name], threads)
                ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
                for _ in range(args.repeat):
                    r, _ = osprey_run(tool, models[name], name, batch, threads, args.seconds)
                    ours.append(r["median_ms"])
                    ours_cpu.append(r["median_cpu_ms"])
                    wall, cpu = ort_run(sess, feeds, args.seconds)
                    theirs.append(wall)
                    theirs_cpu.append(cpu)
                o, t = statistics.median(ours), statistics.median(theirs)
                ratio = t / o
                cpu_ratio = (f"{statistics.median(theirs_cpu) / statistics.median(ours_cpu):.2f}"
                             if threads == 1 else "–")
                print(f"| {name} | {batch} | {threads} | {o:.3f} | {t:.3f} | **{ratio:.2f}** "
                      f"| {cpu_ratio} |", flush=True)
                if slowest is None or ratio < slowest[0]:
                    slowest = (ratio, name, batch, threads)
    return slowest


def case_b(args, tool, models, osprey):
    import tritonclient.http as httpclient
    import harness
    print("\n### (b) ResNet-18 served over HTTP binary, concurrency 1\n")
    repo = pathlib.Path(tempfile.mkdtemp(prefix="onnx-bench-"))
    (repo / "resnet18" / "1").mkdir(parents=True)
    shutil.copy(models["resnet18"], repo / "resnet18" / "1" / "model.onnx")
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                  workdir=pathlib.Path(tempfile.mkdtemp()), binary=osprey).start()
    try:
        client = httpclient.InferenceServerClient(server.hostport)
        x = architectures.feeds("resnet18", 1)["input"]
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        out = [httpclient.InferRequestedOutput("output", binary_data=True)]
        for _ in range(3):
            client.infer("resnet18", [inp], outputs=out)
        served, own = [], []
        for _ in range(args.repeat):
            times = []
            start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                t = time.perf_counter()
                client.infer("resnet18", [inp], outputs=out)
                times.append(time.perf_counter() - t)
            served.append(statistics.median(times) * 1e3)
            r, _ = osprey_run(tool, models["resnet18"], "resnet18", 1, 1, args.seconds)
            own.append(r["median_ms"])
        s, o = statistics.median(served), statistics.median(own)
        print(f"served {s:.2f} ms, runtime alone {o:.2f} ms: **{s / o:.3f}x** (goal <= 1.1)")
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)


def case_c(args, tool, models, osprey):
    import concurrent.futures
    import tritonclient.http as httpclient
    import harness
    print("\n### (c) ResNet-18, 4 CPU instances: RSS\n")
    repo = pathlib.Path(tempfile.mkdtemp(prefix="onnx-bench-"))
    (repo / "resnet18" / "1").mkdir(parents=True)
    shutil.copy(models["resnet18"], repo / "resnet18" / "1" / "model.onnx")
    (repo / "resnet18" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 1\n'
        'instance_group [ { kind: KIND_CPU count: 4 } ]\n')
    base = harness.OspreyServer(pathlib.Path(tempfile.mkdtemp()), [],
                                workdir=pathlib.Path(tempfile.mkdtemp()), binary=osprey).start()
    idle = rss_kib(base.pid) / 1024
    base.stop()
    server = harness.OspreyServer(repo, [], workdir=pathlib.Path(tempfile.mkdtemp()), binary=osprey).start()
    try:
        x = architectures.feeds("resnet18", 1)["input"]

        def one(_):
            c = httpclient.InferenceServerClient(server.hostport)
            i = httpclient.InferInput("input", list(x.shape), "FP32")
            i.set_data_from_numpy(x, binary_data=True)
            for _ in range(4):
                c.infer("resnet18", [i])

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(4)))
        rss = rss_kib(server.pid) / 1024
        weights = os.path.getsize(models["resnet18"]) / 2**20
        r, _ = osprey_run(tool, models["resnet18"], "resnet18", 1, 1, 0.2)
        arena = r["arena_bytes"] / 2**20
        budget = weights + 4 * arena + 30 + idle
        print(f"RSS {rss:.1f} MiB; weights {weights:.1f} MiB, arena {arena:.1f} MiB each, "
              f"idle server {idle:.1f} MiB: budget weights + 4 arenas + 30 MiB "
              f"(+ idle) = {budget:.1f} MiB -> {'met' if rss <= budget else 'NOT met'}")
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def case_d(tool, models, slowest):
    _, name, batch, threads = slowest
    print(f"\n### (d) time per op type: {name}, batch {batch}, {threads} thread(s)\n")
    _, profile = osprey_run(tool, models[name], name, batch, threads, 2, profile=True)
    print("```\n" + profile.strip() + "\n```")


TRITON_MODEL_PY = """
import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        path = args["model_repository"] + "/" + args["model_version"] + "/model.onnx"
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            (y,) = self.session.run(None, {"input": x})
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("output", y)]))
        return responses
"""


def infer_rate(url, name, seconds, load_client, work, concurrency=4):
    """infer/s of model `name` at batch 1 ("input" to "output") over HTTP
    binary at `concurrency`, sent by the C load client (a Python client
    would be the bottleneck on the small models)."""
    x = architectures.feeds(name, 1)["input"]
    header = json.dumps({
        "inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    body = work / f"body-{name}.bin"
    body.write_bytes(header + x.tobytes())
    p = subprocess.run(
        [str(load_client), "--url", url, "--concurrency", str(concurrency),
         "--duration", str(seconds), "--warmup", "0.5", "--json",
         "--body-file", str(body), "--ihcl", str(len(header)),
         "--path", f"/v2/models/{name}/infer"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not p.stdout.strip():
        raise RuntimeError("load_client failed: " + p.stderr[-2000:])
    j = json.loads(p.stdout)
    if j["errors"] or not j["requests"]:
        raise RuntimeError(f"{name}: {j['errors']} errors, {j['requests']} requests")
    return j["requests_per_s"]


TRITON_PEER_MODELS = ("resnet18", "mobilenet_v2", "mlp")  # one "input", one "output"


def case_e(args, models, osprey):
    import harness
    import peer_bench
    names = [n for n in args.models if n in TRITON_PEER_MODELS]
    load_client = pathlib.Path(args.build_dir) / "tests" / "bench" / "load_client"
    print("\n### (e) Concurrency 4: Osprey vs Triton's python backend running "
          "onnxruntime\n")
    work = pathlib.Path(tempfile.mkdtemp(prefix="onnx-triton-"))
    python = peer_bench.ensure_venv(os.path.join(args.venvs, "triton-onnx"),
                                    ["nvidia-pytriton", "onnxruntime", "numpy"],
                                    str(work / "pip.log"))
    tritonserver, backends, env = peer_bench.triton_backends(str(work), python, None)
    repo, ours_repo = work / "repo", work / "osprey-repo"
    for name in names:
        dims = list(architectures.feeds(name, 1)["input"].shape)
        for root in (repo, ours_repo):
            (root / name / "1").mkdir(parents=True)
            shutil.copy(models[name], root / name / "1" / "model.onnx")
        (repo / name / "1" / "model.py").write_text(TRITON_MODEL_PY)
        (repo / name / "config.pbtxt").write_text(
            'backend: "python"\nmax_batch_size: 0\n'
            f'input [ {{ name: "input" data_type: TYPE_FP32 dims: {dims} }} ]\n'
            'output [ { name: "output" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
            'instance_group [ { kind: KIND_CPU count: 2 } ]\n')
        (ours_repo / name / "config.pbtxt").write_text(
            'backend: "onnxruntime"\nmax_batch_size: 0\n'
            'instance_group [ { kind: KIND_CPU count: 2 } ]\n')
    port = peer_bench.free_port()
    triton = subprocess.Popen(
        [tritonserver, f"--model-repository={repo}", f"--backend-directory={backends}",
         "--http-address=127.0.0.1", f"--http-port={port}",
         f"--grpc-port={peer_bench.free_port()}", f"--metrics-port={peer_bench.free_port()}"],
        env=env, stdout=open(work / "triton.log", "wb"), stderr=subprocess.STDOUT)
    server = None
    theirs = {name: [] for name in names}
    ours = {name: [] for name in names}
    try:
        import requests
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/health/ready",
                                timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        server = harness.OspreyServer(ours_repo, [], workdir=work / "osprey-work",
                                      binary=osprey).start()
        # Alternating rounds, both servers up (an idle one costs nothing),
        # so that a change in the machine's load falls on both sides.
        for _ in range(args.repeat):
            for name in names:
                theirs[name].append(infer_rate(f"127.0.0.1:{port}", name, args.seconds,
                                               load_client, work))
                ours[name].append(infer_rate(server.hostport, name, args.seconds,
                                             load_client, work))
    finally:
        triton.terminate()
        triton.wait(30)
        if server:
            server.stop()
    print("| model | Osprey infer/s | Triton python+onnxruntime infer/s | ratio (goal >= 2) |")
    print("|---|---:|---:|---:|")
    for name in names:
        o, t = statistics.median(ours[name]), statistics.median(theirs[name])
        print(f"| {name} | {o:.1f} | {t:.1f} | **{o / t:.2f}x** |")
    shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,bert,mlp")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cases", default="abcd")
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--venvs", default=os.environ.get(
        "OSPREY_PEER_VENVS", os.path.expanduser("~/.cache/osprey-peer-bench")),
        help="scratch virtual environments of the peers (as peer_bench.py)")
    args = ap.parse_args()
    args.models = args.models.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.threads = [int(t) for t in args.threads.split(",")]
    build = pathlib.Path(args.build_dir)
    tool = build / "tests" / "onnx" / "onnx_time"
    osprey = build / "osprey"
    work = pathlib.Path(tempfile.mkdtemp(prefix="onnx-models-"))
    models = {n: architectures.write(n, work) for n in architectures.BUILDERS}
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"onnxruntime {__import__('onnxruntime').__version__}\n")
    slowest = None
    if "a" in args.cases:
        slowest = case_a(args, tool, models)
    if "b" in args.cases:
        case_b(args, tool, models, osprey)
    if "c" in args.cases:
        case_c(args, tool, models, osprey)
    if "d" in args.cases and slowest:
        case_d(tool, models, slowest)
    if "e" in args.cases:
        sys.path.insert(0, str(ROOT / "tests" / "bench"))
        case_e(args, models, osprey)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
