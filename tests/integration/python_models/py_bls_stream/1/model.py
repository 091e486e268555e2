"""A model that is not decoupled iterating exec(decoupled=True) on
py_stream_gate. MODE 0: takes the first response, marks it (the file GATE
+ ".first"), then takes the rest: the test opens GATE only once the mark
is there, so responses gathered before the call returns never come. OUT
the values. MODE 1: takes 3 responses, cancel()s the iterator, then
iterates to its end: OUT the 3 values and how many responses came after
the cancel (the last one the empty final one). MODE 2: MODE 1 through
async_exec(decoupled=True) in an async execute. MODE 3: iterates a
finished iterator a second time: OUT both passes' values."""
import numpy as np
import triton_python_backend_utils as pb_utils


def stream(mode, gate):
    return pb_utils.InferenceRequest(
        model_name="py_stream_gate", requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("MODE", np.array([mode], np.int32)),
                pb_utils.Tensor("GATE", np.array([gate.encode()], np.object_))])


def value(response):
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    out = pb_utils.get_output_tensor_by_name(response, "OUT")
    return None if out is None else int(out.as_numpy()[0])


def cancelled_after_three(responses):
    taken = [value(next(responses)) for _ in range(3)]
    responses.cancel()
    after = [value(r) for r in responses]
    return taken + [len(after)]


class TritonPythonModel:
    async def execute(self, requests):
        results = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            gate = pb_utils.get_input_tensor_by_name(request, "GATE").as_numpy()[0].decode()
            if mode == 0:
                responses = stream(0, gate).exec(decoupled=True)
                got = [value(next(responses))]
                with open(gate + ".first", "w"):
                    pass
                got += [value(r) for r in responses]
            elif mode == 1:
                got = cancelled_after_three(stream(1, gate).exec(decoupled=True))
            elif mode == 2:
                got = cancelled_after_three(await stream(1, gate).async_exec(decoupled=True))
            else:
                with open(gate, "w"):
                    pass
                responses = stream(0, gate).exec(decoupled=True)
                got = [value(r) for r in responses] + [value(r) for r in responses]
            results.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array(got, np.int32))]))
        return results
