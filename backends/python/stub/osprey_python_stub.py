"""Osprey's python stub: runs one instance of a Triton `model.py`.

Started by the server (backends/python/python_stub.c) as
    <python> osprey_python_stub.py
with fd 3 a Unix stream socket to the server (the control channel), fd 4
a memfd holding the shared-memory region that carries tensors and, for a
model that is not decoupled, fd 5 an eventfd: its doorbell. Frames on the
socket are an 8-byte header (u32 type, u32 length, little-endian) and a
payload; python_protocol.h documents each type. The stub answers one frame
at a time, so the server never has two requests in flight to one stub.

A decoupled model's stub reads the channel on a thread of its own once
initialize has returned (DecoupledChannel): execute runs on the main thread
while the model's threads send responses and make BLS calls, each call
waiting for the answers that name it. A model that is not decoupled has no
such thread, which would cost a hop per request: whoever waits reads the
channel (SharedChannel), the main loop for its next EXEC, a thread for its
BLS call's answer; the server reads its channel between requests only when
the doorbell rings (python_watch.h).

GPU tensors (pb_utils.Tensor.from_dlpack of a CUDA tensor) never enter the
region: their descriptors carry the CUDA IPC handle of their allocation
(osprey_cuda), the server copies them from there, and the stub keeps each
one it lent alive until the server's RELEASE names its lease.
"""

import asyncio
import atexit
import collections
import functools
import importlib.util
import inspect
import json
import mmap
import itertools
import os
import queue
import resource
import socket
import struct
import sys
import threading
import traceback

import numpy as np

import osprey_cuda
import triton_python_backend_utils as pb_utils

INIT, EXEC, FINALIZE, AUTO_COMPLETE, BLS_RESULT, CANCEL, BLS_ANSWER = 1, 2, 3, 4, 5, 6, 7
RELEASE = 8  # server -> stub: lent GPU tensors may go
CALL_ANSWER = 9  # server -> stub: a METRIC or IS_CANCELLED frame's answer
OK, ERROR, RESULT, LOG, BLS, RESPONSE, BLS_CALL, BLS_CANCEL = 10, 11, 12, 13, 14, 15, 16, 17
METRIC, IS_CANCELLED = 18, 19
HEADER = struct.Struct("<II")
ALIGN = 64
# The largest frame the server takes from this stub (INIT's frame_max:
# shm-region-max-byte-size plus 16 MiB of descriptors).
MAX_FRAME = 16 << 20

control = socket.socket(fileno=3)
send_lock = threading.Lock()
# A model that is not decoupled: the eventfd (fd 5) the stub rings for each
# frame it sends while the server is not reading (python_watch.h), and
# whether the server reads now: from an INIT, EXEC or FINALIZE to its
# answer. Both under send_lock.
doorbell = None
server_reading = False
RING = (1).to_bytes(8, "little")


def ring_first():
    """send_lock held, a frame about to go: whether it goes while the
    server is not reading, so that its header goes alone, then the
    doorbell rings, then the rest. The watcher woken by the ring then
    finds the frame begun and reads it whole; ringing before the first
    byte could let it find nothing, and ringing after the last would
    never come for a frame larger than the socket's buffer."""
    return doorbell is not None and not server_reading


def send_frame(kind, payload=b"", answer=False):
    """One frame; `answer`: it answers the INIT, EXEC or FINALIZE the
    server waits on (the server stops reading after it)."""
    global server_reading
    header = HEADER.pack(kind, len(payload))
    with send_lock:
        if not answer and ring_first():
            control.sendall(header)
            os.write(doorbell, RING)
            control.sendall(payload)
        else:
            control.sendall(header + payload)
        if answer:
            server_reading = False


def send_parts(kind, parts):
    """One frame from several buffers (bytes, or C-contiguous arrays or
    memoryviews of tensors), sent without joining them: large tensors are
    not copied on the way."""
    views = [memoryview(p) for p in parts]
    views = [v.cast("B") for v in views if v.nbytes]
    total = sum(v.nbytes for v in views)
    if len(views) > 256:  # far below the kernel's iovec limit
        views = [memoryview(b"".join(views))]
    header = HEADER.pack(kind, total)
    with send_lock:
        if ring_first():
            control.sendall(header)
            os.write(doorbell, RING)
        else:
            views.insert(0, memoryview(header))
        while views:
            sent = control.sendmsg(views)
            while sent:
                if sent >= views[0].nbytes:
                    sent -= views.pop(0).nbytes
                else:
                    views[0], sent = views[0][sent:], 0


def start_serving():
    """An INIT, EXEC or FINALIZE came: the server reads until its answer.
    (No lock: a thread that still sees False only rings once too often.)"""
    global server_reading
    server_reading = True


pending = b""  # bytes received past the last frame read


def read_frame():
    """The next frame on the channel as (type, payload). One recv usually
    brings a whole frame (the server sends each with one sendmsg); what
    comes after it waits in `pending` for the next call. A large frame is
    read straight into a bytearray of its payload's size (the payload then
    is that bytearray, which arrays may view without a copy)."""
    global pending
    data = pending
    while len(data) < HEADER.size:
        chunk = control.recv(65536)
        if not chunk:
            raise EOFError
        data += chunk
    kind, length = HEADER.unpack_from(data)
    end = HEADER.size + length
    if len(data) >= end:
        pending = data[end:]
        return kind, data[HEADER.size:end]
    payload = bytearray(length)
    got = len(data) - HEADER.size
    payload[:got] = data[HEADER.size:]
    view = memoryview(payload)
    while got < length:
        k = control.recv_into(view[got:], length - got)
        if k == 0:
            raise EOFError
        got += k
    pending = b""
    return kind, payload


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
    # The stub's own frames and the event loop's are not the model's.
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(f.filename) not in (STUB_DIR, ASYNCIO_DIR)]
    text = "%s: %s" % (type(exc).__name__, exc)
    if frames:
        text += "\n\nAt:\n" + "".join(
            "  %s(%d): %s\n" % (relative_frame_file(f.filename), f.lineno, f.name)
            for f in reversed(frames))
    return text


