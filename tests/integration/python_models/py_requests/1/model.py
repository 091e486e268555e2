"""Echoes what execute() sees of each request of a batch
(test_python_requests.py): OUT its own IN rows, RANGE [0..IN[0][0]) (a
shape of its own), COUNT len(requests), ID, PARAMS, CORR (correlation id,
as "<type>:<value>") and WANTED (its requested outputs). MODE 1 answers
that request with an error, MODE 2 raises (the whole batch fails), MODE 3
returns one response too few."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def text(value):
    return np.array([[value.encode()]], dtype=np.object_)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        modes = [int(pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy()[0][0])
                 for r in requests]
        if 2 in modes:
            raise ValueError("MODE 2 fails the batch of %d" % len(requests))
        for request, mode in zip(requests, modes):
            if mode == 1:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "request %s refused" % request.request_id(),
                    pb_utils.TritonError.INVALID_ARG)))
                continue
            rows = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            corr = request.correlation_id()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", rows.copy()),
                pb_utils.Tensor("RANGE", np.arange(int(rows[0][0]), dtype=np.int32)
                                .reshape(1, -1)),
                pb_utils.Tensor("COUNT", np.array([[len(requests)]], dtype=np.int32)),
                pb_utils.Tensor("ID", text(request.request_id())),
                pb_utils.Tensor("PARAMS", text(json.dumps(
                    json.loads(request.parameters()), sort_keys=True))),
                pb_utils.Tensor("CORR", text("%s:%s" % (type(corr).__name__, corr))),
                pb_utils.Tensor("WANTED", text(",".join(
                    sorted(request.requested_output_names())))),
            ]))
        if 3 in modes:
            responses.pop()
        return responses
