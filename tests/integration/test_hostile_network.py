"""The server under hostile or careless networks, with its default flags:
thousands of idle keep-alive connections and clients dribbling headers or
bodies one byte at a time on the HTTP port, idle HTTP/2 connections and idle
streams on the gRPC port, silent HTTP/2 peers closed by keepalive and by the
maximum connection age, and kill -9 under load followed by a restart on
the same ports and queue folder. A well-behaved client must keep being
served throughout; every wait is bounded (a generous per-request timeout),
nothing here measures time.
"""

import select
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

import harness
import queue_util as qu

IDLE_CONNECTIONS = 2000
# A well-behaved request may take this long on a loaded 2-core CI machine
# before it counts as starved (a bound, not a measurement).
REQUEST_TIMEOUT = 20.0


def _identity_repo(tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "identity_fp32",
                        harness.identity_config("identity_fp32", "TYPE_FP32", [-1]))
    return repo


def _infer_http(server, n=10):
    """n inference requests from a well-behaved client; each must succeed
    within REQUEST_TIMEOUT."""
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                        "data": [1, 2, 3, 4]}]}
    url = server.url + "/v2/models/identity_fp32/infer"
    with requests.Session() as s:
        for _ in range(n):
            r = s.post(url, json=body, timeout=REQUEST_TIMEOUT * harness.timeout_scale())
            assert r.status_code == 200, r.text
            assert r.json()["outputs"][0]["data"] == [1, 2, 3, 4]


def _open_keepalive(port, n):
    """n connections that each completed one keep-alive request and now sit
    idle. Caller closes them."""
    socks = []
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\n\r\n"
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT)
        s.sendall(request)
        socks.append(s)
    for s in socks:  # every one answered, the connection left open
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk, "the server closed an idle keep-alive connection early"
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head[:80]
    return socks


class _Dribblers:
    """Clients that send a request one byte at a time, a byte per `period`
    seconds, on `n` connections each: half dribble their headers, half a
    declared body. They never finish within a test."""

    def __init__(self, port, n, period=0.5):
        body_head = (b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\n"
                     b"Host: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n")
        self.socks = []
        self.rest = []
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT)
            if i % 2:
                s.sendall(body_head)
                self.rest.append(b"{" + b" " * 99998)
            else:
                self.rest.append(b"GET /v2/health/ready HTTP/1.1\r\nHost: localhost\r\n"
                                 + b"X-Slow: " + b"a" * 4000)
            self.socks.append(s)
        self.period = period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        i = 0
        while not self.stop.wait(self.period):
            for s, rest in zip(self.socks, self.rest):
                try:
                    s.send(rest[i:i + 1])
                except OSError:
                    pass
            i += 1

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def test_idle_and_slow_http_clients_do_not_starve_others(start_server, tmp_path):
    server = start_server(_identity_repo(tmp_path))
    _infer_http(server, 1)
    idle = _open_keepalive(server.port, IDLE_CONNECTIONS)
    slow = _Dribblers(server.port, 64)
    try:
        _infer_http(server, 20)
        # the idle connections still work: a second request on some of them
        for s in idle[::200]:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        slow.close()
        for s in idle:
            s.close()
    _infer_http(server, 5)


def _closed_by_server(sock):
    """True when the server closes `sock` (EOF or reset) within a bounded
    wait, without the client sending anything."""
    sock.settimeout(REQUEST_TIMEOUT * harness.timeout_scale())
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_connection_cap_and_idle_timeout_flags(start_server, tmp_path):
    """--http-max-connections=20: a 21st connection is served only once
    --http-connection-timeout has closed an idle one; every idle one is
    closed by the server, and a well-behaved client is served after."""
    server = start_server(_identity_repo(tmp_path),
                          ["--http-max-connections=20", "--http-connection-timeout=2"])
    idle = _open_keepalive(server.port, 20)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as extra:
            extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\n\r\n")
            extra.settimeout(REQUEST_TIMEOUT * harness.timeout_scale())
            assert extra.recv(4096).startswith(b"HTTP/1.1 200")
        readable, _, _ = select.select(idle, [], [], 0)
        closed = [s for s in readable if s.recv(1) == b""]
        assert closed, "a 21st connection was served while 20 were open"
        for s in idle:
            assert _closed_by_server(s), "an idle connection outlived the timeout"
    finally:
        for s in idle:
            s.close()
    _infer_http(server, 3)


