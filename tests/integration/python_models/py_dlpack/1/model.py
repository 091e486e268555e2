"""GPU tensors through DLPack, as a model using torch.cuda would make them,
without torch: DeviceArray is FP32 device memory the model cudaMallocs
through the CUDA runtime with ctypes (the one the stub loads:
$OSPREY_PYTHON_CUDA_RUNTIME, the fake runtime in the tests), exposed with
__dlpack__ and __dlpack_device__.

Every response carries LIVE (DeviceArrays alive when execute began: the
server's RELEASE lets the stub drop the ones it returned) and IN_ON_GPU
(whether IN came as a GPU tensor). MODE:
  0  OUT = IN, returned as a GPU tensor (from_dlpack of a DeviceArray),
     through the response sender for a decoupled model
  1  the same after a to_dlpack round trip: from_dlpack of a capsule, then
     of a pb_utils.Tensor (its __dlpack__); checks is_cpu(), as_numpy()'s
     error, shape() and __dlpack_device__ on the way
  2  a non-contiguous DeviceArray: from_dlpack's error as the response's
  3  OUT = IN as numpy (read from wherever it came)
  4  OUT = 2 * IN, IN read from wherever it came (GPU input or numpy)
  5  OUT = IN + IN by BLS on py_add_sub (IN has 4 elements), both inputs
     GPU tensors
  6  OUT = IN passed straight back: a GPU input handed on as the output
"""
import ctypes

import numpy as np
import osprey_cuda
import osprey_dlpack
import triton_python_backend_utils as pb_utils

cuda = osprey_cuda.load_runtime()
LIVE = set()


def check(status, what):
    if status != 0:
        raise RuntimeError("%s failed: %d" % (what, status))


class DeviceArray:
    def __init__(self, device, values, shape=None, strides=None):
        values = np.ascontiguousarray(values, np.float32)
        self.device = device
        self.shape = list(values.shape if shape is None else shape)
        self.strides = strides
        ptr = ctypes.c_void_p()
        check(cuda.cudaSetDevice(device), "cudaSetDevice")
        check(cuda.cudaMalloc(ctypes.byref(ptr), max(values.nbytes, 1)), "cudaMalloc")
        self.ptr = ptr.value
        LIVE.add(self.ptr)
        osprey_cuda.copy(device, self.ptr, values.ctypes.data, values.nbytes,
                         osprey_cuda.MEMCPY_HOST_TO_DEVICE)

    def __dlpack__(self, stream=None):
        return osprey_dlpack.export_capsule(self.ptr, self.shape, "FP32",
                                            osprey_dlpack.KDL_CUDA, self.device,
                                            self, self.strides)

    def __dlpack_device__(self):
        return (osprey_dlpack.KDL_CUDA, self.device)

    def __del__(self):
        LIVE.discard(self.ptr)
        cuda.cudaSetDevice(self.device)
        cuda.cudaFree(self.ptr)


def host_values(tensor):
    """The values of a pb_utils.Tensor, wherever they are."""
    if tensor.is_cpu():
        return tensor.as_numpy()
    imported = osprey_dlpack.import_capsule(tensor.to_dlpack())
    out = np.empty(tensor.shape(), pb_utils.triton_string_to_numpy(tensor.triton_dtype()))
    osprey_cuda.copy(imported.device_id, out.ctypes.data, imported.ptr,
                     out.nbytes, osprey_cuda.MEMCPY_DEVICE_TO_HOST)
    return out


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


class TritonPythonModel:
    def initialize(self, args):
        self.device = int(args["model_instance_device_id"])
        if args["model_instance_kind"] != "GPU":
            self.device = 0  # a CPU server: the stub still has a runtime
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(
            __import__("json").loads(args["model_config"]))

    def respond(self, request, mode):
        live = len(LIVE)
        tensor = pb_utils.get_input_tensor_by_name(request, "IN")
        flags = [pb_utils.Tensor("LIVE", np.array([live], np.int64)),
                 pb_utils.Tensor("IN_ON_GPU", np.array([not tensor.is_cpu()]))]
        if mode in (0, 1, 2, 5):
            values = host_values(tensor)
        if mode == 0:
            out = pb_utils.Tensor.from_dlpack("OUT", DeviceArray(self.device, values))
        elif mode == 1:
            first = pb_utils.Tensor.from_dlpack("X", DeviceArray(self.device, values))
            expect(not first.is_cpu(), "is_cpu() of a GPU tensor")
            expect(first.shape() == [len(values)], "shape() %r" % first.shape())
            expect(first.__dlpack_device__() == (2, self.device), "__dlpack_device__")
            try:
                first.as_numpy()
                expect(False, "as_numpy() of a GPU tensor")
            except pb_utils.TritonModelException as e:
                expect(str(e) == "Tensor is stored in GPU and cannot be converted "
                       "to NumPy.", "as_numpy() said %r" % str(e))
            second = pb_utils.Tensor.from_dlpack("Y", first.to_dlpack())
            out = pb_utils.Tensor.from_dlpack("OUT", second)
        elif mode == 2:
            n = len(values) // 2
            try:
                pb_utils.Tensor.from_dlpack(
                    "OUT", DeviceArray(self.device, values, shape=[2, n], strides=[1, 2]))
                return pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("a non-contiguous tensor was taken"))
            except pb_utils.TritonModelException as e:
                return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e)))
        elif mode == 3:
            out = pb_utils.Tensor("OUT", np.array(host_values(tensor)))
        elif mode == 4:
            out = pb_utils.Tensor("OUT", host_values(tensor) * 2)
        elif mode == 5:
            both = [pb_utils.Tensor.from_dlpack(name, DeviceArray(self.device, values))
                    for name in ("INPUT0", "INPUT1")]
            answer = pb_utils.InferenceRequest(
                model_name="py_add_sub", inputs=both,
                requested_output_names=["OUTPUT0"]).exec()
            if answer.has_error():
                return pb_utils.InferenceResponse(error=answer.error())
            out = pb_utils.Tensor(
                "OUT", pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy())
        elif mode == 6:
            out = pb_utils.Tensor.from_dlpack("OUT", tensor)
        return pb_utils.InferenceResponse([out] + flags)

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(host_values(pb_utils.get_input_tensor_by_name(request, "MODE"))[0])
            try:
                response = self.respond(request, mode)
            except Exception as e:  # a failed check: the test reads it
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("%s: %s" % (type(e).__name__, e)))
            if self.decoupled:
                sender = request.get_response_sender()
                sender.send(response)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses
