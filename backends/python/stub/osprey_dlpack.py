"""DLPack capsules for pb_utils.Tensor, built and read with ctypes (no
Python dependency): what torch.utils.dlpack, cupy and numpy exchange.

A capsule named "dltensor" holds a DLManagedTensor: a DLTensor (data
pointer, device, shape, strides, dtype), a context pointer and a deleter.
Its consumer renames the capsule "used_dltensor" and calls the deleter
when done; a capsule nobody consumed calls it from its own destructor.

export_capsule() lends memory out: the DLManagedTensor, its shape and
strides and the Python object that keeps the memory alive stay in
_exported until the deleter runs. import_capsule() takes a capsule over:
the returned Imported calls the producer's deleter when it goes.
"""

import ctypes

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6

# Triton datatype <-> DLPack (code, bits), lanes always 1.
_TO_DLPACK = {
    "BOOL": (KDL_BOOL, 8),
    "UINT8": (KDL_UINT, 8), "UINT16": (KDL_UINT, 16),
    "UINT32": (KDL_UINT, 32), "UINT64": (KDL_UINT, 64),
    "INT8": (KDL_INT, 8), "INT16": (KDL_INT, 16),
    "INT32": (KDL_INT, 32), "INT64": (KDL_INT, 64),
    "FP16": (KDL_FLOAT, 16), "FP32": (KDL_FLOAT, 32), "FP64": (KDL_FLOAT, 64),
    "BF16": (KDL_BFLOAT, 16),
}
_FROM_DLPACK = {v: k for k, v in _TO_DLPACK.items()}
ITEM_BYTES = {name: bits // 8 for name, (_, bits) in _TO_DLPACK.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


class DLPackError(ValueError):
    """A tensor pb_utils cannot take or give as DLPack (Triton's words)."""


def _capi(name, restype, *argtypes):
    """A CPython C-API function with its own types (ctypes.pythonapi's
    attributes are shared, so they are not retyped)."""
    fn = ctypes.pythonapi[name]
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_vp = ctypes.c_void_p  # capsule names too: passed by address (below)
_capsule_new = _capi("PyCapsule_New", ctypes.py_object, _vp, _vp, _vp)
_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, _vp)
_capsule_get = _capi("PyCapsule_GetPointer", _vp, ctypes.py_object, _vp)
_capsule_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, _vp)
# In a capsule's destructor the capsule is going: it is only looked at
# through its address, never as a Python object again.
_dying_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, _vp, _vp)
_dying_get = _capi("PyCapsule_GetPointer", _vp, _vp, _vp)

# The names a capsule keeps a pointer to: they live as long as the module.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")

# address of a DLManagedTensor lent out -> what it needs alive
_exported = {}


@DELETER
def _delete_exported(managed):
    _exported.pop(managed, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # Never consumed: the producer's deleter runs here.
    if _dying_is_valid(capsule, ctypes.addressof(_NAME)):
        managed = _dying_get(capsule, ctypes.addressof(_NAME))
        if managed:
            _delete_exported(managed)


def dlpack_dtype(triton_dtype):
    try:
        return _TO_DLPACK[triton_dtype]
    except KeyError:
        raise DLPackError("DLPack does not have support for string tensors."
                          if triton_dtype == "BYTES" else
                          "DType \"%s\" is not supported." % triton_dtype)


def export_capsule(ptr, shape, triton_dtype, device_type, device_id, owner,
                   strides=None):
    """A "dltensor" capsule over `ptr` (an int address) of `shape`, with
    explicit strides (in elements; None: C order, as every pb_utils tensor
    is); `owner` stays alive until the consumer's deleter call (or the
    capsule's end, unconsumed)."""
    code, bits = dlpack_dtype(triton_dtype)
    ndim = len(shape)
    dims = (ctypes.c_int64 * max(ndim, 1))(*shape)
    if strides is None:
        strides, step = [0] * ndim, 1
        for d in reversed(range(ndim)):
            strides[d] = step
            step *= max(int(shape[d]), 1)
    strides = (ctypes.c_int64 * max(ndim, 1))(*strides)
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr or None
    t.device = DLDevice(device_type, device_id)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.deleter = _delete_exported
    address = ctypes.addressof(managed)
    _exported[address] = (managed, dims, strides, owner)
    return _capsule_new(address, ctypes.addressof(_NAME),
                        ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class Imported:
    """A DLManagedTensor taken over from a consumed capsule: its data
    pointer, device, Triton datatype, shape and byte size. Calls the
    producer's deleter when it goes."""

    def __init__(self, managed_address):
        self._managed = DLManagedTensor.from_address(managed_address)
        t = self._managed.dl_tensor
        self.ptr = (t.data or 0) + t.byte_offset
        self.device_type = t.device.device_type
        self.device_id = t.device.device_id
        self.shape = [t.shape[d] for d in range(t.ndim)]
        lanes_ok = t.dtype.lanes == 1
        self.triton_dtype = _FROM_DLPACK.get((t.dtype.code, t.dtype.bits)) if lanes_ok else None
        if t.strides and not _c_contiguous(self.shape, [t.strides[d] for d in range(t.ndim)]):
            raise DLPackError(
                "DLPack tensor is not contiguous. Only contiguous DLPack "
                "tensors that are stored in C-Order are supported.")
        if self.triton_dtype is None:
            raise DLPackError("DLPack dtype (code %d, %d bits, %d lanes) has no "
                              "Triton datatype" % (t.dtype.code, t.dtype.bits,
                                                   t.dtype.lanes))
        count = 1
        for d in self.shape:
            count *= d
        self.nbytes = count * ITEM_BYTES[self.triton_dtype]

    def __del__(self):
        managed = getattr(self, "_managed", None)
        self._managed = None
        if managed is not None and managed.deleter:
            managed.deleter(ctypes.addressof(managed))


def _c_contiguous(shape, strides):
    """Whether strides (in elements) are C order; dims of size 1 may have
    any stride, as DLPack producers leave them."""
    expected = 1
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1:
            if stride != expected:
                return False
            expected *= dim
    return True


def is_capsule(obj):
    return type(obj).__name__ == "PyCapsule"


def import_capsule(capsule):
    """Takes over a "dltensor" capsule (renamed "used_dltensor", as DLPack
    consumers do); returns its Imported. DLPackError for a capsule that
    was used already, or holds what pb_utils cannot take."""
    if not _capsule_is_valid(capsule, ctypes.addressof(_NAME)):
        raise DLPackError("Provided tensor is not supported. Tensor must be a "
                          "DLPack capsule or have `__dlpack__` and "
                          "`__dlpack_device__` attributes")
    address = _capsule_get(capsule, ctypes.addressof(_NAME))
    _capsule_set_name(capsule, ctypes.addressof(_USED_NAME))
    return Imported(address)
