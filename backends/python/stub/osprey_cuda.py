"""The CUDA runtime as the python stub reaches it: through ctypes, so that
GPU tensors (Tensor.from_dlpack of a CUDA tensor, GPU inputs) need no
Python package. The library is loaded on first use only, so a model that
never touches GPU memory runs on hosts without CUDA.

Which library: $OSPREY_PYTHON_CUDA_RUNTIME when set (a path or a soname;
the tests point it at the fake runtime of tests/fake_cuda), else the first
of libcudart.so, libcudart.so.13, .12, .11.0 and what
ctypes.util.find_library("cudart") finds that loads. A model that calls
CUDA through ctypes itself should load the same library (load_runtime()),
so that both see one runtime and one set of allocations.

Every call sets the device it works on first (cudaSetDevice is per host
thread, and model threads call in too). Copies go through one stream per
device and wait for their end, so what they return is in place.
"""

import ctypes
import ctypes.util
import os
import threading

RUNTIME_ENV = "OSPREY_PYTHON_CUDA_RUNTIME"
MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
IPC_LAZY_ENABLE_PEER_ACCESS = 1
IPC_HANDLE_BYTES = 64


class CudaError(RuntimeError):
    """A CUDA runtime call failed, or there is no runtime to call."""


class IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


# CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr)
_ADDRESS_RANGE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64)

_lock = threading.Lock()
_lib = None
_address_range = None
_streams = {}  # device -> cudaStream_t (a c_void_p), made on first copy


def _candidates():
    chosen = os.environ.get(RUNTIME_ENV)
    if chosen:
        return [chosen]
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12",
             "libcudart.so.11.0"]
    found = ctypes.util.find_library("cudart")
    if found:
        names.append(found)
    return names


