"""Osprey's python stub: runs one instance of a Triton `model.py`.

Started by the server (backends/python/python_stub.c) as
    <python> osprey_python_stub.py
with fd 3 a Unix stream socket to the server (the control channel) and fd 4
a memfd holding the shared-memory region that carries tensors. Frames on
the socket are an 8-byte header (u32 type, u32 length, little-endian) and a
payload; python_protocol.h documents each type. The stub answers one frame
at a time, so the server never has two requests in flight to one stub.
"""

import importlib.util
import json
import mmap
import os
import socket
import struct
import sys
import threading
import traceback

import numpy as np

import triton_python_backend_utils as pb_utils

INIT, EXEC, FINALIZE, AUTO_COMPLETE = 1, 2, 3, 4
OK, ERROR, RESULT, LOG = 10, 11, 12, 13
HEADER = struct.Struct("<II")
ALIGN = 64

control = socket.socket(fileno=3)
send_lock = threading.Lock()


def send_frame(kind, payload=b""):
    with send_lock:
        control.sendall(HEADER.pack(kind, len(payload)) + payload)


def recv_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = control.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k
    return buf


def log_to_server(level, message):
    send_frame(LOG, struct.pack("<I", level) + message.encode("utf-8", "replace"))


class Region:
    """The shared-memory region (fd 4); grows by whole growth steps."""

    def __init__(self, growth, limit):
        self.fd = 4
        self.growth = growth
        self.limit = limit
        self.size = 0
        self.map = None
        self.remap(os.fstat(self.fd).st_size)

    def remap(self, size):
        if size > self.size:
            # Old maps may still be viewed by arrays a model kept; they are
            # dropped, not closed, and go when the last view goes.
            self.map = mmap.mmap(self.fd, size)
            self.size = size

    def reserve(self, end):
        if end <= self.size:
            return
        new_size = max(end, self.size + self.growth)
        new_size = (new_size + self.growth - 1) // self.growth * self.growth
        if new_size > self.limit:
            raise pb_utils.TritonModelException(
                "outputs need %d bytes of shared memory, more than the limit of %d "
                "(shm-region-max-byte-size)" % (end, self.limit))
        os.ftruncate(self.fd, new_size)
        self.remap(new_size)


def relative_frame_file(path):
    root = os.path.dirname(MODEL_REPOSITORY) if MODEL_REPOSITORY else ""
    if root and path.startswith(root + os.sep):
        return path[len(root) + 1:]
    return os.path.basename(path)


def describe_exception(exc):
    """'<Type>: <text>\\n\\nAt:\\n  <file>(<line>): <function>\\n' with the
    innermost frame first, as Triton prints a Python error; files relative
    to the model repository."""
    frames = traceback.extract_tb(exc.__traceback__)
    while frames and frames[0].filename == __file__:
        frames = frames[1:]
    text = "%s: %s" % (type(exc).__name__, exc)
    if frames:
        text += "\n\nAt:\n" + "".join(
            "  %s(%d): %s\n" % (relative_frame_file(f.filename), f.lineno, f.name)
            for f in reversed(frames))
    return text


MODEL_REPOSITORY = ""
model = None
model_config = {}
instance_name = ""
region = None