STUB_DIR = os.path.dirname(os.path.abspath(__file__))
ASYNCIO_DIR = os.path.dirname(os.path.abspath(asyncio.__file__))
MODEL_REPOSITORY = ""
out_of_memory_frame = b""
model = None
instance_name = ""
region = None
decoupled = False
# The output_name of each sequence_batching state: a response tensor of that
# name is the sequence's next state (the server keeps it), wanted whether or
# not the client asked for it.
state_outputs = frozenset()
# A decoupled model's requests not yet ended (final flag), by their
# EXEC's batch number: a CANCEL names one of them.
open_requests = {}


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
    global model, instance_name, region, decoupled, state_outputs
    init = json.loads(payload)
    args = init["args"]
    config = json.loads(args.get("model_config", "{}"))
    decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
    state_outputs = frozenset(
        s["output_name"] for s in config.get("sequence_batching", {}).get("state", []))
    instance_name = args["model_instance_name"]
    region = Region(init["growth"], init["region_max"])
    global MAX_FRAME, doorbell
    MAX_FRAME = init.get("frame_max", MAX_FRAME)
    if init.get("doorbell"):
        doorbell = 5
    global out_of_memory_frame
    message = ("instance '%s' ran out of memory in execute; its stub exits"
               % instance_name).encode("utf-8")
    out_of_memory_frame = HEADER.pack(LOG, 4 + len(message)) + struct.pack("<I", 2) + message
    if init.get("memory_limit"):
        resource.setrlimit(resource.RLIMIT_DATA, (init["memory_limit"],) * 2)
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


U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
EXEC_HEAD = struct.Struct("<QQQI")  # region size, out offset, batch, count
RESULT_HEAD = struct.Struct("<QI")  # region size, response count
OUTPUTS_HEAD = struct.Struct("<II")  # kind 0 (outputs), count
ERROR_HEAD = struct.Struct("<III")  # kind 1 (error), code, length
# Per rank: dims, offset and byte size of a tensor descriptor.
DIMS = [struct.Struct("<%dqQQ" % rank) for rank in range(17)]  # OSP_MAX_DIMS
NUMPY_TYPES = {name: np.dtype(t) for name, t in pb_utils._TRITON_TO_NUMPY.items()
               if t is not np.object_}
# name and datatype part of a descriptor, by (name, datatype)
descriptor_heads = {}


RANK_ON_GPU = 0x80  # python_protocol.h: a GPU tensor's rank byte
GPU_REF = struct.Struct("<iQ")  # device id, lease; the 64-byte IPC handle follows
IPC_HANDLE_BYTES = 64


def read_any_descriptor(buf, pos):
    """A tensor descriptor of `buf` at `pos` (python_protocol.h): returns
    (name, datatype, dims, offset, byte size, gpu, next pos), gpu None for
    a tensor in the region or the frame, else (device id, IPC handle) of
    its allocation, which offset counts into."""
    (n,) = U16.unpack_from(buf, pos)
    pos += 2
    name = buf[pos:pos + n].decode("utf-8")
    pos += n
    n = buf[pos]
    dtype = buf[pos + 1:pos + 1 + n].decode("ascii")
    pos += 1 + n
    rank = buf[pos] & ~RANK_ON_GPU
    fields = DIMS[rank].unpack_from(buf, pos + 1)
    gpu, end = None, pos + 17 + 8 * rank
    if buf[pos] & RANK_ON_GPU:
        device, _ = GPU_REF.unpack_from(buf, end)
        end += GPU_REF.size
        gpu, end = (device, bytes(buf[end:end + IPC_HANDLE_BYTES])), end + IPC_HANDLE_BYTES
    return name, dtype, fields[:rank], fields[rank], fields[rank + 1], gpu, end


def read_descriptor(buf, pos):
    """A descriptor of a tensor in the region or the frame (what the
    server's answers carry): (name, datatype, dims, offset, byte size,
    next pos)."""
    name, dtype, dims, offset, nbytes, gpu, pos = read_any_descriptor(buf, pos)
    if gpu is not None:
        raise pb_utils.TritonModelException(
            "tensor '%s' came in GPU memory where only host tensors travel" % name)
    return name, dtype, dims, offset, nbytes, pos


def region_array(dtype, dims, offset, nbytes):
    """A numpy array viewing bytes [offset, offset + nbytes) of the region
    (no copy); BYTES tensors are decoded into an object array."""
    if dtype == "BYTES":
        raw = np.ndarray((nbytes,), np.uint8, region.map, offset)
        return pb_utils.deserialize_bytes_tensor(raw).reshape(dims)
    return np.ndarray(dims, NUMPY_TYPES[dtype], region.map, offset)


def tensor_source(tensor):
    """(bytes of the tensor as the server reads them, datatype, shape) of a
    tensor in host memory."""
    array = tensor._data
    dtype = tensor._triton_dtype
    if dtype == "BYTES":
        source = pb_utils.serialize_byte_tensor(array)
    elif array.flags.c_contiguous:
        source = array
    else:
        source = np.ascontiguousarray(array)
    return source, dtype, array.shape


def descriptor_head(name, dtype):
    """The name and datatype part of a descriptor."""
    head = descriptor_heads.get((name, dtype))
    if head is None:
        raw_name, raw_type = name.encode("utf-8"), dtype.encode("ascii")
        head = U16.pack(len(raw_name)) + raw_name + U8.pack(len(raw_type)) + raw_type
        if len(descriptor_heads) < 1024:
            descriptor_heads[(name, dtype)] = head
    return head


def describe_tensor(name, dtype, shape, offset, nbytes):
    """A tensor's descriptor (python_protocol.h)."""
    rank = len(shape)
    return descriptor_head(name, dtype) + U8.pack(rank) + DIMS[rank].pack(*shape, offset, nbytes)


