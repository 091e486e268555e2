"""MODE 0 echoes; every other MODE fails one way (test_python_backend.py)."""
import ctypes
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


LEAKED = []


def fail(mode):
    raise ValueError("mode %d is not allowed" % mode)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode == 1:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("error response from py_errors")))
                continue
            if mode == 2:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("bad MODE", pb_utils.TritonError.INVALID_ARG)))
                continue
            if mode == 3:
                fail(mode)
            if mode == 4:
                os._exit(3)
            if mode == 5:
                ctypes.string_at(0)
            if mode == 6:
                while True:
                    time.sleep(1)
            if mode == 7:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([1.5], dtype=np.float64))]))
                continue
            if mode == 8:
                return []
            if mode == 9:  # leaks until the stub's memory limit
                while True:
                    LEAKED.append(bytearray(16 << 20))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([mode], dtype=np.int32))]))
        return responses