def import_model(model_file, model_repository):
    """The TritonPythonModel class of model.py."""
    global MODEL_REPOSITORY
    MODEL_REPOSITORY = model_repository
    pb_utils._log_sink = log_to_server
    sys.path.insert(0, os.path.dirname(model_file))
    spec = importlib.util.spec_from_file_location("model", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel


def initialize(payload):
    global model, model_config, instance_name, region
    init = json.loads(payload)
    args = init["args"]
    instance_name = args["model_instance_name"]
    model_config = json.loads(args["model_config"])
    region = Region(init["growth"], init["region_max"])
    model_class = import_model(init["model_file"], args.get("model_repository", ""))
    model = model_class()
    if hasattr(model, "initialize"):
        model.initialize(args)


def auto_complete(payload):
    """Runs TritonPythonModel.auto_complete_config and answers what it
    added, one tab-separated line each (python_complete.c reads them):
    max_batch_size N, dynamic_batching, decoupled 0|1,
    input NAME TYPE OPTIONAL DIMS, output NAME TYPE DIMS."""
    request = json.loads(payload)
    model_class = import_model(request["model_file"], request["model_repository"])
    if not hasattr(model_class, "auto_complete_config"):
        return b""
    before = request["config"]
    had_batching = "dynamic_batching" in before
    config = pb_utils.ModelConfig(json.loads(json.dumps(before)))
    model_class.auto_complete_config(config)
    after = config.as_dict()
    lines = ["max_batch_size\t%d" % int(after.get("max_batch_size", 0))]
    if "dynamic_batching" in after and not had_batching:
        lines.append("dynamic_batching")
    policy = after.get("model_transaction_policy", {})
    lines.append("decoupled\t%d" % bool(policy.get("decoupled", False)))
    for kind in ("input", "output"):
        for io in after.get(kind, []):
            if not io.get("_added"):
                continue
            dims = ",".join(str(int(d)) for d in io["dims"])
            fields = [kind, io["name"], io["data_type"]]
            if kind == "input":
                fields.append("1" if io.get("optional") else "0")
            lines.append("\t".join(fields + [dims]))
    return ("\n".join(lines) + "\n").encode("utf-8")


def input_tensor(desc):
    name, dtype, dims, offset, nbytes = desc
    if dtype == "BYTES":
        raw = np.frombuffer(region.map, dtype=np.uint8, count=nbytes, offset=offset)
        array = pb_utils.deserialize_bytes_tensor(raw).reshape(dims)
    else:
        np_type = pb_utils.triton_to_numpy_type(dtype)
        count = nbytes // np.dtype(np_type).itemsize
        array = np.frombuffer(region.map, dtype=np_type, count=count,
                              offset=offset).reshape(dims)
    return pb_utils.Tensor(name, array, dtype)


def write_outputs(response, wanted, cursor, out):
    """Appends one response's outputs to `out` (bytes parts), writing each
    tensor into the region at `cursor`; returns the new cursor."""
    tensors = [t for t in response.output_tensors() if t.name() in wanted]
    out.append(struct.pack("<II", 0, len(tensors)))
    for tensor in tensors:
        array = tensor.as_numpy()
        dtype = tensor.triton_dtype()
        if dtype == "BYTES":
            source = pb_utils.serialize_byte_tensor(array)
        else:
            source = np.ascontiguousarray(array)
        nbytes = source.nbytes
        region.reserve(cursor + nbytes)
        if nbytes:
            region.map[cursor:cursor + nbytes] = memoryview(source).cast("B")
        name = tensor.name().encode("utf-8")
        dt = dtype.encode("ascii")
        shape = array.shape
        out.append(struct.pack("<H", len(name)) + name + struct.pack("<B", len(dt)) + dt +
                   struct.pack("<B%dq" % len(shape), len(shape), *shape) +
                   struct.pack("<QQ", cursor, nbytes))
        cursor = (cursor + nbytes + ALIGN - 1) // ALIGN * ALIGN
    return cursor


def execute(payload):
    batch = json.loads(payload)
    region.remap(batch["region"])
    requests = []
    for r in batch["requests"]:
        request = pb_utils.InferenceRequest(
            inputs=[input_tensor(d) for d in r["inputs"]],
            requested_output_names=r["outputs"], request_id=r.get("id", ""),
            correlation_id=r.get("correlation_id", 0),
            parameters=r.get("parameters", "{}"))
        requests.append(request)
    try:
        responses = model.execute(requests)
    except Exception as exc:
        return ERROR, ("Failed to process the request(s) for model '%s', message: %s"
                       % (instance_name, describe_exception(exc))).encode("utf-8", "replace")
    if responses is None:
        responses = [r._sent_response for r in requests]
    if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
        count = len(responses) if isinstance(responses, (list, tuple)) else 0
        return ERROR, ("Number of InferenceResponse objects do not match the number "
                       "of InferenceRequest objects. InferenceRequest(s) size is:%d, "
                       "and InferenceResponse(s) size is:%d\n"
                       % (len(requests), count)).encode("utf-8")
    out = []
    cursor = batch["out_offset"]
    try:
        for request, response in zip(requests, responses):
            if response is None or not isinstance(response, pb_utils.InferenceResponse):
                raise pb_utils.TritonModelException(
                    "Expected an InferenceResponse, got " + type(response).__name__)
            if response.has_error():
                err = response.error()
                message = err.message().encode("utf-8", "replace")
                out.append(struct.pack("<III", 1, err.code(), len(message)) + message)
            else:
                cursor = write_outputs(response, set(request.requested_output_names()),
                                       cursor, out)
    except Exception as exc:
        return ERROR, ("Failed to process the request(s) for model '%s', message: %s"
                       % (instance_name, describe_exception(exc))).encode("utf-8", "replace")
    return RESULT, struct.pack("<QI", region.size, len(responses)) + b"".join(out)


def main():
    while True:
        try:
            kind, length = HEADER.unpack(recv_exact(HEADER.size))
            payload = bytes(recv_exact(length))
        except (EOFError, ConnectionError):
            return 0
        if kind == INIT:
            try:
                initialize(payload)
                send_frame(OK)
            except Exception as exc:
                send_frame(ERROR, describe_exception(exc).encode("utf-8", "replace"))
        elif kind == AUTO_COMPLETE:
            try:
                send_frame(OK, auto_complete(payload))
            except Exception as exc:
                send_frame(ERROR, describe_exception(exc).encode("utf-8", "replace"))
            return 0
        elif kind == EXEC:
            send_frame(*execute(payload))
        elif kind == FINALIZE:
            try:
                if model is not None and hasattr(model, "finalize"):
                    model.finalize()
            except Exception as exc:
                log_to_server(2, "finalize of '%s' failed: %s"
                              % (instance_name, describe_exception(exc)))
            send_frame(OK)
            return 0
        else:
            send_frame(ERROR, b"unknown frame type %d" % kind)


if __name__ == "__main__":
    sys.exit(main())