# GPU tensors lent to the server (a RESULT's or RESPONSE's outputs), by
# lease: each stays alive here until the server's RELEASE names its lease,
# as the server reads it from this process's GPU memory until then.
lent = {}
lent_lock = threading.Lock()
next_lease = itertools.count(1)


def describe_gpu_tensor(tensor, leased):
    """The descriptor of a GPU tensor (pb_utils.Tensor.from_dlpack): the
    CUDA IPC handle of its allocation and its offset there; nothing of it
    travels. With `leased` (a list), the tensor is lent under a new lease,
    appended to it; without, the lease is 0 (a BLS input, which its call
    holds until the first answer)."""
    handle, offset = shareable(tensor)
    memory = tensor._gpu
    lease = 0
    if leased is not None:
        with lent_lock:
            lease = next(next_lease)
            lent[lease] = tensor
        leased.append(lease)
    shape = tensor._shape
    rank = len(shape)
    return (descriptor_head(tensor._name, tensor._triton_dtype) +
            U8.pack(rank | RANK_ON_GPU) +
            DIMS[rank].pack(*shape, offset, tensor._nbytes()) +
            GPU_REF.pack(memory.device, lease) + handle)


def shareable(tensor):
    """(IPC handle, offset) that reaches a GPU tensor from the server,
    kept on the tensor for its later sends. Memory CUDA cannot export (an
    input the server lent, handed straight back; a stream-ordered pool's)
    is first copied once, on the GPU, into an allocation of the stub's
    that the tensor then keeps."""
    if tensor._exported is not None:
        return tensor._exported[:2]
    memory = tensor._gpu
    try:
        try:
            handle, offset = osprey_cuda.ipc_export(memory.device, memory.ptr)
            tensor._exported = (handle, offset, None)
        except osprey_cuda.CudaError:
            nbytes = tensor._nbytes()
            copy = osprey_cuda.Allocation(memory.device, nbytes)
            osprey_cuda.copy(memory.device, copy.ptr, memory.ptr, nbytes,
                             osprey_cuda.MEMCPY_DEVICE_TO_DEVICE)
            handle, offset = osprey_cuda.ipc_export(memory.device, copy.ptr)
            tensor._exported = (handle, offset, copy)
    except osprey_cuda.CudaError as exc:
        raise pb_utils.TritonModelException(
            "GPU tensor '%s' cannot be shared with the server: %s" % (tensor._name, exc))
    return tensor._exported[:2]


def release(leases):
    """The server is done with these lent tensors (a RELEASE frame's, or
    ones of an answer that never went)."""
    with lent_lock:
        for lease in leases:
            lent.pop(lease, None)


def read_release(payload):
    """A RELEASE frame: u32 count, u64 leases."""
    (count,) = U32.unpack_from(payload, 0)
    release(struct.unpack_from("<%dQ" % count, payload, 4))


def inline_tensor(tensor, cursor, leased=None):
    """(descriptor, bytes) of a tensor that travels inline at `cursor` of a
    frame's data; a GPU tensor's bytes stay in GPU memory (None)."""
    if tensor._gpu is not None:
        return describe_gpu_tensor(tensor, leased), None
    source, dtype, shape = tensor_source(tensor)
    return (describe_tensor(tensor._name, dtype, shape, cursor, source.nbytes),
            memoryview(source).cast("B"))


# The server's allocations this stub mapped (GPU inputs), by IPC handle:
# (device, first address). Kept open for later batches (the inputs of a
# GPU instance come from a few pool regions) and closed at finalize.
opened = {}


def gpu_input(name, dtype, dims, offset, nbytes, gpu, copy):
    """A GPU tensor over an input the server handed over in GPU memory
    (FORCE_CPU_ONLY_INPUT_TENSORS "no"), valid while execute runs; with
    `copy`, a copy in an allocation of the stub's own (a decoupled model's
    threads may read it after execute returned)."""
    device, handle = gpu
    try:
        base = opened.get(handle)
        if base is None:
            base = opened[handle] = (device, osprey_cuda.ipc_open(device, handle))
        ptr = base[1] + offset
        memory = pb_utils.GpuMemory(ptr, device, None)
        if copy:
            owned = osprey_cuda.Allocation(device, nbytes)
            osprey_cuda.copy(device, owned.ptr, ptr, nbytes,
                             osprey_cuda.MEMCPY_DEVICE_TO_DEVICE)
            memory = pb_utils.GpuMemory(owned.ptr, device, owned)
    except osprey_cuda.CudaError as exc:
        raise pb_utils.TritonModelException(
            "input '%s' is in GPU memory the stub cannot reach: %s" % (name, exc))
    return pb_utils.Tensor._on_gpu(name, dtype, dims, memory)


def close_opened():
    """Unmaps the server's allocations (finalize, or the stub's exit)."""
    while opened:
        _, (device, ptr) = opened.popitem()
        try:
            osprey_cuda.ipc_close(device, ptr)
        except osprey_cuda.CudaError:
            pass


atexit.register(close_opened)


def write_tensor(tensor, cursor, leased=None):
    """Writes one tensor into the region at `cursor`; returns its descriptor
    and the next aligned cursor. A GPU tensor stays where it is: its
    descriptor names it (lent under a lease appended to `leased`, when
    given)."""
    if tensor._gpu is not None:
        return describe_gpu_tensor(tensor, leased), cursor
    source, dtype, shape = tensor_source(tensor)
    nbytes = source.nbytes
    end = cursor + nbytes
    if end > region.size:
        region.reserve(end)
    if nbytes:
        region.map[cursor:end] = source.data.cast("B")
    desc = describe_tensor(tensor._name, dtype, shape, cursor, nbytes)
    return desc, (end + ALIGN - 1) & ~(ALIGN - 1)


def send_decoupled_response(request, response, flags):
    """A decoupled model's response (its response sender's send), from any
    thread: one RESPONSE frame with the tensors inline, since the region
    may be in use by the thread running execute."""
    final = 1 if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL else 0
    parts, data, cursor, leased = [], [], 0, []
    try:
        if response is not None:
            if response.has_error():
                err = response.error()
                message = err.message().encode("utf-8", "replace")
                parts.append(struct.pack("<III", 1, err.code(), len(message)) + message)
            else:
                wanted = set(request.requested_output_names())
                tensors = [t for t in response.output_tensors() if t.name() in wanted]
                parts.append(struct.pack("<II", 0, len(tensors)))
                for tensor in tensors:
                    desc, view = inline_tensor(tensor, cursor, leased)
                    parts.append(desc)
                    if view is not None:
                        data.append(view)
                        cursor += len(view)
        head = struct.pack("<QIIQ", request._batch, final, response is not None, cursor)
        check_frame_size("a response of a decoupled model",
                         len(head) + sum(len(p) for p in parts) + cursor)
        send_parts(RESPONSE, [head] + parts + data)
    except BaseException:
        release(leased)  # never sent: the server will not name them
        raise
    if final:
        open_requests.pop(request._batch, None)


def check_frame_size(what, size):
    """Tensors that travel inline count against the region's limit, as they
    would in the region."""
    if size > MAX_FRAME:
        raise pb_utils.TritonModelException(
            "%s with its tensors inline carries at most %d bytes "
            "(shm-region-max-byte-size plus %d of descriptors), this one has %d"
            % (what, MAX_FRAME, 16 << 20, size))


def write_outputs(response, wanted, cursor, out, leased):
    """Appends one response's outputs to `out` (bytes parts), writing each
    tensor into the region (GPU tensors lent, their leases appended to
    `leased`); returns the next cursor."""
    tensors = [t for t in response._output_tensors if t._name in wanted]
    out.append(OUTPUTS_HEAD.pack(0, len(tensors)))
    for tensor in tensors:
        desc, cursor = write_tensor(tensor, cursor, leased)
        out.append(desc)
    return cursor


def read_tensor(payload, pos):
    """Reads one descriptor of `payload` at `pos` and copies the tensor out of
    the region (the region is reused by the next call); returns (Tensor,
    next pos)."""
    name, dtype, dims, offset, nbytes, pos = read_descriptor(payload, pos)
    array = region_array(dtype, dims, offset, nbytes)
    if dtype != "BYTES":
        array = array.copy()
    return pb_utils.Tensor(name, array, dtype), pos


bls_base = 0  # where a BLS call may place its tensors: after the batch's inputs


def mark_cancelled(payload):
    """A CANCEL frame: the client of the request of that batch is gone."""
    (batch,) = U64.unpack_from(payload, 0)
    request = open_requests.get(batch)
    if request is not None:
        request._cancelled = True


def read_bls_response(reply, pos):
    """One response of a BLS_RESULT at `pos`; returns (response, next pos)."""
    (rkind,) = struct.unpack_from("<I", reply, pos)
    if rkind == 1:
        code, n = struct.unpack_from("<II", reply, pos + 4)
        message = reply[pos + 12:pos + 12 + n].decode("utf-8", "replace")
        return (pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code)),
                pos + 12 + n)
    (n_out,) = struct.unpack_from("<I", reply, pos + 4)
    pos, tensors = pos + 8, []
    for _ in range(n_out):
        tensor, pos = read_tensor(reply, pos)
        tensors.append(tensor)
    return pb_utils.InferenceResponse(tensors), pos


def gpu_tensors(request):
    """A BLS request's GPU inputs: its call holds them (BlsCall.held) until
    the call is answered, by when the server has copied them."""
    return [t for t in request.inputs() if t._gpu is not None]


def request_body(request, descriptors, n_inputs):
    """The request part of a BLS or BLS_CALL frame (python_protocol.h):
    model, version, id, the input descriptors, requested outputs, timeout
    and parameters."""
    model = request.model_name() or ""
    if isinstance(model, str):  # Triton takes str or bytes
        model = model.encode("utf-8")
    rid = str(request.request_id() or "").encode("utf-8")
    outputs = [n.encode("utf-8") for n in request.requested_output_names()]
    return (U16.pack(len(model)) + model +
            struct.pack("<q", int(request.model_version())) +
            U16.pack(len(rid)) + rid + U32.pack(n_inputs) + b"".join(descriptors) +
            U32.pack(len(outputs)) +
            b"".join(U16.pack(len(n)) + n for n in outputs) +
            U64.pack(request._timeout) + pack_parameters(request))


def pack_parameters(request):
    """The request's parameters (a JSON object's text, as parameters()
    gives it) as the frame carries them: u32 count, then per parameter its
    key and a typed value. Triton's types only: str, int (64 bits), bool."""
    items = json.loads(request.parameters() or "{}")
    out = [U32.pack(len(items))]
    for key, value in items.items():
        raw = key.encode("utf-8")
        out.append(U16.pack(len(raw)) + raw)
        if isinstance(value, bool):
            out.append(struct.pack("<BB", 2, value))
        elif isinstance(value, int):
            out.append(struct.pack("<Bq", 1, value))
        elif isinstance(value, str):
            raw = value.encode("utf-8")
            out.append(struct.pack("<BI", 0, len(raw)) + raw)
        else:
            raise pb_utils.TritonModelException(
                "Expect parameters values to have type bool/int/str, found type "
                + str(type(value)))
    return b"".join(out)


def region_call_payload(request):
    """A BLS frame: the request's inputs written into the region after the
    batch's inputs, the outputs to come after them."""
    parts, cursor = [], bls_base
    for tensor in request.inputs():
        desc, cursor = write_tensor(tensor, cursor)
        parts.append(desc)
    return struct.pack("<QQ", region.size, cursor) + request_body(request, parts, len(parts))


