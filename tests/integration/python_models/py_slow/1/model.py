"""A slow execute: marks its entry, then blocks until the file the request
names appears."""
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            gate = pb_utils.get_input_tensor_by_name(request, "GATE").as_numpy()
            with open(gate[0].decode() + ".entered", "w"):
                pass
            while not os.path.exists(gate[0].decode()):
                time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", gate)]))
        return responses
