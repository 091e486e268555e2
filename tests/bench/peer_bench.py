#!/usr/bin/env python3
"""Osprey against real peers on the same models, the same client and the
same CPU pinning (issue 15). Never part of CI.

    tests/bench/peer_bench.py                     # everything, about 12 minutes
    tests/bench/peer_bench.py --quick             # 1 round of 1 s: a smoke run
    tests/bench/peer_bench.py --triton-identity-backend=/path/libtriton_identity.so
    tests/bench/peer_bench.py --triton-identity-backend=build   # builds it first

Servers, each started pinned to one CPU (taskset -c --server-cpu) while the
clients run on another (--client-cpu):

  osprey          build/osprey on a repository of `simple` (add_sub) and
                  `identity_fp32` (identity), as in models/
  triton-cpp      Triton's C++ identity backend (only with
                  --triton-identity-backend; TRITON_IDENTITY.md says how to
                  build it) serving `identity_fp32`
  triton-python   the `tritonserver` that the nvidia-pytriton wheel ships,
                  python-backend `simple` and `identity_fp32`
  mlserver        MLServer with two custom runtimes, the same two models
  echo            build/tests/bench/echo_server: libmicrohttpd answering
                  with the request body, Osprey's threads and limits (the
                  floor of this HTTP stack)

Triton and MLServer live in scratch virtual environments under --venvs
(default ~/.cache/osprey-peer-bench), created on first use with pip
(nvidia-pytriton, mlserver with uvloop==0.21.0); they are never
dependencies of the project. Triton runs with LD_LIBRARY_PATH set to the
wheel's nvidia_pytriton.libs and its venv's bin first on PATH.

Cases: `simple` JSON (INT32 [1,16] x2) and `identity_fp32` JSON ([1,16]
FP32) at concurrency 1, 16 and 64 through wrk with a Lua body script
(Content-Type: application/json), the echo server getting the `simple`
body; and one 16 MiB binary FP32 tensor at concurrency 1 through the
project's load_client (Triton's binary tensor extension; MLServer has none).
Every case alternates the servers round by round (--rounds, --duration
seconds each) and reports the median round; before the timed rounds each
server's answer is checked once. Per-request server CPU comes from /proc
(the server's process tree, user + system); idle RSS is the tree's VmRSS
--settle seconds after it became ready; start to ready is exec to the
first 200 from /v2/health/ready.

Prints the markdown table of issue 15 with the ratios Osprey / peer, and
the machine and date; --json-out keeps every run. Exit status 1 when a
server did not start, a check failed or a run had errors.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from start_rss import measure_start, tree_cpu_s  # noqa: E402

SIXTEEN_MIB_FP32 = 4 * 1024 * 1024  # elements
COLUMNS = ["osprey", "triton-cpp", "triton-python", "mlserver", "echo"]
TITLES = {"osprey": "Osprey", "triton-cpp": "Triton C++ identity",
          "triton-python": "Triton python", "mlserver": "MLServer",
          "echo": "MHD echo"}

# ---- the models, once per server kind ---------------------------------------

SIMPLE_IO = """input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""
IDENTITY_IO = """input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
ONE_CPU_INSTANCE = "instance_group [ { kind: KIND_CPU count: 1 } ]\n"


def pbtxt(name, backend, io):
    return ('name: "%s"\nbackend: "%s"\nmax_batch_size: 8\n%s%s'
            % (name, backend, io, ONE_CPU_INSTANCE))


TRITON_SIMPLE_PY = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
'''

TRITON_IDENTITY_PY = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
'''

MLSERVER_RUNTIMES = '''from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class AddSub(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        a = NumpyCodec.decode_input(request.inputs[0])
        b = NumpyCodec.decode_input(request.inputs[1])
        return InferenceResponse(model_name=self.name, outputs=[
            NumpyCodec.encode_output("OUTPUT0", a + b),
            NumpyCodec.encode_output("OUTPUT1", a - b)])


class Identity(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(request.inputs[0])
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output("OUTPUT0", x)])
'''


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def osprey_repo(root):
    write(os.path.join(root, "simple", "config.pbtxt"),
          pbtxt("simple", "add_sub", SIMPLE_IO))
    write(os.path.join(root, "identity_fp32", "config.pbtxt"),
          pbtxt("identity_fp32", "identity", IDENTITY_IO))
    for m in ("simple", "identity_fp32"):
        os.makedirs(os.path.join(root, m, "1"), exist_ok=True)


def triton_python_repo(root):
    write(os.path.join(root, "simple", "config.pbtxt"),
          pbtxt("simple", "python", SIMPLE_IO))
    write(os.path.join(root, "simple", "1", "model.py"), TRITON_SIMPLE_PY)
    write(os.path.join(root, "identity_fp32", "config.pbtxt"),
          pbtxt("identity_fp32", "python", IDENTITY_IO))
    write(os.path.join(root, "identity_fp32", "1", "model.py"), TRITON_IDENTITY_PY)


def triton_cpp_repo(root):
    write(os.path.join(root, "identity_fp32", "config.pbtxt"),
          pbtxt("identity_fp32", "identity", IDENTITY_IO))
    os.makedirs(os.path.join(root, "identity_fp32", "1"), exist_ok=True)


def mlserver_repo(root, http_port, grpc_port, metrics_port, workers):
    write(os.path.join(root, "settings.json"), json.dumps({
        "host": "127.0.0.1", "http_port": http_port, "grpc_port": grpc_port,
        "metrics_port": metrics_port, "parallel_workers": workers,
        "debug": False}))
    for name, impl in (("simple", "AddSub"), ("identity_fp32", "Identity")):
        write(os.path.join(root, name, "runtimes.py"), MLSERVER_RUNTIMES)
        write(os.path.join(root, name, "model-settings.json"), json.dumps({
            "name": name, "implementation": "runtimes." + impl}))


# ---- scratch environments ---------------------------------------------------------


def ensure_venv(path, packages, log):
    python = os.path.join(path, "bin", "python")
    marker = os.path.join(path, ".peer-bench-installed")
    if os.path.exists(marker):
        return python
    print("setting up %s: pip install %s (once)" % (path, " ".join(packages)),
          file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    with open(log, "ab") as out:
        subprocess.run([python, "-m", "pip", "install", "-q"] + packages,
                       check=True, stdout=out, stderr=subprocess.STDOUT)
    open(marker, "w").close()
    return python


def site_packages(python):
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def triton_backends(work, python, identity_so):
    """A backend folder: the wheel's python backend with the stub for the
    venv's Python, and the C++ identity backend when given."""
    sp = site_packages(python)
    server_dir = os.path.join(sp, "pytriton", "tritonserver")
    backends = os.path.join(work, "triton-backends")
    shutil.copytree(os.path.join(server_dir, "backends", "python"),
                    os.path.join(backends, "python"), dirs_exist_ok=True)
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    stub = os.path.join(server_dir, "python_backend_stubs", version,
                        "triton_python_backend_stub")
    shutil.copy2(stub, os.path.join(backends, "python"))
    if identity_so:
        os.makedirs(os.path.join(backends, "identity"), exist_ok=True)
        shutil.copy2(identity_so, os.path.join(backends, "identity",
                                               "libtriton_identity.so"))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(sp, "nvidia_pytriton.libs") + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PATH"] = os.path.dirname(python) + ":" + env.get("PATH", "")
    return os.path.join(server_dir, "bin", "tritonserver"), backends, env