def inline_call_parts(request, decoupled, call_id):
    """A BLS_CALL frame as parts for send_parts: the call's id and the
    request, tensors inline after it."""
    descriptors, data, cursor = [], [], 0
    for tensor in request.inputs():
        desc, view = inline_tensor(tensor, cursor)
        descriptors.append(desc)
        if view is not None:
            data.append(view)
            cursor += len(view)
    body = request_body(request, descriptors, len(descriptors))
    head = struct.pack("<QBQ", call_id, 1 if decoupled else 0, cursor)
    check_frame_size("a BLS request", len(head) + len(body) + cursor)
    return [head, body] + data


def read_bls_result(reply):
    """A BLS_RESULT: its one response, copied out of the region."""
    size, count = struct.unpack_from("<QI", reply, 0)
    region.remap(size)
    response, _ = read_bls_response(reply, 12)
    return response


class BlsCall:
    """One BLS call in flight: the answers that name it, delivered by
    whichever thread reads the channel, waited for by the thread that made
    it."""

    def __init__(self, channel, call_id, region=False):
        self.answers = queue.SimpleQueue()  # (final, response) or an exception
        self.channel = channel
        self.id = call_id
        self.region = region  # a region call (BLS, answered BLS_RESULT)

    def next_answer(self):
        """(final, response), waiting for it; raises when the stub goes."""
        return self.channel.wait(self)

    def next_answer_now(self):
        item = self.answers.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def wait_one(self):
        return self.next_answer()[1]

    def cancel(self):
        self.channel.cancel(self)


class ResponseIterator:
    """What exec(decoupled=True) returns, as Triton's: each response of the
    called model as it comes, the last one empty when that model sent the
    final flag alone. Iterating again after the end starts over from the
    first response. cancel() cancels the called request (the called model
    sees is_cancelled()); the iteration still ends with its final
    response."""

    def __init__(self, call):
        self._call = call
        self._responses = []
        self._index = 0
        self._finished = False
        self._cancelled = False

    def __iter__(self):
        if self._finished and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self):
        if self._index < len(self._responses):
            self._index += 1
            return self._responses[self._index - 1]
        if self._finished:
            raise StopIteration
        final, response = self._call.next_answer()
        self._finished = final
        self._responses.append(response)
        self._index += 1
        return response

    def cancel(self):
        if not self._finished and not self._cancelled:
            self._cancelled = True
            self._call.cancel()


ANSWERS = frozenset((BLS_RESULT, BLS_ANSWER, CALL_ANSWER))  # frames that answer a call


class SharedChannel:
    """The channel of a model that is not decoupled. No thread of the
    stub's own reads it (a reader thread would cost a context switch per
    request): whoever waits reads, one at a time (the holder of
    read_lock), and hands each frame to its reader: the main loop for its
    next frame (EXEC, FINALIZE), a thread for its call's answer. BLS calls
    may start from any thread from the end of initialize to finalize; an
    exec() or async_exec() of execute itself uses the region when it is
    free (a BLS frame, answered BLS_RESULT), the others travel inline
    (BLS_CALL, answered BLS_ANSWER): calls gathered at once, those of the
    model's threads, which may outlive execute, and exec(decoupled=True). A frame sent while the server does not read rings
    the doorbell (send_frame), so that the server's watcher reads it.

    The main loop's plain path takes read_lock alone: it touches the
    condition only when a thread waits or a call's answer comes."""

    def __init__(self):
        self.cv = threading.Condition(threading.Lock())
        self.read_lock = threading.Lock()  # held by the thread that reads
        self.waiters = 0  # threads in the condition's wait loop (under cv)
        self.bls_open = False  # from the end of initialize to finalize
        self.region_open = False  # execute runs: the region may take a call
        self.calls = {}  # call id -> BlsCall; 0 is the region call
        self.inbox = collections.deque()  # frames for the main loop
        self.ids = itertools.count(1)
        self.gone = None  # once the channel ended: what waiting calls raise

    def start_call(self, request, decoupled):
        """Sends the call; returns its BlsCall."""
        with self.cv:
            if not self.bls_open:  # initialize or finalize
                raise pb_utils.TritonModelException(
                    "BLS is only supported during the 'execute' function.")
            if self.gone is not None:
                raise self.gone
            # The region serves the thread running execute (and its event
            # loop) only: execute's result waits for a region call, and a
            # thread's call may outlive execute.
            region = (self.region_open and not decoupled and 0 not in self.calls
                      and threading.get_ident() == MAIN_THREAD)
            call = BlsCall(self, 0 if region else next(self.ids), region)
            call.held = gpu_tensors(request)
            self.calls[call.id] = call
        if region:
            return self.send_call(call, lambda: send_frame(BLS, region_call_payload(request)))
        return self.send_call(call, lambda: send_parts(
            BLS_CALL, inline_call_parts(request, decoupled, call.id)))

    def send_call(self, call, send):
        """Runs send() for a listed call; returns the call, or forgets it
        when the send fails."""
        try:
            send()
        except BaseException:
            with self.cv:
                self.calls.pop(call.id, None)
                self.cv.notify_all()
            raise
        return call

    def cancel(self, call):
        send_frame(BLS_CANCEL, U64.pack(call.id))

    def start_query(self, kind, body):
        """Sends a frame answered CALL_ANSWER (METRIC, IS_CANCELLED) after
        its call id; returns its call."""
        with self.cv:
            if self.gone is not None:
                raise self.gone
            call = BlsCall(self, next(self.ids))
            self.calls[call.id] = call
        return self.send_call(call, lambda: send_frame(kind, U64.pack(call.id) + body))

    def next_frame(self):
        """The main loop's next frame, read by it or handed over by the
        thread that read it."""
        if self.read_lock.acquire(blocking=False):
            if not self.inbox:  # nothing handed over: read it here
                try:
                    kind, payload = read_frame()
                except BaseException:
                    with self.cv:
                        self.channel_ended()
                    raise EOFError
                if kind not in ANSWERS:
                    self.read_lock.release()
                    if self.waiters:  # one of them reads from now on
                        with self.cv:
                            self.cv.notify_all()
                    return kind, payload
                with self.cv:
                    self.deliver(kind, payload)
                    self.read_lock.release()
                    self.cv.notify_all()
            else:
                self.read_lock.release()
        return self.wait_until(lambda: self.inbox or self.gone, self.take_frame)

    def take_frame(self):
        if not self.inbox:
            raise EOFError
        return self.inbox.popleft()

    def wait(self, call):
        """Reads frames until `call` has an answer (or another thread reads
        meanwhile); returns the answer."""
        return self.wait_until(lambda: not call.answers.empty(),
                               call.next_answer_now)

    def open_region(self):
        with self.cv:
            self.region_open = True

    def close_region(self):
        """execute returned: the region takes no call, and the one in flight
        is answered before the batch's result goes (the next EXEC reuses
        the region). Inline calls go on."""
        with self.cv:
            self.region_open = False
        self.wait_until(lambda: 0 not in self.calls, lambda: None)

    def wait_until(self, done, then):
        """Reads frames, or waits while another thread does, until done();
        returns then(), both called under cv."""
        with self.cv:
            self.waiters += 1
            try:
                while not done():
                    if not self.read_lock.acquire(blocking=False):
                        self.cv.wait()
                        continue
                    self.cv.release()
                    try:
                        kind, payload = read_frame()
                    except BaseException:
                        self.cv.acquire()
                        self.channel_ended()
                        continue
                    self.cv.acquire()
                    self.deliver(kind, payload)
                    self.read_lock.release()
                    self.cv.notify_all()
                return then()
            finally:
                self.waiters -= 1

    def deliver(self, kind, payload):
        """Hands a frame to its call or to the main loop (cv held; before
        read_lock goes, so that a thread taking it finds the frame)."""
        if kind == BLS_RESULT:
            call = self.calls.pop(0, None)
            if call is not None:
                call.answers.put((True, read_bls_result(payload)))
        elif kind == BLS_ANSWER:
            call_id, final, response = read_bls_answer(payload)
            call = self.calls.pop(call_id, None) if final else self.calls.get(call_id)
            if call is not None:
                call.answers.put((final, response))
        elif kind == CALL_ANSWER:
            call_id, answer = read_call_answer(payload)
            call = self.calls.pop(call_id, None)
            if call is not None:
                call.answers.put((True, answer))
        else:
            self.inbox.append((kind, payload))

    def channel_ended(self):
        """The channel ended (the stub is going; cv and read_lock held):
        every call waiting fails, the main loop ends."""
        self.gone = pb_utils.TritonModelException(
            "Stub process '%s' is not healthy." % instance_name)
        for call in self.calls.values():
            call.answers.put(self.gone)
        self.calls.clear()
        self.read_lock.release()
        self.cv.notify_all()


