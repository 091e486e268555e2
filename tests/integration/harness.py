"""Helpers for the Osprey integration suite: start and stop the real binary,
build temporary model repositories, and speak raw HTTP/1.1 over a socket.

Nothing here knows about pytest; conftest.py wires these into fixtures.

Environment:
  OSPREY_BIN            server binary (default: <repo>/build/osprey)
  OSPREY_WRAPPER        command prefixed to the server, e.g.
                        "valgrind --leak-check=full --error-exitcode=99"
  OSPREY_TIMEOUT_SCALE  multiplies every start/stop timeout (default 1, or 20
                        when OSPREY_WRAPPER is set)
  OSPREY_EXTRA_ARGS     extra flags appended to every server command line

Servers listen on free ports: --http-port=0, --grpc-port=0 and
--metrics-port=0 unless a test gives its own; `port`/`url` and
`grpc_port`/`grpc_url` are read from the "Started ..." log lines.
"""

import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE_MODELS = ROOT / "models"

STARTED_RE = re.compile(r"Started HTTPService at (\S+):(\d+)")
GRPC_RE = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")
METRICS_RE = re.compile(r"Started Metrics Service at (\S+):(\d+)")
SANITIZER_MARKERS = (
    "AddressSanitizer",
    "LeakSanitizer",
    "UndefinedBehaviorSanitizer",
    "ThreadSanitizer",
    "runtime error:",  # UBSan without halt_on_error
)


def osprey_bin():
    b = os.environ.get("OSPREY_BIN") or str(ROOT / "build" / "osprey")
    return os.path.abspath(b)  # the server runs in its own working directory


def wrapper_argv():
    w = os.environ.get("OSPREY_WRAPPER", "").strip()
    return shlex.split(w) if w else []


def timeout_scale():
    s = os.environ.get("OSPREY_TIMEOUT_SCALE")
    if s:
        return float(s)
    return 20.0 if wrapper_argv() else 1.0