# ---- servers --------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    def __init__(self, column, argv, port, env=None, cwd=None, cases=()):
        self.column = column
        self.argv = argv
        self.port = port
        self.env = env
        self.cwd = cwd
        self.cases = set(cases)
        self.proc = None
        self.log = None
        self.ready_s = self.cpu_to_ready_s = self.rss_kib = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, args, work):
        self.log = open(os.path.join(work, self.column + ".log"), "wb")
        argv = self.argv
        if args.server_cpu is not None:
            argv = ["taskset", "-c", str(args.server_cpu)] + argv
        ready_path = "/" if self.column == "echo" else "/v2/health/ready"
        self.proc, self.ready_s, self.cpu_to_ready_s, self.rss_kib = measure_start(
            argv, self.port, env=self.env, timeout=args.start_timeout,
            settle=args.settle, ready_path=ready_path, cwd=self.cwd,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if not self.alive():
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# ---- clients --------------------------------------------------------------------


def simple_body():
    return {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}


def identity_body():
    return {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                        "data": [float(i) + 0.5 for i in range(16)]}]}


def check_answer(peer, model, body):
    """One request through urllib; raises unless the outputs are right."""
    req = urllib.request.Request(
        "http://%s/v2/models/%s/infer" % (peer.address, model),
        data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        reply = json.load(r)
    outs = {o["name"]: [float(v) for v in o["data"]] for o in reply["outputs"]}
    ins = [[float(v) for v in i["data"]] for i in body["inputs"]]
    if model == "simple":
        want = {"OUTPUT0": [a + b for a, b in zip(*ins)],
                "OUTPUT1": [a - b for a, b in zip(*ins)]}
    else:
        want = {"OUTPUT0": ins[0]}
    if outs != want:
        raise RuntimeError("%s %s answered %s" % (peer.column, model, outs))


def lua_script(path, body_bytes):
    text = body_bytes.decode()
    assert "]==]" not in text
    with open(path, "w") as f:
        f.write('wrk.method = "POST"\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                "wrk.body = [==[%s]==]\n" % text)


def client_prefix(args):
    return ["taskset", "-c", str(args.client_cpu)] if args.client_cpu is not None else []


def parse_wrk(text):
    def num(pattern, default=0.0):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else default

    def ms(label):
        m = re.search(r"^\s+%s\s+([\d.]+)(us|ms|s)\b" % label, text, re.M)
        if not m:
            return float("nan")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    errors = int(num(r"Non-2xx or 3xx responses: (\d+)"))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        errors += sum(int(g) for g in m.groups())
    return {"requests": int(num(r"(\d+) requests in")),
            "rate": num(r"Requests/sec:\s+([\d.]+)"),
            "p50_ms": ms("50%"), "p99_ms": ms("99%"), "errors": errors}


def run_wrk(args, peer, path, script, concurrency):
    argv = client_prefix(args) + [
        "wrk", "-t1", "-c%d" % concurrency, "-d%gs" % args.duration, "--latency",
        "-s", script, "http://%s%s" % (peer.address, path)]
    cpu0 = tree_cpu_s(peer.proc.pid)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cpu = tree_cpu_s(peer.proc.pid) - cpu0
    r = parse_wrk(p.stdout)
    if p.returncode != 0 or r["requests"] == 0:
        r["errors"] = max(1, r["errors"])
        r["output"] = p.stdout[-2000:]
    r["cpu_us"] = cpu * 1e6 / max(1, r["requests"])
    return r


def run_load_client(args, peer, extra):
    argv = client_prefix(args) + [
        args.load_client, "--url", peer.address, "--concurrency", "1",
        "--duration", str(args.big_duration), "--warmup", "0", "--json"] + extra
    cpu0 = tree_cpu_s(peer.proc.pid)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu = tree_cpu_s(peer.proc.pid) - cpu0
    if not p.stdout.strip():
        return {"requests": 0, "rate": 0, "mb_per_s": 0, "errors": 1,
                "cpu_us": float("nan"), "output": p.stderr[-2000:]}
    j = json.loads(p.stdout)
    return {"requests": j["requests"], "rate": j["requests_per_s"],
            "mb_per_s": j["request_mb_per_s"], "errors": j["errors"],
            "body_bytes": j.get("request_body_bytes"),
            "p50_ms": j["latency_ms"]["p50"], "p99_ms": j["latency_ms"]["p99"],
            "cpu_us": cpu * 1e6 / max(1, j["requests"])}


def median_run(runs, key="rate"):
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


# ---- the benchmark ------------------------------------------------------------------


def start_peers(args, work):
    peers = []
    osprey_root = os.path.join(work, "repo-osprey")
    osprey_repo(osprey_root)
    port = free_port()
    peers.append(Peer("osprey", [
        args.osprey, "--model-repository=" + osprey_root, "--http-port=%d" % port,
        "--http-address=127.0.0.1", "--metrics-port=%d" % free_port(),
        "--grpc-address=127.0.0.1", "--grpc-port=%d" % free_port()]
        + args.osprey_arg, port, cwd=work,  # its queue store goes there
        cases={"simple", "identity", "binary"}))

    wanted = set(args.servers)
    if wanted & {"triton-cpp", "triton-python"}:
        python = ensure_venv(os.path.join(args.venvs, "triton"),
                             ["nvidia-pytriton"], os.path.join(work, "pip.log"))
        tritonserver, backends, env = triton_backends(
            work, python, args.triton_identity_backend)
        layouts = [("triton-python", triton_python_repo,
                    {"simple", "identity", "binary"})]
        if args.triton_identity_backend:
            layouts.append(("triton-cpp", triton_cpp_repo, {"identity", "binary"}))
        for column, make, cases in layouts:
            if column not in wanted:
                continue
            root = os.path.join(work, "repo-" + column)
            make(root)
            port = free_port()
            peers.append(Peer(column, [
                tritonserver, "--model-repository=" + root,
                "--backend-directory=" + backends,
                "--http-address=127.0.0.1", "--http-port=%d" % port,
                "--grpc-address=127.0.0.1", "--grpc-port=%d" % free_port(),
                "--metrics-port=%d" % free_port(), "--log-verbose=0"],
                port, env=env, cases=cases))
    if "mlserver" in wanted:
        python = ensure_venv(os.path.join(args.venvs, "mlserver"),
                             ["mlserver", "uvloop==0.21.0"],
                             os.path.join(work, "pip.log"))
        root = os.path.join(work, "repo-mlserver")
        port = free_port()
        mlserver_repo(root, port, free_port(), free_port(), args.mlserver_workers)
        peers.append(Peer("mlserver", [
            os.path.join(os.path.dirname(python), "mlserver"), "start", root],
            port, cwd=root, cases={"simple", "identity"}))
    if "echo" in wanted:
        port = free_port()
        peers.append(Peer("echo", [args.echo_server, "--port", str(port)],
                          port, cases={"echo"}))

    peers = [p for p in peers if p.column in wanted]
    for peer in peers:
        print("starting %s" % peer.column, file=sys.stderr, flush=True)
        peer.start(args, work)
    return peers


def small_cases(args, work, peers, results):
    bodies = {"simple": json.dumps(simple_body(), separators=(",", ":")).encode(),
              "identity": json.dumps(identity_body(), separators=(",", ":")).encode()}
    scripts = {}
    for name, body in bodies.items():
        scripts[name] = os.path.join(work, name + ".lua")
        lua_script(scripts[name], body)
    for peer in peers:  # one checked answer each before timing
        if "simple" in peer.cases:
            check_answer(peer, "simple", simple_body())
        if "identity" in peer.cases:
            check_answer(peer, "identity_fp32", identity_body())
    for case, model in (("simple", "simple"), ("identity", "identity_fp32")):
        for c in args.concurrency:
            runs = {p.column: [] for p in peers}
            for _ in range(args.rounds):
                for peer in peers:
                    if case in peer.cases:
                        r = run_wrk(args, peer, "/v2/models/%s/infer" % model,
                                    scripts[case], c)
                    elif case == "simple" and "echo" in peer.cases:
                        r = run_wrk(args, peer, "/", scripts["simple"], c)
                    else:
                        continue
                    runs[peer.column].append(r)
                    log_run(args, "%s c=%d" % (case, c), peer, r)
            results[(case, c)] = {k: v for k, v in runs.items() if v}


def big_case(args, peers, results):
    runs = {}
    osprey_body = None
    for _ in range(args.rounds):
        for peer in peers:
            if "binary" in peer.cases:
                r = run_load_client(args, peer, ["--mode", "binary-fp32",
                                                 "--elements", str(SIXTEEN_MIB_FP32)])
                osprey_body = osprey_body or r.get("body_bytes")
            elif "echo" in peer.cases:
                r = run_load_client(args, peer, [
                    "--mode", "raw", "--body-bytes",
                    str(osprey_body or SIXTEEN_MIB_FP32 * 4 + 200)])
            else:
                continue
            runs.setdefault(peer.column, []).append(r)
            log_run(args, "16 MiB binary", peer, r)
    results[("binary", 1)] = runs


def log_run(args, label, peer, r):
    if args.verbose:
        print("  %-16s %-14s %10.1f /s  p50 %.3f ms  CPU %.1f us/req  errors %d"
              % (label, peer.column, r["rate"], r.get("p50_ms", float("nan")),
                 r["cpu_us"], r["errors"]), file=sys.stderr, flush=True)


def fmt(v, digits=0):
    if v is None or v != v:
        return "–"
    return format(v, ",.%df" % digits)


def table(args, peers, results):
    cols = [c for c in COLUMNS if any(p.column == c for p in peers)]
    head = "| case | " + " | ".join(TITLES[c] for c in cols) + " | Osprey ÷ " + \
        " | Osprey ÷ ".join(TITLES[c] for c in cols if c != "osprey") + " |"
    lines = [head, "|---|" + "---:|" * (len(cols) + len(cols) - 1)]

    def row(label, values):
        o = values.get("osprey")
        ratios = []
        for c in cols:
            if c == "osprey":
                continue
            v = values.get(c)
            ratios.append("**%.2f**" % (o / v) if o and v else "–")
        lines.append("| %s | %s | %s |" % (
            label, " | ".join(fmt(values.get(c)) for c in cols), " | ".join(ratios)))

    def med(case, c, key):
        return {col: median_run(runs)[key] for col, runs in results.get((case, c), {}).items()}

    for case, label in (("simple", "`simple` JSON"), ("identity", "`identity_fp32` [1,16] JSON")):
        for c in args.concurrency:
            row("%s, c=%d, infer/s" % (label, c), med(case, c, "rate"))
    # CPU per request: the median over rounds, of the simple case (the
    # C++ identity backend and the echo: their only small case)
    for c in args.concurrency:
        cpu = {}
        for col in cols:
            for case in ("simple", "identity", ):
                runs = results.get((case, c), {}).get(col)
                if runs and col not in cpu:
                    cpu[col] = statistics.median(r["cpu_us"] for r in runs)
        # lower is better: the ratio is peer ÷ Osprey here
        o = cpu.get("osprey")
        lines.append("| server CPU µs per small request, c=%d (ratio: peer ÷ Osprey) | %s | %s |" % (
            c, " | ".join(fmt(cpu.get(col), 1) for col in cols),
            " | ".join("**%.2f**" % (cpu[col] / o) if o and cpu.get(col) else "–"
                       for col in cols if col != "osprey")))
    if ("binary", 1) in results:
        row("16 MiB binary, c=1, MB/s", med("binary", 1, "mb_per_s"))
        cpu = {col: statistics.median(r["cpu_us"] for r in runs) / 1000
               for col, runs in results[("binary", 1)].items()}
        lines.append("| server CPU ms per 16 MiB request | %s | %s |" % (
            " | ".join(fmt(cpu.get(col), 2) for col in cols),
            " | ".join("–" for col in cols if col != "osprey")))
    rss = {p.column: p.rss_kib / 1024 for p in peers}
    ready = {p.column: p.ready_s for p in peers}
    lines.append("| idle RSS, MiB (process tree) | %s | %s |" % (
        " | ".join(fmt(rss.get(c), 1) for c in cols), " | ".join("–" for c in cols if c != "osprey")))
    lines.append("| start to ready, s | %s | %s |" % (
        " | ".join(fmt(ready.get(c), 3) for c in cols), " | ".join("–" for c in cols if c != "osprey")))
    return lines


def machine_line(args):
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        cpu = "?"
    load = os.getloadavg()
    return ("%s, %s, %d CPUs (%s), load average %.2f at the end; servers on CPU %s, "
            "clients on CPU %s; median of %d alternating rounds of %g s (16 MiB: %g s)"
            % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), platform.node() or "?",
               os.cpu_count(), cpu, load[0], args.server_cpu, args.client_cpu,
               args.rounds, args.duration, args.big_duration))