shared = SharedChannel()
MAIN_THREAD = threading.get_ident()  # runs execute and its event loop


def bls_exec(request, decoupled=False):
    """Sends a BLS request (pb_utils.InferenceRequest.exec) into the server
    and waits for its response (with decoupled, a ResponseIterator over
    every response of a decoupled model); errors come back as the
    response's error."""
    call = (channel or shared).start_call(request, decoupled)
    return ResponseIterator(call) if decoupled else call.wait_one()


async def bls_exec_async(request, decoupled=False):
    """async_exec: the call starts on the event loop's thread (the first
    of execute's may use the region) and its wait happens off the loop, so
    calls gathered with asyncio run at once."""
    call = (channel or shared).start_call(request, decoupled)
    if decoupled:  # the iterator waits as it is iterated
        return ResponseIterator(call)
    return await asyncio.get_running_loop().run_in_executor(None, call.wait_one)


CALL_ANSWER_HEAD = struct.Struct("<QIdI")  # call id, status, value, message length


def read_call_answer(payload):
    """A CALL_ANSWER frame: (call id, (ok, value, message))."""
    call_id, status, value, length = CALL_ANSWER_HEAD.unpack_from(payload, 0)
    start = CALL_ANSWER_HEAD.size
    message = bytes(payload[start:start + length]).decode("utf-8", "replace")
    return call_id, (status == 0, value, message)


def ask_cancelled(batch, index):
    """request.is_cancelled() of a model that is not decoupled: the
    server's answer for request `index` of EXEC `batch` (python_protocol.h
    IS_CANCELLED)."""
    ok, value, _ = shared.start_query(IS_CANCELLED, struct.pack("<QI", batch, index)).wait_one()
    return ok and value == 1.0


def metric_call(op, handle, body, answer):
    """pb_utils' custom metrics (python_metrics.h): one METRIC frame; with
    `answer`, waits for it and returns its value or raises its error."""
    frame = struct.pack("<BQ", op, handle) + body
    if not answer:
        send_frame(METRIC, U64.pack(0) + frame)
        return None
    ok, value, message = (channel or shared).start_query(METRIC, frame).wait_one()
    if not ok:
        raise pb_utils.TritonModelException(message)
    return value


pb_utils._metric_call = metric_call
pb_utils._bls_exec = bls_exec
pb_utils._bls_exec_async = bls_exec_async
event_loop = asyncio.new_event_loop()


def read_inline_tensor(payload, pos, data_start):
    """Reads one descriptor of `payload` at `pos` whose offset counts from
    `data_start` (tensors inline in the frame); returns (Tensor, next pos).
    The array is the model's to write to: a view of a large frame's own
    buffer, else a copy."""
    name, dtype, dims, offset, nbytes, pos = read_descriptor(payload, pos)
    start = data_start + offset
    if dtype == "BYTES":
        array = pb_utils.deserialize_bytes_tensor(
            memoryview(payload)[start:start + nbytes]).reshape(dims)
    else:
        array = np.frombuffer(payload, NUMPY_TYPES[dtype],
                              nbytes // NUMPY_TYPES[dtype].itemsize,
                              start).reshape(dims)
        if not isinstance(payload, bytearray):
            array = array.copy()
    return pb_utils.Tensor(name, array, dtype), pos


