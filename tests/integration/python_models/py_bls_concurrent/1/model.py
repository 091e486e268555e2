"""Two BLS calls in flight at once from a model that is not decoupled, as
Triton's examples/bls/async_model.py makes them (asyncio.gather of
async_exec) and as a thread pool does (exec from two threads)."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils


def slow_request(gate):
    return pb_utils.InferenceRequest(
        model_name="py_slow", requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("GATE", np.array([gate], np.object_))])


def out_of(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0]


def exec_streamed(gate):
    responses = list(slow_request(gate).exec(decoupled=True))
    return [r for r in responses if r.output_tensors()][0]


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            gates = pb_utils.get_input_tensor_by_name(request, "GATE").as_numpy()
            if mode == 0:
                got = await asyncio.gather(
                    *[slow_request(g).async_exec() for g in gates])
            else:
                call = (lambda g: slow_request(g).exec()) if mode == 1 else exec_streamed
                with ThreadPoolExecutor(max_workers=2) as pool:
                    got = list(pool.map(call, gates))
            out = np.array([out_of(r) for r in got], np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
