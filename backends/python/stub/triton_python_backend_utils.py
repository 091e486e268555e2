"""Triton's `triton_python_backend_utils` as Osprey's python stub serves it.

A model.py written for Triton's python backend imports this module as
`pb_utils` and runs unchanged. The stub (osprey_python_stub.py) fills in the
parts that talk to the server: tensors viewing the shared-memory region,
the request list handed to execute(), and the log channel.
"""

import ctypes
import itertools
import json
import threading
import struct

import numpy as np

import osprey_cuda
import osprey_dlpack

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

_TRITON_TO_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


def triton_to_numpy_type(data_type):
    """numpy type of a datatype given as "FP32" or "TYPE_FP32"."""
    if data_type.startswith("TYPE_"):
        data_type = data_type[5:]
    if data_type == "STRING":
        data_type = "BYTES"
    return _TRITON_TO_NUMPY.get(data_type)


def triton_string_to_numpy(triton_type_string):
    return triton_to_numpy_type(triton_type_string)


_NUMPY_TO_TRITON = {np.dtype(t): name for name, t in _TRITON_TO_NUMPY.items()
                    if t is not np.object_}


def numpy_to_triton_type(data_type):
    try:
        data_type = np.dtype(data_type)
    except TypeError:
        return None
    if data_type.kind in "OSU":
        return "BYTES"
    return _NUMPY_TO_TRITON.get(data_type)


def serialize_byte_tensor(input_tensor):
    """Triton's BYTES wire form: each element as a little-endian u32
    length and its bytes, in C order. Returns a uint8 array."""
    parts = []
    for item in np.asarray(input_tensor, dtype=np.object_).flat:
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """Inverse of serialize_byte_tensor: a 1-D object array of bytes."""
    data = memoryview(encoded_tensor).cast("B")
    items, offset = [], 0
    while offset + 4 <= len(data):
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        items.append(bytes(data[offset:offset + length]))
        offset += length
    return np.array(items, dtype=np.object_)


class TritonModelException(Exception):
    pass


class TritonError:
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return self._message


class GpuMemory:
    """Where a GPU tensor's bytes are: `ptr` (an int device address) on
    CUDA device `device`, kept valid by `owner` (what made the memory:
    the producer's DLPack tensor, an allocation of the stub's own, or
    None for an input the server lends for the length of execute)."""

    __slots__ = ("ptr", "device", "owner")

    def __init__(self, ptr, device, owner):
        self.ptr, self.device, self.owner = ptr, device, owner