def instrumented():
    """True when the server runs under a wrapper or is a sanitizer build:
    memory-growth checks are meaningless there (ASan keeps freed memory in
    quarantine)."""
    if wrapper_argv():
        return True
    try:
        with open(osprey_bin(), "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"__asan_init" in data or b"libasan.so" in data or b"__tsan_init" in data


class ServerStartError(Exception):
    pass


class OspreyServer:
    """One osprey process. stdout and stderr go to files so a chatty server
    can never block on a full pipe; `log()` returns both."""

    def __init__(self, repo, args=(), workdir=None, binary=None):
        self.binary = os.path.abspath(binary) if binary else osprey_bin()
        self.repo = os.path.abspath(str(repo))
        self.args = list(args)
        self.workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="osprey-srv-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = None
        self.port = None
        self.grpc_port = None  # None when --allow-grpc=false
        self.host = "127.0.0.1"
        self.returncode = None

    # ---- lifecycle ---------------------------------------------------------

    def command(self):
        cmd = wrapper_argv() + [self.binary, f"--model-repository={self.repo}"]
        if not any(a.startswith("--http-port") for a in self.args):
            cmd.append("--http-port=0")
        # The gRPC port too (Triton's default 8001 would collide).
        if not any(a.startswith("--grpc-port") for a in self.args):
            cmd.append("--grpc-port=0")
        # Servers run side by side: never the fixed default metrics port.
        if not any(a.startswith("--metrics-port") for a in self.args):
            cmd.append("--metrics-port=0")
        cmd += self.args
        extra = os.environ.get("OSPREY_EXTRA_ARGS", "").strip()
        if extra:
            cmd += shlex.split(extra)
        return cmd

    def spawn(self):
        binary = self.binary
        if not os.access(binary, os.X_OK):
            raise ServerStartError(
                f"osprey binary not found or not executable at {binary!r}; "
                "build it (cmake --build build --target osprey) or set OSPREY_BIN"
            )
        self._out = open(self.workdir / "stdout.log", "wb")
        self._err = open(self.workdir / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            self.command(), stdout=self._out, stderr=self._err,
            stdin=subprocess.DEVNULL, cwd=str(self.workdir))
        return self

    def start(self, wait="ready", timeout=30.0):
        """Spawn, parse the printed port, then wait for /v2/health/<wait>
        ("ready", "live", or None for just the port)."""
        self.spawn()
        deadline = time.monotonic() + timeout * timeout_scale()
        while self.port is None:
            text = self.stderr()
            m = STARTED_RE.search(text)
            if m:
                self.port = int(m.group(2))
                # gRPC starts (and logs) before HTTP, as in Triton.
                g = GRPC_RE.search(text)
                self.grpc_port = int(g.group(2)) if g else None
                break
            if self.proc.poll() is not None:
                self._close_files()
                raise ServerStartError(
                    f"osprey exited with {self.proc.returncode} before listening:\n"
                    + self.log_tail())
            if time.monotonic() > deadline:
                self.kill()
                raise ServerStartError(
                    "osprey never printed 'Started HTTPService at <addr>:<port>':\n"
                    + self.log_tail())
            time.sleep(0.02)
        if wait:
            path = f"/v2/health/{wait}"
            while True:
                try:
                    r = requests.get(self.url + path, timeout=5)
                    if r.status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if self.proc.poll() is not None:
                    self._close_files()
                    raise ServerStartError(
                        f"osprey exited with {self.proc.returncode} while waiting "
                        f"for {path}:\n" + self.log_tail())
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServerStartError(f"{path} never returned 200:\n" + self.log_tail())
                time.sleep(0.05)
        return self

    def run_to_exit(self, timeout=30.0):
        """For servers expected to refuse to start: returns the exit code."""
        self.spawn()
        try:
            rc = self.proc.wait(timeout=timeout * timeout_scale())
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._close_files()
        self.returncode = rc
        return rc

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Signals the server and waits. Returns the exit code (negative =
        killed by a signal). Kills it and raises if it does not exit."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout * timeout_scale())
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"osprey did not exit within {timeout * timeout_scale():.0f}s "
                    f"of {sig.name}:\n" + self.log_tail())
        self._close_files()
        self.returncode = self.proc.returncode
        return self.returncode

    def wait_exit(self, timeout=30.0):
        """Waits for an exit already under way (no signal sent). Returns the
        exit code; raises AssertionError if it does not come."""
        try:
            self.proc.wait(timeout=timeout * timeout_scale())
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("osprey did not exit:\n" + self.log_tail())
        self._close_files()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_files()

    def _close_files(self):
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f is not None and not f.closed:
                f.close()

    def clean_exit_problems(self):
        """[] when the process exited 0 with no sanitizer report, else a list
        of reasons. Call after stop()."""
        problems = []
        rc = self.returncode
        if rc != 0:
            if rc is not None and rc < 0:
                problems.append(f"osprey was killed by signal {-rc} ({_signame(-rc)})")
            else:
                problems.append(f"osprey exited with status {rc}, expected 0")
        text = self.log()
        for marker in SANITIZER_MARKERS:
            if marker in text:
                problems.append(f"'{marker}' found in the server log")
        if wrapper_argv() and "valgrind" in wrapper_argv()[0]:
            m = re.search(r"ERROR SUMMARY: (\d+) errors", text)
            if m and int(m.group(1)) != 0:
                problems.append(f"valgrind: ERROR SUMMARY: {m.group(1)} errors")
            for kind in ("definitely lost", "indirectly lost"):
                m = re.search(kind + r": ([\d,]+) bytes", text)
                if m and m.group(1) != "0":
                    problems.append(f"valgrind: {kind}: {m.group(1)} bytes")
        return problems

    # ---- accessors ---------------------------------------------------------

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def hostport(self):
        return f"{self.host}:{self.port}"

    @property
    def grpc_url(self):
        """host:port of the gRPC service, for tritonclient.grpc."""
        assert self.grpc_port is not None, "no gRPC service:\n" + self.log_tail()
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self):
        """http://127.0.0.1:<port> of the metrics service, from the line
        `Started Metrics Service at <addr>:<port>` (logged right after the
        HTTP one)."""
        deadline = time.monotonic() + 10 * timeout_scale()
        while True:
            m = METRICS_RE.search(self.stderr())
            if m:
                return f"http://{self.host}:{m.group(2)}"
            if time.monotonic() > deadline:
                raise AssertionError("no 'Started Metrics Service' line:\n" + self.log_tail())
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def stderr(self):
        return _read(self.workdir / "stderr.log")

    def stdout(self):
        return _read(self.workdir / "stdout.log")

    def log(self):
        return self.stdout() + self.stderr()

    def log_tail(self, n=6000):
        text = self.log()
        return text[-n:] if len(text) > n else text


