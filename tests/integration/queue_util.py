"""Helpers for the queue service tests (docs/queue.md): a hand-written
protobuf codec for the queue messages (no protobuf package needed), a raw
queue client on requests and websocket-client, a Redis server on a free
loopback port, and the arguments of a queue server.

The real eas-prediction SDK pins protobuf<=3.20.3, which the rest of the
suite cannot share, so `make venv` installs it with that protobuf into
.venv/eas-sdk, and SDK code runs in a child interpreter that puts that
folder first on its path (sdk_python_env())."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import requests

import harness

TOKEN = "secret"
MAX_PAYLOAD = 1024
MAX_LENGTH = 50
UID_HEADER = "X-EAS-QueueService-Redis-Uid"
GID_HEADER = "X-EAS-QueueService-Redis-Gid"
PROTOBUF = "application/vnd.google.protobuf"

SDK_DIR = harness.ROOT / ".venv" / "eas-sdk"

# ---- protobuf (proto/queueservice.proto) ---------------------------------


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf, pos):
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf):
    """(field number, wire type, value) of each field of a message."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield field, wire, value


def _map_entry(buf):
    key = value = ""
    for f, _, v in _fields(buf):
        if f == 1:
            key = v.decode()
        elif f == 2:
            value = v.decode()
    return key, value


def decode_frame(buf):
    """DataFrameProto -> {"index", "tags", "data", "message"}."""
    frame = {"index": 0, "tags": {}, "data": b"", "message": ""}
    for f, _, v in _fields(buf):
        if f == 1:
            frame["index"] = v
        elif f == 2:
            k, val = _map_entry(v)
            frame["tags"][k] = val
        elif f == 3:
            frame["data"] = bytes(v)
        elif f == 4:
            frame["message"] = v.decode()
    return frame


def decode_list(buf):
    """DataFrameListProto -> [frame, ...] (an empty body is [])."""
    return [decode_frame(v) for f, _, v in _fields(buf) if f == 1]


def decode_attributes(buf):
    return dict(_map_entry(v) for f, _, v in _fields(buf) if f == 1)


def encode_frame(index, tags, data):
    out = b"\x08" + _varint(index)
    for k, v in tags.items():
        entry = b"\x0a" + _varint(len(k.encode())) + k.encode() + \
            b"\x12" + _varint(len(v.encode())) + v.encode()
        out += b"\x12" + _varint(len(entry)) + entry
    return out + b"\x1a" + _varint(len(data)) + data


# ---- a raw client ----------------------------------------------------------


class RawQueue:
    """The queue API as the SDK sends it, over requests and
    websocket-client (no SDK)."""

    def __init__(self, base, token=TOKEN, uid="raw-uid", gid="eas"):
        self.base = base  # http://host:port/api/predict/svc[/sink]
        self.s = requests.Session()
        self.s.headers.update({"Authorization": token, UID_HEADER: uid,
                               GID_HEADER: gid})

    def put(self, data, tags=None, **kw):
        return self.s.post(self.base, params=tags or {}, data=data, **kw)

    def get(self, index=0, length=1, timeout="0s", auto_delete=False,
            request_id=None, tags=None, protobuf=True, **kw):
        q = {"_index_": index, "_length_": length, "_timeout_": timeout,
             "_raw_": "false", "_auto_delete_": str(auto_delete).lower()}
        if request_id:
            q["requestId"] = request_id
        q.update(tags or {})
        hdr = {"Accept": PROTOBUF} if protobuf else {}
        r = self.s.get(self.base, params=q, headers=hdr, **kw)
        assert r.status_code == 200, (r.status_code, r.text)
        return decode_list(r.content) if protobuf else r.json()

    def attributes(self):
        r = self.s.get(self.base, params={"_attrs_": "true"})
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def length(self):
        return int(self.attributes()["stream.length"])

    def delete(self, indexes, **kw):
        return self.s.delete(self.base, params={
            "_indexes_": ",".join(str(i) for i in indexes)}, **kw)

    def commit(self, indexes, **kw):
        return self.s.put(self.base, params={
            "_indexes_": ",".join(str(i) for i in indexes)}, data=b"", **kw)

    def truncate(self, before):
        return self.s.delete(self.base, params={"_index_": before,
                                                "_trunc_": "true"})

    def search(self, index):
        return self.s.get(self.base, params={"_search_": "true",
                                             "_index_": index})

    def watch(self, index=0, window=5, auto_commit=False, index_only=False,
              tags=None, timeout=None):
        import urllib.parse
        import websocket
        q = {"_watch_": "true", "_index_": index, "_window_": window,
             "_index_only_": str(index_only).lower(),
             "_auto_commit_": str(auto_commit).lower()}
        q.update(tags or {})
        url = self.base.replace("http://", "ws://") + "?" + \
            urllib.parse.urlencode(q)
        hdrs = [f"{k}: {v}" for k, v in self.s.headers.items()
                if k in ("Authorization", UID_HEADER, GID_HEADER)]
        hdrs.append(f"Accept: {PROTOBUF}")
        if timeout is None:
            timeout = 5 * harness.timeout_scale()
        return Watch(websocket.create_connection(url, header=hdrs,
                                                 timeout=timeout))