def build_triton_identity(args):
    """VENVS/triton-identity/libtriton_identity.so, built on first use."""
    out = os.path.join(args.venvs, "triton-identity")
    so = os.path.join(out, "libtriton_identity.so")
    if not os.path.exists(so):
        print("building Triton's identity backend into %s" % out,
              file=sys.stderr, flush=True)
        argv = [os.path.join(ROOT, "tests", "bench", "build_triton_identity.sh"), out]
        if args.triton_sources:
            argv.append(args.triton_sources)
        if subprocess.run(argv).returncode != 0:
            sys.exit("peer_bench: building the identity backend failed")
    return so


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--osprey", help="default BUILD/osprey")
    p.add_argument("--osprey-arg", action="append", default=[],
                   help="extra osprey flag (repeatable)")
    p.add_argument("--venvs", default=os.environ.get(
        "OSPREY_PEER_VENVS", os.path.expanduser("~/.cache/osprey-peer-bench")),
        help="scratch virtual environments of the peers (made on first use)")
    p.add_argument("--triton-identity-backend", metavar="SO",
                   help="libtriton_identity.so built from Triton's sources "
                        "(tests/bench/TRITON_IDENTITY.md); adds the triton-cpp "
                        "column. 'build': build it first with "
                        "build_triton_identity.sh into VENVS/triton-identity "
                        "(once; from GitHub, or from --triton-sources)")
    p.add_argument("--triton-sources", metavar="DIR",
                   help="with --triton-identity-backend=build: clones of "
                        "identity_backend, backend, core and common (r24.10)")
    p.add_argument("--servers", default=",".join(COLUMNS),
                   help="comma-separated subset of " + ",".join(COLUMNS))
    p.add_argument("--mlserver-workers", type=int, default=1,
                   help="MLServer parallel_workers (1, its default)")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument("--big-duration", type=float, default=5.0,
                   help="seconds per 16 MiB run")
    p.add_argument("--no-big", action="store_true", help="skip the 16 MiB case")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 1 round of 1 s each")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds after ready before the idle RSS is read")
    p.add_argument("--start-timeout", type=float, default=180.0)
    p.add_argument("--json-out", help="write every run here")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.duration, args.big_duration = 1, 1.0, 1.0
    args.osprey = args.osprey or os.path.join(args.build_dir, "osprey")
    args.load_client = os.path.join(args.build_dir, "tests", "bench", "load_client")
    args.echo_server = os.path.join(args.build_dir, "tests", "bench", "echo_server")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if "osprey" not in args.servers:
        args.servers.insert(0, "osprey")
    if args.triton_identity_backend == "build":
        args.triton_identity_backend = build_triton_identity(args)
    if "triton-cpp" in args.servers and not args.triton_identity_backend:
        args.servers.remove("triton-cpp")
    if os.cpu_count() < 2 or not shutil.which("taskset"):
        args.server_cpu = args.client_cpu = None
    return args