def _declare(lib):
    """Argument and result types of the calls the stub makes."""
    vp, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    signatures = {
        "cudaGetDeviceCount": [ctypes.POINTER(i)],
        "cudaSetDevice": [i],
        "cudaGetDevice": [ctypes.POINTER(i)],
        "cudaDeviceSynchronize": [],
        "cudaMalloc": [ctypes.POINTER(vp), sz],
        "cudaFree": [vp],
        "cudaStreamCreate": [ctypes.POINTER(vp)],
        "cudaStreamSynchronize": [vp],
        "cudaMemcpyAsync": [vp, vp, sz, i, vp],
        "cudaIpcGetMemHandle": [ctypes.POINTER(IpcMemHandle), vp],
        "cudaIpcOpenMemHandle": [ctypes.POINTER(vp), IpcMemHandle, ctypes.c_uint],
        "cudaIpcCloseMemHandle": [vp],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = i
    lib.cudaGetErrorString.argtypes = [i]
    lib.cudaGetErrorString.restype = ctypes.c_char_p


def load_runtime():
    """The CUDA runtime (a ctypes.CDLL), loaded once; CudaError when none
    loads."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for name in _candidates():
            try:
                lib = ctypes.CDLL(name)
                _declare(lib)
            except (OSError, AttributeError) as exc:
                tried.append("%s (%s)" % (name, exc))
                continue
            _lib = lib
            return lib
    raise CudaError("the CUDA runtime could not be loaded: tried " + "; ".join(tried)
                    + " (set %s to the path of libcudart.so)" % RUNTIME_ENV)


def _check(status, what):
    if status != 0:
        text = _lib.cudaGetErrorString(status) or b"error %d" % status
        raise CudaError("%s failed: %s" % (what, text.decode("utf-8", "replace")))


def _on(device):
    """The runtime, with `device` made current on this thread."""
    lib = load_runtime()
    _check(lib.cudaSetDevice(int(device)), "cudaSetDevice(%d)" % device)
    return lib


def device_count():
    lib = load_runtime()
    count = ctypes.c_int(0)
    _check(lib.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
    return count.value


def synchronize(device):
    """Waits for all work queued on `device` (by any library in this
    process): its memory then holds what the work wrote."""
    _check(_on(device).cudaDeviceSynchronize(), "cudaDeviceSynchronize")


def malloc(device, nbytes):
    lib = _on(device)
    ptr = ctypes.c_void_p()
    _check(lib.cudaMalloc(ctypes.byref(ptr), max(int(nbytes), 1)), "cudaMalloc")
    return ptr.value


def free(device, ptr):
    _check(_on(device).cudaFree(ptr), "cudaFree")


def _stream(lib, device):
    with _lock:
        stream = _streams.get(device)
        if stream is None:
            stream = ctypes.c_void_p()
            _check(lib.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
            _streams[device] = stream
        return stream


def copy(device, dst, src, nbytes, kind):
    """Copies nbytes (device or host addresses as ints, as `kind` says)
    and returns once they have arrived."""
    if nbytes == 0:
        return
    lib = _on(device)
    stream = _stream(lib, device)
    _check(lib.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync")
    _check(lib.cudaStreamSynchronize(stream), "cudaStreamSynchronize")


def _address_range_fn(lib):
    """The driver's cuMemGetAddressRange, through the runtime's entry point
    lookup (no link to libcuda), else from libcuda.so.1."""
    global _address_range
    if _address_range is not None:
        return _address_range
    fn, found = ctypes.c_void_p(), ctypes.c_int(0)
    vp, u, ull = ctypes.c_void_p, ctypes.c_uint, ctypes.c_ulonglong
    for lookup, argtypes, args in (
            ("cudaGetDriverEntryPointByVersion", [u, ull], (12000, 0)),
            ("cudaGetDriverEntryPoint", [ull], (0,))):
        entry = getattr(lib, lookup, None)
        if entry is None:
            continue
        entry.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)] + argtypes + [
            ctypes.POINTER(ctypes.c_int)]
        entry.restype = ctypes.c_int
        status = entry(b"cuMemGetAddressRange", ctypes.byref(fn), *args,
                       ctypes.byref(found))
        if status == 0 and fn.value:
            _address_range = _ADDRESS_RANGE(fn.value)
            return _address_range
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        _address_range = _ADDRESS_RANGE(("cuMemGetAddressRange_v2", driver))
        return _address_range
    except (OSError, AttributeError) as exc:
        raise CudaError("cuMemGetAddressRange is not available: %s" % exc)


def ipc_export(device, ptr):
    """(64-byte CUDA IPC handle of the allocation holding ptr, ptr's offset
    in it): what another process opens to reach ptr."""
    lib = _on(device)
    handle = IpcMemHandle()
    _check(lib.cudaIpcGetMemHandle(ctypes.byref(handle), ptr), "cudaIpcGetMemHandle")
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    status = _address_range_fn(lib)(ctypes.byref(base), ctypes.byref(size), ptr)
    if status != 0:
        raise CudaError("cuMemGetAddressRange failed: error %d" % status)
    return bytes(bytearray(handle)), ptr - base.value


def ipc_open(device, handle):
    """Maps the allocation another process exported as `handle` (64 bytes)
    on `device`; returns its first address. Close it with ipc_close."""
    lib = _on(device)
    ptr = ctypes.c_void_p()
    _check(lib.cudaIpcOpenMemHandle(ctypes.byref(ptr),
                                    IpcMemHandle.from_buffer_copy(handle),
                                    IPC_LAZY_ENABLE_PEER_ACCESS),
           "cudaIpcOpenMemHandle")
    return ptr.value


def ipc_close(device, ptr):
    _check(_on(device).cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle")


class Allocation:
    """Device memory this process cudaMalloc'd, freed when the object goes
    (the owner a GPU tensor keeps alive)."""

    def __init__(self, device, nbytes):
        self.device = device
        self.ptr = malloc(device, nbytes)

    def __del__(self):
        ptr, self.ptr = self.ptr, None
        if ptr:
            try:
                free(self.device, ptr)
            except Exception:  # at interpreter exit the runtime may be gone
                pass