BLS_ANSWER_HEAD = struct.Struct("<QIQ")  # call id, flags, data size


def read_bls_answer(payload):
    """A BLS_ANSWER frame: (call id, final, pb_utils.InferenceResponse)."""
    call_id, flags, data_len = BLS_ANSWER_HEAD.unpack_from(payload, 0)
    data_start = len(payload) - data_len
    pos = BLS_ANSWER_HEAD.size
    (rkind,) = U32.unpack_from(payload, pos)
    if rkind == 1:
        code, n = struct.unpack_from("<II", payload, pos + 4)
        message = bytes(payload[pos + 12:pos + 12 + n]).decode("utf-8", "replace")
        response = pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
    else:
        (n_out,) = U32.unpack_from(payload, pos + 4)
        pos, tensors = pos + 8, []
        for _ in range(n_out):
            tensor, pos = read_inline_tensor(payload, pos, data_start)
            tensors.append(tensor)
        response = pb_utils.InferenceResponse(tensors)
    return call_id, bool(flags & 1), response


class DecoupledChannel:
    """A decoupled model's side of the channel: a reader thread takes every
    frame, delivers BLS answers to their calls and CANCELs to their
    requests, and queues the rest (EXEC, FINALIZE) for the main loop."""

    def __init__(self):
        self.inbox = queue.SimpleQueue()
        self.calls = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.bls_open = True  # until finalize, as Triton has it
        self.gone = None  # the exception waiting calls get once the channel ends
        threading.Thread(target=self.read_loop, name="osprey-channel",
                         daemon=True).start()

    def read_loop(self):
        try:
            while True:
                kind, payload = read_frame()
                if kind == BLS_ANSWER:
                    self.deliver(payload)
                elif kind == CALL_ANSWER:
                    call_id, answer = read_call_answer(payload)
                    with self.lock:
                        call = self.calls.pop(call_id, None)
                    if call is not None:
                        call.answers.put((True, answer))
                elif kind == CANCEL:
                    mark_cancelled(payload)
                elif kind == RELEASE:
                    read_release(payload)
                else:
                    self.inbox.put((kind, payload))
        except (EOFError, ConnectionError, OSError):
            pass
        except Exception as exc:  # a frame this stub cannot read: end it
            try:
                log_to_server(2, "instance '%s': channel reader failed: %s"
                              % (instance_name, describe_exception(exc)))
            finally:
                os._exit(1)
        with self.lock:
            self.gone = pb_utils.TritonModelException(
                "Stub process '%s' is not healthy." % instance_name)
            calls, self.calls = list(self.calls.values()), {}
        for call in calls:
            call.answers.put(self.gone)
        self.inbox.put((None, b""))

    def deliver(self, payload):
        call_id, final, response = read_bls_answer(payload)
        with self.lock:
            call = self.calls.pop(call_id, None) if final else self.calls.get(call_id)
        if call is not None:
            call.answers.put((final, response))

    def next_frame(self):
        kind, payload = self.inbox.get()
        if kind is None:
            raise EOFError
        return kind, payload

    def start_call(self, request, decoupled):
        """Sends one BLS_CALL, its tensors inline, and returns its BlsCall."""
        if not self.bls_open:
            raise pb_utils.TritonModelException(
                "BLS is only supported during the 'execute' function.")
        call = BlsCall(self, next(self.ids))
        parts = inline_call_parts(request, decoupled, call.id)
        call.held = gpu_tensors(request)
        with self.lock:
            if self.gone is not None:
                raise self.gone
            self.calls[call.id] = call
        send_parts(BLS_CALL, parts)
        return call

    def start_query(self, kind, body):
        """Sends a frame answered CALL_ANSWER (METRIC) after its call id;
        returns its call."""
        call = BlsCall(self, next(self.ids))
        with self.lock:
            if self.gone is not None:
                raise self.gone
            self.calls[call.id] = call
        send_frame(kind, U64.pack(call.id) + body)
        return call

    def wait(self, call):
        return call.next_answer_now()  # the reader thread delivers

    def cancel(self, call):
        send_frame(BLS_CANCEL, U64.pack(call.id))


channel = None  # a decoupled model's DecoupledChannel, once initialized


def batch_failure(exc=None, message=None):
    """The ERROR answer that fails every request of the batch: for an
    exception execute raised (its type, text and frames), or for a broken
    return value (`message`, Triton's words)."""
    text = message if message is not None else describe_exception(exc)
    return ERROR, ("Failed to process the request(s) for model '%s', message: %s"
                   % (instance_name, text)).encode("utf-8", "replace")


def returned_responses(requests, responses):
    """The response of each request from what execute returned (Triton's
    rules: a list, one entry per request, each an InferenceResponse or None
    for a request answered through its response sender); a str saying
    what is wrong instead."""
    if responses is None:
        responses = [None] * len(requests)
    if not isinstance(responses, list):
        return "Expected a list in the execute return, found type '%s'." % type(responses)
    if len(responses) != len(requests):
        return ("Number of InferenceResponse objects do not match the number of "
                "InferenceRequest objects. InferenceRequest(s) size is:%d, and "
                "InferenceResponse(s) size is:%d\n" % (len(requests), len(responses)))
    answered = []
    for request, response in zip(requests, responses):
        if response is None:
            response = request._sent_response
            if response is None:
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "execute() returned no response for this request and sent "
                    "none through its response sender"))
        elif not isinstance(response, pb_utils.InferenceResponse):
            return ("Expected an 'InferenceResponse' object in the execute function "
                    "return list, found type '%s'." % type(response))
        answered.append(response)
    return answered