def _read(path):
    try:
        return pathlib.Path(path).read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _signame(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "?"


# ---- model repositories ----------------------------------------------------


def _dims(d):
    return "[ " + ", ".join(str(x) for x in d) + " ]"


def model_config(name, backend, inputs, outputs, max_batch_size=8, extra=""):
    """config.pbtxt text. inputs/outputs: [(name, "TYPE_FP32", [dims]), ...]."""
    def tensors(specs):
        parts = []
        for tname, dtype, dims in specs:
            parts.append(
                "  {\n"
                f'    name: "{tname}"\n'
                f"    data_type: {dtype}\n"
                f"    dims: {_dims(dims)}\n"
                "  }")
        return ",\n".join(parts)

    return (
        f'name: "{name}"\n'
        f'backend: "{backend}"\n'
        f"max_batch_size: {max_batch_size}\n"
        f"input [\n{tensors(inputs)}\n]\n"
        f"output [\n{tensors(outputs)}\n]\n"
        f"{extra}")


def identity_config(name, dtype, dims, n=1, max_batch_size=8, extra=""):
    ins = [(f"INPUT{i}", dtype, dims) for i in range(n)]
    outs = [(f"OUTPUT{i}", dtype, dims) for i in range(n)]
    return model_config(name, "identity", ins, outs, max_batch_size, extra)


def add_sub_config(name, dtype="TYPE_INT32", dims=(16,), max_batch_size=8):
    ins = [("INPUT0", dtype, list(dims)), ("INPUT1", dtype, list(dims))]
    outs = [("OUTPUT0", dtype, list(dims)), ("OUTPUT1", dtype, list(dims))]
    return model_config(name, "add_sub", ins, outs, max_batch_size)


QUEUE_BATCHING = (
    "dynamic_batching {\n"
    "  max_queue_delay_microseconds: 1000000\n"
    "  preferred_batch_size: [ 8 ]\n"
    "  default_queue_policy { max_queue_size: 1 }\n"
    "}\n")

# The models of Triton's qa/L0_http tests (protocol reference §7), rebuilt on
# the identity/add_sub backends, plus a few the suite needs for dtypes.
QA_MODELS = {
    "onnx_zero_1_float32": lambda n: identity_config(n, "TYPE_FP32", [-1]),
    "onnx_zero_3_float32": lambda n: identity_config(n, "TYPE_FP32", [-1], n=3),
    "onnx_zero_1_float16": lambda n: identity_config(n, "TYPE_FP16", [-1, -1]),
    "onnx_zero_1_object": lambda n: identity_config(n, "TYPE_STRING", [-1]),
    "onnx_zero_1_object_1_element": lambda n: identity_config(n, "TYPE_STRING", [1]),
    "onnx_zero_1_float32_queue": lambda n: identity_config(
        n, "TYPE_FP32", [-1], extra=QUEUE_BATCHING),
    "simple_identity": lambda n: identity_config(n, "TYPE_STRING", [-1]),
    "simple_identity_int64": lambda n: identity_config(n, "TYPE_INT64", [-1]),
    "simple": lambda n: add_sub_config(n),
    # extra dtypes for the client and JSON typing tests
    "identity_bool": lambda n: identity_config(n, "TYPE_BOOL", [-1]),
    "identity_uint32": lambda n: identity_config(n, "TYPE_UINT32", [-1]),
    "identity_int8": lambda n: identity_config(n, "TYPE_INT8", [-1]),
    "identity_fp64": lambda n: identity_config(n, "TYPE_FP64", [-1]),
    "identity_bf16": lambda n: identity_config(n, "TYPE_BF16", [-1]),
    "identity_nobatch": lambda n: identity_config(n, "TYPE_FP32", [-1], max_batch_size=0),
    "simple_fp16": lambda n: add_sub_config(n, "TYPE_FP16"),
    "simple_fp32": lambda n: add_sub_config(n, "TYPE_FP32"),
    "simple_int64": lambda n: add_sub_config(n, "TYPE_INT64"),
    "identity_delay": lambda n: identity_config(
        n, "TYPE_FP32", [-1],
        extra='parameters [ { key: "execute_delay_ms" value: { string_value: "300" } } ]\n'),
}


def write_model(repo, name, config_text, version=1, files=None):
    """Writes <repo>/<name>/config.pbtxt and <repo>/<name>/<version>/ (plus
    `files`: {relative name: bytes} inside the version folder)."""
    mdir = pathlib.Path(repo) / name
    vdir = mdir / str(version)
    vdir.mkdir(parents=True, exist_ok=True)
    (mdir / "config.pbtxt").write_text(config_text)
    for fname, data in (files or {}).items():
        (vdir / fname).write_bytes(data)
    return mdir


def make_repo(path, names):
    """A repository holding the named QA_MODELS."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        write_model(path, name, QA_MODELS[name](name))
    return path


# ---- raw HTTP/1.1 --------------------------------------------------------------


class RawResponse:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # lower-case name -> value (last wins)
        self.body = body

    @property
    def status_code(self):  # the name requests uses
        return self.status

    def __repr__(self):
        return f"<RawResponse {self.status} {self.headers} {self.body[:200]!r}>"


class RawConnection:
    """A bare HTTP/1.1 client on one socket: sends exactly the bytes given and
    parses one response at a time (Content-Length, chunked, or to EOF)."""

    def __init__(self, host, port, timeout=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method, path, headers=None, body=b"", host="localhost"):
        hdrs = {"Host": host}
        hdrs.update(headers or {})
        if body and not any(k.lower() in ("content-length", "transfer-encoding") for k in hdrs):
            hdrs["Content-Length"] = str(len(body))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        self.send(head.encode("latin-1") + body)
        return self.read_response(head_only=(method == "HEAD"))

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed by server")
        self.buf += chunk

    def _read_line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, head_only=False):
        status_line = self._read_line().decode("latin-1")
        parts = status_line.split(" ", 2)
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = {}
        while True:
            line = self._read_line()
            if not line:
                break
            k, v = line.decode("latin-1").split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if head_only or status in (204, 304) or 100 <= status < 200:
            return RawResponse(status, reason, headers, b"")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._read_line().split(b";")[0], 16)
                if size == 0:
                    while self._read_line():
                        pass
                    break
                body += self._read_exact(size)
                self._read_line()
        elif "content-length" in headers:
            body = self._read_exact(int(headers["content-length"]))
        else:
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            body, self.buf = self.buf, b""
        return RawResponse(status, reason, headers, body)


def chunk_encode(data, chunk_size=None):
    """Transfer-Encoding: chunked framing of `data` (one chunk by default)."""
    if chunk_size is None:
        chunk_size = max(len(data), 1)
    out = b""
    for i in range(0, len(data), chunk_size):
        piece = data[i:i + chunk_size]
        out += f"{len(piece):X}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


# ---- waiting for conditions (never a fixed sleep) ---------------------------


def wait_for(condition, what, timeout=30.0, interval=0.02):
    """Polls condition() until it returns something truthy, and returns it;
    fails naming `what` after `timeout` seconds (scaled by timeout_scale)."""
    deadline = time.monotonic() + timeout * timeout_scale()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


def pending_requests(server, model, version="1"):
    """The model's nv_inference_pending_request_count: requests received and
    queued, waiting for an instance (0 when the line is missing)."""
    text = requests.get(server.metrics_url + "/metrics", timeout=10).text
    want = f'nv_inference_pending_request_count{{model="{model}",version="{version}"}} '
    for line in text.splitlines():
        if line.startswith(want):
            return int(float(line[len(want):]))
    return 0


def wait_pending(server, model, n, timeout=30.0):
    """Waits until `n` requests of `model` are queued in the server."""
    wait_for(lambda: pending_requests(server, model) == n,
             f"{n} queued request(s) of '{model}'", timeout)


def wait_received(server, method, path, since=0, timeout=30.0):
    """Waits until the HTTP server has taken a request for `path`: its
    verbose "HTTP request:" log line, after the first `since` characters of
    the log (len(server.log()) before the request went out, when the server
    served such requests before). The caller turned verbose logging on, for
    example with log_verbose(server, 1)."""
    line = f"HTTP request: {method} {path}"
    wait_for(lambda: line in server.log()[since:],
             f"the server to receive {method} {path}", timeout)


def log_verbose(server, level):
    """Sets the server's verbose log level through the logging API."""
    r = requests.post(server.url + "/v2/logging", json={"log_verbose_level": level},
                      timeout=10)
    assert r.status_code == 200, r.text