class Tensor:
    """A named tensor; BYTES tensors are numpy object arrays of bytes. A
    tensor in GPU memory (from_dlpack of a CUDA tensor, or an input under
    FORCE_CPU_ONLY_INPUT_TENSORS "no") has no numpy array: is_cpu() is
    False and to_dlpack() hands it on."""

    _gpu = None  # GpuMemory of a GPU tensor
    _shape = None  # a GPU tensor's shape
    _exported = None  # the stub's (IPC handle, offset, copy) of a GPU tensor

    def __init__(self, name, data, dtype=None):
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                "Tensor data must be a numpy array, got " + type(data).__name__)
        self._name = name
        self._data = data
        self._triton_dtype = dtype or numpy_to_triton_type(data.dtype)
        if self._triton_dtype is None:
            raise TritonModelException(
                "Tensor '%s': numpy dtype %s has no Triton datatype" % (name, data.dtype))

    @classmethod
    def _wrap(cls, name, data, dtype):
        """A Tensor over an array the stub made (no checks)."""
        tensor = cls.__new__(cls)
        tensor._name, tensor._data, tensor._triton_dtype = name, data, dtype
        return tensor

    @classmethod
    def _on_gpu(cls, name, dtype, shape, memory):
        """A Tensor over GPU memory (a GpuMemory) of `shape`, C order."""
        tensor = cls.__new__(cls)
        tensor._name, tensor._data, tensor._triton_dtype = name, None, dtype
        tensor._shape, tensor._gpu = [int(d) for d in shape], memory
        return tensor

    def name(self):
        return self._name

    def as_numpy(self):
        if self._gpu is not None:
            raise TritonModelException(
                "Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._data

    def triton_dtype(self):
        return self._triton_dtype

    def shape(self):
        if self._gpu is not None:
            return list(self._shape)
        return list(self._data.shape)

    def is_cpu(self):
        return self._gpu is None

    def _nbytes(self):
        """Bytes of a GPU tensor."""
        count = 1
        for d in self._shape:
            count *= d
        return count * osprey_dlpack.ITEM_BYTES[self._triton_dtype]

    def to_dlpack(self):
        """A DLPack capsule of the tensor, without a copy: a CUDA one for a
        GPU tensor (torch.utils.dlpack.from_dlpack and cupy take it), a CPU
        one otherwise. The tensor's memory stays alive while the consumer
        holds it."""
        try:
            if self._gpu is not None:
                return osprey_dlpack.export_capsule(
                    self._gpu.ptr, self._shape, self._triton_dtype,
                    osprey_dlpack.KDL_CUDA, self._gpu.device, self)
            if self._triton_dtype == "BYTES":
                osprey_dlpack.dlpack_dtype("BYTES")  # raises Triton's error
            return self._data.__dlpack__()
        except osprey_dlpack.DLPackError as exc:
            raise TritonModelException(str(exc)) from None

    def __dlpack__(self, stream=None, **kwargs):
        # All work on a stub's GPU tensor has finished when it becomes one
        # (from_dlpack synchronizes), so any stream may read it at once.
        return self.to_dlpack()

    def __dlpack_device__(self):
        if self._gpu is not None:
            return (osprey_dlpack.KDL_CUDA, self._gpu.device)
        return (osprey_dlpack.KDL_CPU, 0)

    @staticmethod
    def from_dlpack(name, tensor):
        """A Tensor of a DLPack capsule or of an object with __dlpack__ and
        __dlpack_device__ (torch, cupy, numpy, ...), without a copy. A CUDA
        tensor stays in GPU memory: returned from execute, sent through a
        response sender or given to a BLS request, it reaches the server
        through CUDA IPC. Only C-contiguous tensors are taken."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            if osprey_dlpack.is_capsule(tensor):
                return Tensor._of_imported(name, osprey_dlpack.import_capsule(tensor))
            if not hasattr(tensor, "__dlpack__") or not hasattr(tensor, "__dlpack_device__"):
                raise osprey_dlpack.DLPackError(
                    "Provided tensor is not supported. Tensor must be a DLPack "
                    "capsule or have `__dlpack__` and `__dlpack_device__` attributes")
            device_type, _ = tensor.__dlpack_device__()
            if device_type == osprey_dlpack.KDL_CUDA:
                # stream None: the producer's legacy default stream; the
                # device is synchronized after anyway (_of_imported).
                return Tensor._of_imported(
                    name, osprey_dlpack.import_capsule(tensor.__dlpack__()))
            if device_type not in (osprey_dlpack.KDL_CPU, osprey_dlpack.KDL_CUDA_HOST):
                raise osprey_dlpack.DLPackError(
                    "DLDevice type %d is not support by Python backend." % device_type)
            array = np.from_dlpack(tensor)
        except osprey_dlpack.DLPackError as exc:
            raise TritonModelException(str(exc)) from None
        except osprey_cuda.CudaError as exc:
            raise TritonModelException(str(exc)) from None
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack "
                "tensors that are stored in C-Order are supported.")
        return Tensor(name, array)

    @staticmethod
    def _of_imported(name, imported):
        """A Tensor of a DLPack tensor taken over (osprey_dlpack.Imported):
        a GPU tensor, or a numpy array over the CPU memory."""
        if imported.device_type == osprey_dlpack.KDL_CUDA:
            # Whatever the producer queued for it has run when the tensor
            # leaves the stub: the server reads it from another process,
            # on no stream of the producer's.
            osprey_cuda.synchronize(imported.device_id)
            return Tensor._on_gpu(name, imported.triton_dtype, imported.shape,
                                  GpuMemory(imported.ptr, imported.device_id, imported))
        if imported.device_type not in (osprey_dlpack.KDL_CPU, osprey_dlpack.KDL_CUDA_HOST):
            raise osprey_dlpack.DLPackError(
                "DLDevice type %d is not support by Python backend." % imported.device_type)
        if imported.triton_dtype == "BF16":
            raise osprey_dlpack.DLPackError(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use "
                "to_dlpack() and from_dlpack() instead.")
        raw = (ctypes.c_uint8 * imported.nbytes).from_address(imported.ptr) \
            if imported.nbytes else (ctypes.c_uint8 * 0)()
        raw._owner = imported  # the array's base keeps the producer's memory
        array = np.frombuffer(raw, _TRITON_TO_NUMPY[imported.triton_dtype])
        return Tensor(name, array.reshape(imported.shape), imported.triton_dtype)


_bls_exec = None  # set by the stub
_bls_exec_async = None  # set by the stub


def _log_sink(level, message):
    print(message, flush=True)


class LogLevel:
    """Levels of Logger.log, as Triton numbers them."""
    INFO, WARNING, ERROR, VERBOSE = 0, 1, 2, 3


class Logger:
    """Writes into the server's log at the given level (the stub points
    _log_sink at its control channel)."""

    @staticmethod
    def log(message, level=LogLevel.INFO):
        _log_sink(level, str(message))

    @staticmethod
    def log_info(message):
        _log_sink(LogLevel.INFO, str(message))

    @staticmethod
    def log_warn(message):
        _log_sink(LogLevel.WARNING, str(message))

    @staticmethod
    def log_error(message):
        _log_sink(LogLevel.ERROR, str(message))

    @staticmethod
    def log_verbose(message):
        _log_sink(LogLevel.VERBOSE, str(message))


# ---- custom metrics (Triton's MetricFamily and Metric) ----

# Set by the stub: _metric_call(op, handle id, body bytes, answer) sends a
# METRIC frame (backends/python/python_metrics.h) and, with answer, waits
# for its answer: the value, or TritonModelException with the server's
# message.
_metric_call = None
_metric_ids = itertools.count(1)


class MetricKind(int):
    """Kinds of a MetricFamily, as Triton's enum."""


