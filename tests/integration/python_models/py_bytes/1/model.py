"""BYTES tensors arrive as numpy object arrays of bytes."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            strings = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            assert strings.dtype == np.object_
            upper = np.array([s.upper() for s in strings.flat], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", strings),
                pb_utils.Tensor("OUTPUT1", upper.reshape(strings.shape)),
            ]))
        return responses