def decode_requests(payload):
    """The EXEC's header and its requests (python_protocol.h): returns
    (out_offset, batch number, [pb_utils.InferenceRequest])."""
    region_size, out_offset, batch, count = EXEC_HEAD.unpack_from(payload, 0)
    region.remap(region_size)
    pos, requests = EXEC_HEAD.size, []
    for _ in range(count):
        (n,) = U16.unpack_from(payload, pos)
        request_id = payload[pos + 2:pos + 2 + n].decode("utf-8", "replace")
        pos += 2 + n
        if payload[pos]:  # a string sequence id
            (n,) = U16.unpack_from(payload, pos + 1)
            correlation_id = payload[pos + 3:pos + 3 + n].decode("utf-8", "replace")
            pos += 3 + n
        else:
            (correlation_id,) = U64.unpack_from(payload, pos + 1)
            pos += 9
        (n,) = U32.unpack_from(payload, pos)
        parameters = payload[pos + 4:pos + 4 + n].decode("utf-8", "replace")
        pos += 4 + n
        (n,) = U16.unpack_from(payload, pos)
        pos += 2
        outputs = []
        for _ in range(n):
            (k,) = U16.unpack_from(payload, pos)
            outputs.append(payload[pos + 2:pos + 2 + k].decode("utf-8"))
            pos += 2 + k
        (n,) = U16.unpack_from(payload, pos)
        pos += 2
        inputs = []
        for _ in range(n):
            name, dtype, dims, offset, nbytes, gpu, pos = read_any_descriptor(payload, pos)
            if gpu is not None:
                inputs.append(gpu_input(name, dtype, dims, offset, nbytes, gpu, decoupled))
                continue
            array = region_array(dtype, dims, offset, nbytes)
            if decoupled and dtype != "BYTES":
                # The model's threads may read it after execute returned,
                # when the region holds the next request's inputs.
                array = array.copy()
            inputs.append(pb_utils.Tensor._wrap(name, array, dtype))
        request = pb_utils.InferenceRequest._received(
            inputs, outputs, request_id, correlation_id, parameters)
        if decoupled:
            request._batch = batch
            request._send = send_decoupled_response
            open_requests[batch] = request
        else:
            request._ask_cancelled = functools.partial(ask_cancelled, batch, len(requests))
        requests.append(request)
    return out_offset, batch, requests


def execute(payload):
    global bls_base
    try:
        out_offset, batch, requests = decode_requests(payload)
    except pb_utils.TritonModelException as exc:  # a GPU input out of reach
        return batch_failure(exc)
    bls_base = out_offset
    if not decoupled:
        shared.open_region()
    try:
        responses = model.execute(requests)
        if inspect.isawaitable(responses):  # async def execute
            responses = event_loop.run_until_complete(responses)
    except MemoryError:
        # Over stub-memory-limit-byte-size (a leak, most likely): end this
        # stub; the server fails the batch and starts a fresh one. The log
        # frame was built beforehand: no memory may be left to build it.
        try:
            control.sendall(out_of_memory_frame)
        finally:
            os._exit(1)
    except Exception as exc:
        if decoupled:
            open_requests.pop(batch, None)  # the server ends it
        return batch_failure(exc)
    finally:
        if not decoupled:
            shared.close_region()
    if decoupled:
        if responses is not None:
            open_requests.pop(batch, None)
            return ERROR, ("Python model '%s' is using the decoupled mode and the "
                           "execute function must return None." % instance_name
                           ).encode("utf-8")
        return RESULT, struct.pack("<QI", region.size, 0)
    responses = returned_responses(requests, responses)
    if isinstance(responses, str):
        return batch_failure(message=responses)
    # One response per request, in order: each request's outputs (only
    # those it asked for) or its error, the tensors written into the region
    # after the batch's inputs.
    out = []
    cursor = out_offset
    leased = []  # GPU outputs lent: the server's RELEASE gives them back
    try:
        for request, response in zip(requests, responses):
            if response._error is not None:
                err = response._error
                message = err.message().encode("utf-8", "replace")
                out.append(ERROR_HEAD.pack(1, err.code(), len(message)) + message)
            else:
                wanted = request._requested_output_names
                if state_outputs:
                    wanted = set(wanted) | state_outputs
                cursor = write_outputs(response, wanted, cursor, out, leased)
    except Exception as exc:
        release(leased)  # the RESULT that would name them never goes
        return batch_failure(exc)
    return RESULT, RESULT_HEAD.pack(region.size, len(responses)) + b"".join(out)


def main():
    global channel
    next_frame = read_frame  # until initialize has run, no thread calls
    while True:
        try:
            kind, payload = next_frame()
        except (EOFError, ConnectionError):
            return 0
        if kind in (INIT, EXEC, FINALIZE):
            start_serving()
        if kind == INIT:
            try:
                initialize(payload)
                if decoupled:
                    # From now on the channel's thread reads every frame.
                    channel = DecoupledChannel()
                    next_frame = channel.next_frame
                else:
                    with shared.cv:
                        shared.bls_open = True
                    next_frame = shared.next_frame
                send_frame(OK, answer=True)
            except Exception as exc:
                send_frame(ERROR, describe_exception(exc).encode("utf-8", "replace"),
                           answer=True)
        elif kind == AUTO_COMPLETE:
            try:
                send_frame(OK, auto_complete(payload))
            except Exception as exc:
                send_frame(ERROR, describe_exception(exc).encode("utf-8", "replace"))
            return 0
        elif kind == EXEC:
            answer, body = execute(payload)
            send_frame(answer, body, answer=True)
        elif kind == CANCEL:
            mark_cancelled(payload)
        elif kind == RELEASE:
            read_release(payload)
        elif kind == FINALIZE:
            with shared.cv:  # Triton refuses BLS in finalize
                shared.bls_open = False
            if channel is not None:
                channel.bls_open = False
            try:
                if model is not None and hasattr(model, "finalize"):
                    model.finalize()
            except Exception as exc:
                log_to_server(2, "finalize of '%s' failed: %s"
                              % (instance_name, describe_exception(exc)))
            close_opened()
            send_frame(OK, answer=True)
            return 0
        else:
            send_frame(ERROR, b"unknown frame type %d" % kind)


if __name__ == "__main__":
    sys.exit(main())