class Watch:
    def __init__(self, ws):
        self.ws = ws
        self.pending = []  # frames read while waiting for a pong

    def next(self, timeout=None):
        """The next pushed frame, decoded; None on timeout (default 5 s
        times harness.timeout_scale()). Fails on a text or close frame."""
        import websocket
        if timeout is None:
            timeout = 5 * harness.timeout_scale()
        if self.pending:
            return self.pending.pop(0)
        self.ws.settimeout(timeout)
        try:
            opcode, data = self.ws.recv_data(control_frame=True)
        except websocket.WebSocketTimeoutException:
            return None
        assert opcode == websocket.ABNF.OPCODE_BINARY, (opcode, data)
        return decode_frame(data)

    def ping(self, payload=b"ping", timeout=None):
        """Sends a ping; returns the pong's payload."""
        import websocket
        self.ws.ping(payload)
        self.ws.settimeout(timeout or 5 * harness.timeout_scale())
        while True:
            opcode, data = self.ws.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_BINARY:
                self.pending.append(decode_frame(data))
                continue
            assert opcode == websocket.ABNF.OPCODE_PONG, (opcode, data)
            return data

    def drop(self):
        """Leaves as the SDK's Watcher.close() does: no close frame."""
        try:
            self.ws.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.ws.sock.close()


# ---- servers ---------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on a free loopback port, its files in a temp dir."""

    def __init__(self, args=()):
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.dir = tempfile.mkdtemp(prefix="osprey-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", self.dir, "--save", "", "--appendonly", "no", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def flush(self):
        with socket.create_connection(("127.0.0.1", self.port), 2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_store_available():
    """Whether this build has the Redis store (the qredis work merged)."""
    out = subprocess.run([harness.osprey_bin(), "--help"],
                         capture_output=True, text=True).stdout
    return "queue-store" in out and _redis_linked()


def _redis_linked():
    try:
        data = pathlib.Path(harness.osprey_bin()).read_bytes()
    except OSError:
        return False
    return b"hiredis" in data or b"redisConnect" in data


def empty_repo(tmp_path):
    repo = pathlib.Path(tmp_path) / "empty_repo"
    repo.mkdir(exist_ok=True)
    return repo


def queue_args(store, redis=None, extra=()):
    """Flags of a queue server for `store` ("embedded" or "redis")."""
    args = [f"--queue-token={TOKEN}",
            f"--queue-max-payload-bytes={MAX_PAYLOAD}",
            f"--queue-max-length={MAX_LENGTH}"]
    if store == "redis":
        args.append(f"--queue-store={redis.url}")
    return args + list(extra)


SLOW_MS = 3000  # long enough to kill -9 a replica while its worker runs it


def slow_repo(path):
    """A repository with `slow`: the identity backend, each execute taking
    SLOW_MS (its execute_delay_ms parameter)."""
    repo = harness.make_repo(path, [])
    harness.write_model(repo, "slow", harness.identity_config(
        "slow", "TYPE_FP32", [-1],
        extra='parameters [ { key: "execute_delay_ms" value: { string_value: '
              f'"{SLOW_MS}" }} }} ]\n'))
    return repo


def slow_request(rid):
    return json.dumps({"id": rid, "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]},
    ]}).encode()


def wait_for(what, cond, timeout):
    """harness.wait_for with the queue tests' argument order."""
    return harness.wait_for(cond, what, timeout, interval=0.05)


def sdk_python_env():
    """Environment of a child interpreter that imports the real SDK."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SDK_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    return env


def require_sdk():
    if not (SDK_DIR / "eas_prediction").is_dir():
        pytest.fail(f"the eas-prediction SDK is not installed in {SDK_DIR}: "
                    "run `make venv`", pytrace=False)