def test_idle_grpc_connections_and_streams_do_not_starve_others(start_server, tmp_path):
    server = start_server(_identity_repo(tmp_path))
    port = server.grpc_port
    # half-open HTTP/2: the preface and nothing after it, or not even that
    raw = []
    for i in range(500):
        s = socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT)
        if i % 2:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        raw.append(s)
    # open streams that never send a request
    channels, calls, release = [], [], threading.Event()

    def never():
        release.wait()
        return
        yield  # a generator that ends when released

    for _ in range(64):
        ch = grpc.insecure_channel(server.grpc_url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        calls.append(stub.ModelStreamInfer(never()))
        channels.append(ch)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for _ in range(20):
            inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            inp.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
            res = client.infer("identity_fp32", [inp],
                               client_timeout=REQUEST_TIMEOUT * harness.timeout_scale())
            assert res.as_numpy("OUTPUT0").tolist() == [[0, 1, 2, 3]]
        client.close()
    finally:
        release.set()
        for call in calls:
            call.cancel()
        for ch in channels:
            ch.close()
        for s in raw:
            s.close()
    _infer_http(server, 5)


# An HTTP/2 client that sent its preface and SETTINGS and then went silent:
# it never acknowledges anything, as a peer behind a dead NAT entry.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_PING, _H2_GOAWAY = 6, 7


def _h2_frame_types_until_closed(sock):
    """The types of the HTTP/2 frames the server sends on sock until it
    closes the connection (bounded by REQUEST_TIMEOUT)."""
    sock.settimeout(REQUEST_TIMEOUT * harness.timeout_scale())
    data, types = b"", []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return types
        data += chunk
        while len(data) >= 9:
            length = int.from_bytes(data[:3], "big")
            if len(data) < 9 + length:
                break
            types.append(data[3])
            data = data[9 + length:]


@pytest.mark.parametrize("flags, frame", [
    # keepalive: the server pings the silent peer, and closes the connection
    # when the ping goes unacknowledged past the timeout
    (["--grpc-keepalive-time=300", "--grpc-keepalive-timeout=300",
      "--grpc-keepalive-permit-without-calls=true"], _H2_PING),
    # max connection age: the connection is told to go away, then closed
    # once the grace has passed
    (["--grpc-max-connection-age=300", "--grpc-max-connection-age-grace=300"],
     _H2_GOAWAY),
], ids=["keepalive", "max-connection-age"])
def test_grpc_closes_silent_connections(start_server, tmp_path, flags, frame):
    server = start_server(_identity_repo(tmp_path), flags)
    silent = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=REQUEST_TIMEOUT)
        s.sendall(_H2_PREFACE)
        silent.append(s)
    try:
        for s in silent:
            types = _h2_frame_types_until_closed(s)
            assert frame in types, f"frames seen before the close: {types}"
        client = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        res = client.infer("identity_fp32", [inp],
                           client_timeout=REQUEST_TIMEOUT * harness.timeout_scale())
        assert res.as_numpy("OUTPUT0").tolist() == [[1, 1, 1, 1]]
        client.close()
    finally:
        for s in silent:
            s.close()


def test_kill_9_under_load_then_restart_on_the_same_ports(start_server, tmp_path):
    """SIGKILL while HTTP and gRPC clients are mid-request and the queue
    store is being written; the next start on the same ports and the same
    --queue-dir is ready at once (no socket or file of the dead process
    blocks it) and serves."""
    repo = _identity_repo(tmp_path)
    ports = [_free_port() for _ in range(3)]
    args = [f"--http-port={ports[0]}", f"--grpc-port={ports[1]}",
            f"--metrics-port={ports[2]}", "--queue-service=svc",
            f"--queue-dir={tmp_path / 'qdir'}"]
    server = start_server(repo, args)
    stop = threading.Event()
    served = {"http": 0, "grpc": 0, "queue": 0}

    def http_load():
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                            "data": [1, 2]}]}
        with requests.Session() as s:
            while not stop.is_set():
                try:
                    s.post(server.url + "/v2/models/identity_fp32/infer", json=body, timeout=5)
                    served["http"] += 1
                except requests.RequestException:
                    return

    def grpc_load():
        client = grpcclient.InferenceServerClient(server.grpc_url)
        inp = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(np.ones((1, 2), np.float32))
        while not stop.is_set():
            try:
                client.infer("identity_fp32", [inp], client_timeout=5)
                served["grpc"] += 1
            except Exception:  # the server is gone: tritonclient's own errors
                return

    def queue_load():
        q = qu.RawQueue(server.url + "/api/predict/svc", token="")
        while not stop.is_set():
            try:
                q.put(b"x" * 100, timeout=5)
                served["queue"] += 1
            except requests.RequestException:
                return

    threads = [threading.Thread(target=f) for f in (http_load, http_load, grpc_load, queue_load)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30 * harness.timeout_scale()
    while min(served.values()) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert min(served.values()) >= 5, served
    server.kill()
    server.returncode = -9  # expected: not a crash
    stop.set()
    for t in threads:
        t.join()

    again = start_server(repo, args)
    assert again.port == ports[0] and again.grpc_port == ports[1]
    _infer_http(again, 3)
    client = grpcclient.InferenceServerClient(again.grpc_url)
    assert client.is_model_ready("identity_fp32")
    client.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
