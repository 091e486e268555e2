"""PARAMS: request.parameters(), as JSON with sorted keys."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PARAMS", np.array(
            [json.dumps(json.loads(r.parameters()), sort_keys=True).encode()],
            np.object_))]) for r in requests]