MetricKind.COUNTER = MetricKind(0)
MetricKind.GAUGE = MetricKind(1)
MetricKind.HISTOGRAM = MetricKind(2)


def _metric_string(text, width):
    raw = str(text).encode("utf-8")
    return struct.pack("<H" if width == 2 else "<I", len(raw)) + raw


class Metric:
    """One series of a family (its labels), made by MetricFamily.Metric.
    Deleted (it leaves /metrics unless another object holds its labels)
    when it is garbage."""

    def __init__(self, family, labels, buckets):
        self._id = next(_metric_ids)
        body = struct.pack("<QI", family._id, len(labels))
        for key, value in labels.items():
            body += _metric_string(key, 2) + _metric_string(value, 4)
        if buckets is None:
            body += struct.pack("<I", 0xFFFFFFFF)
        else:
            body += struct.pack("<I%dd" % len(buckets), len(buckets), *buckets)
        _metric_call(1, self._id, body, True)
        self._family = family  # deleted after its metrics, as Triton asks

    def increment(self, value):
        _metric_call(3, self._id, struct.pack("<d", float(value)), True)

    def set(self, value):
        _metric_call(4, self._id, struct.pack("<d", float(value)), True)

    def observe(self, value):
        _metric_call(5, self._id, struct.pack("<d", float(value)), True)

    def value(self):
        return _metric_call(6, self._id, b"", True)

    def __del__(self):
        if getattr(self, "_family", None) is not None:
            _metric_delete(self._id)