def main():
    args = parse_args()
    for tool in ("wrk", "taskset"):
        if not shutil.which(tool):
            sys.exit("peer_bench: %s is missing (apt-get install wrk util-linux)" % tool)
    for path in (args.osprey, args.load_client, args.echo_server):
        if not os.access(path, os.X_OK):
            sys.exit("peer_bench: %s is missing; build first (make build)" % path)
    work = tempfile.mkdtemp(prefix="osprey-peer-bench-")
    peers, results, status = [], {}, 0
    t0 = time.monotonic()
    try:
        peers = start_peers(args, work)
        small_cases(args, work, peers, results)
        if not args.no_big:
            big_case(args, peers, results)
        for peer in peers:
            if not peer.alive():
                raise RuntimeError("%s died (see %s)" % (peer.column, peer.log.name))
        print("\n".join(table(args, peers, results)))
        print("\n" + machine_line(args))
        for key, runs in results.items():
            for col, rs in runs.items():
                for r in rs:
                    if r["errors"]:
                        status = 1
                        print("errors in %s %s: %s" % (key, col, r.get("output", r)),
                              file=sys.stderr)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"%s c=%d" % k: v for k, v in results.items()}, f, indent=1)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        print("peer_bench: %s" % e, file=sys.stderr)
        status = 1
    finally:
        for peer in peers:
            peer.stop()
    print("total %.0f s; logs in %s" % (time.monotonic() - t0, work), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