class MetricFamily:
    """A family of metrics served on the server's /metrics port, as
    Triton's: MetricFamily(name, description, kind) with kind COUNTER,
    GAUGE or HISTOGRAM; families of one name share their series."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name, description, kind):
        if name is None or description is None or kind is None:
            raise TypeError("MetricFamily(name, description, kind): none may be None")
        if kind not in (0, 1, 2):
            raise TritonModelException("Error when creating MetricFamily: Unknown metric kind")
        self._kind = int(kind)
        self._id = next(_metric_ids)
        _metric_call(0, self._id, struct.pack("<B", self._kind) + _metric_string(name, 2) +
                     _metric_string(description, 4), True)
        self._made = True

    def Metric(self, labels=None, buckets=None):
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            buckets = [float(b) for b in buckets]
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        return Metric(self, labels or {}, buckets)

    def __del__(self):
        if getattr(self, "_made", False):
            _metric_delete(self._id)


def _metric_delete(handle):
    """Tells the server a family or metric is garbage; never raises (it
    may run at the interpreter's exit, the channel gone)."""
    try:
        if _metric_call is not None:
            _metric_call(2, handle, b"", False)
    except Exception:
        pass


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._output_tensors = list(output_tensors or [])
        self._error = error
        self._parameters = parameters

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class ResponseSender:
    """A request's response sender. For a decoupled model every send goes
    to the client at once, from any thread; otherwise the one response
    waits to go as execute's return value would carry it."""

    def __init__(self, request):
        self._request = request
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        if response is None and flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response "
                "flags is not equal to TRITONSERVER_RESPONSE_COMPLETE_FINAL.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                "Expected an InferenceResponse, got " + type(response).__name__)
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed.")
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            send = self._request._send
            if send is not None:
                send(self._request, response, flags)
            elif response is not None:
                self._request._sent_response = response

    def is_cancelled(self):
        return self._request.is_cancelled()


class InferenceRequest:
    """A request as execute() receives it, or a BLS request a model builds
    and sends with exec() or async_exec()."""

    def __init__(self, model_name=None, inputs=None, requested_output_names=None,
                 request_id="", correlation_id=0, model_version=-1, flags=0,
                 timeout=0, parameters=None, **kwargs):
        self._model_name = model_name
        self._inputs = list(inputs or [])
        self._requested_output_names = list(requested_output_names or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        if isinstance(timeout, bool) or not isinstance(timeout, int) or \
                not 0 <= timeout < 1 << 64:
            raise TritonModelException(
                "timeout must be a non-negative integer of microseconds, got %r"
                % (timeout,))
        self._timeout = timeout
        self._parameters = _parameters_json(parameters)
        self._sender = None
        self._sent_response = None
        self._send = None  # the stub's, for a decoupled model
        self._batch = 0
        self._cancelled = False

    @classmethod
    def _received(cls, inputs, requested_output_names, request_id,
                  correlation_id, parameters):
        """A request as execute() receives it (the stub builds it; no
        checks, no copies of the lists)."""
        request = cls.__new__(cls)
        request.__dict__.update(_RECEIVED_DEFAULTS)
        request._inputs = inputs
        request._requested_output_names = requested_output_names
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._parameters = parameters
        return request

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._requested_output_names

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def parameters(self):
        return self._parameters

    def is_cancelled(self):
        """Whether the request's client has gone. A decoupled model's
        requests learn it from the server as it happens; a request of a
        model that is not decoupled asks the server (_ask_cancelled, set
        by the stub), as Triton's does at each call."""
        if not self._cancelled and self._ask_cancelled is not None:
            self._cancelled = self._ask_cancelled()
        return self._cancelled

    def get_response_sender(self):
        if self._sender is None:
            self._sender = ResponseSender(self)
        return self._sender

    def exec(self, decoupled=False):
        """BLS: runs this request on model_name through the server, with
        its timeout (microseconds in the called model's queue, 0 = none)
        and parameters. Errors come back as the response's error().
        decoupled=True gives a ResponseIterator over the responses, as
        they come, with cancel()."""
        if _bls_exec is None:
            raise TritonModelException(
                "BLS is only supported during the 'execute' function.")
        return _bls_exec(self, decoupled=bool(decoupled))

    async def async_exec(self, decoupled=False):
        """BLS, awaitable: the wait happens off the event loop, so calls
        gathered with asyncio run at once; decoupled=True gives the
        iterator of exec(decoupled=True)."""
        if _bls_exec_async is None:
            raise TritonModelException(
                "BLS is only supported during the 'execute' function.")
        return await _bls_exec_async(self, bool(decoupled))


def _parameters_json(parameters):
    """The text of a BLS request's parameters as parameters() gives it,
    checked as Triton checks them: a dict of str keys and bool, int or str
    values (here also the text of such a JSON object, as parameters()
    returns it)."""
    if parameters is None:
        return "{}"
    if isinstance(parameters, (str, bytes)):
        try:
            parameters = json.loads(parameters)
        except ValueError as e:
            raise TritonModelException(
                "parameters given as a string must be a JSON object: %s" % e)
        if not isinstance(parameters, dict):
            raise TritonModelException(
                "parameters given as a string must be a JSON object, found %s"
                % type(parameters))
    elif not isinstance(parameters, dict):
        raise TritonModelException(
            "Expect parameters to be a dict, found type " + str(type(parameters)))
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                "Expect parameters keys to have type str, found type " + str(type(key)))
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type "
                + str(type(value)))
        if isinstance(value, int) and not isinstance(value, bool) and \
                not -(1 << 63) <= value < 1 << 63:
            raise TritonModelException(
                "parameter '%s': %d does not fit a 64-bit integer" % (key, value))
    return json.dumps(parameters)


_RECEIVED_DEFAULTS = {
    "_model_name": None, "_model_version": -1, "_flags": 0, "_timeout": 0,
    "_sender": None, "_sent_response": None, "_send": None, "_batch": 0,
    "_cancelled": False, "_ask_cancelled": None,
}


def get_input_tensor_by_name(inference_request, name):
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for io in model_config.get("input", []):
        if io["name"] == name:
            return io
    return None


def get_output_config_by_name(model_config, name):
    for io in model_config.get("output", []):
        if io["name"] == name:
            return io
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether the model configuration (a dict) has
    model_transaction_policy { decoupled: true }."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))



class ModelConfig:
    """What auto_complete_config(auto_complete_model_config) receives: the
    model configuration so far, which the model may complete."""

    def __init__(self, model_config):
        self._model_config = model_config

    def as_dict(self):
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current not in (0, max_batch_size):
            raise ValueError(
                "configuration specified max_batch_size " + str(current) +
                ", but in auto-complete-config function for model '" +
                self._model_config["name"] + "' specified max_batch_size " +
                str(max_batch_size))
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict):
        self._model_config["model_transaction_policy"] = dict(transaction_policy_dict)

    def _add(self, kind, tensor):
        if not isinstance(tensor, dict):
            raise ValueError("model config %s must be a dict" % kind)
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError("model config %s must have '%s'" % (kind, key))
        data_type = tensor["data_type"]
        if not data_type.startswith("TYPE_"):
            data_type = "TYPE_" + data_type
        entry = dict(tensor, data_type=data_type, dims=list(tensor["dims"]))
        for existing in self._model_config.setdefault(kind, []):
            if existing["name"] == entry["name"]:
                if existing["data_type"] != data_type or list(existing["dims"]) != entry["dims"]:
                    raise ValueError(
                        "model config %s '%s' already exists with a different "
                        "data_type or dims" % (kind, entry["name"]))
                return
        entry["_added"] = True
        self._model_config[kind].append(entry)

    def add_input(self, input):
        self._add("input", input)

    def add_output(self, output):
        self._add("output", output)
