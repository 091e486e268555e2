"""pb_utils.InferenceRequest(..., parameters=..., timeout=...). MODE 0:
exec() on py_params with a dict of a str, an int and a bool; OUT what
py_params saw. 1: the same with parameters as a JSON object's text,
through exec(decoupled=True) (the inline path). 2: parameters and
timeouts refused at construction; OUT the messages, " | " between them.
3: exec() on py_queued with a timeout of 0.1 s (its queue holds a request
up to 3 s and times it out after 2); OUT the response's error. 4: the
same through exec(decoupled=True)."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def call(model, parameters=None, timeout=0, decoupled=False):
    batching = model == "py_queued"  # its IN is [batch, 1]
    request = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUT" if batching else "PARAMS"],
        inputs=[pb_utils.Tensor("IN", np.array([[1]] if batching else [1], np.int32))],
        parameters=parameters, timeout=timeout)
    if decoupled:
        return list(request.exec(decoupled=True))[0]
    return request.exec()


def text(response):
    if response.has_error():
        return "error: " + response.error().message()
    out = response.output_tensors()[0].as_numpy()
    return out[0].decode() if out.dtype == np.object_ else str(out.tolist())


def refusals():
    messages = []
    for bad in ({1: "x"}, {"f": 1.5}, {"l": [1]}, "not json", "[1]", 7,
                {"big": 1 << 64}):
        try:
            pb_utils.InferenceRequest(
                model_name="py_params", requested_output_names=["PARAMS"],
                inputs=[], parameters=bad)
            messages.append("accepted %r" % (bad,))
        except pb_utils.TritonModelException as e:
            messages.append(str(e))
    for bad in (-1, 1.5, "7"):
        try:
            pb_utils.InferenceRequest(
                model_name="py_params", requested_output_names=["PARAMS"],
                inputs=[], timeout=bad)
            messages.append("accepted timeout %r" % (bad,))
        except pb_utils.TritonModelException as e:
            messages.append(str(e))
    return " | ".join(messages)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode == 0:
                out = text(call("py_params", {"s": "text", "i": -7, "b": True}))
            elif mode == 1:
                out = text(call("py_params", json.dumps({"k": "v", "n": 3}),
                                decoupled=True))
            elif mode == 2:
                out = refusals()
            else:
                out = text(call("py_queued", timeout=100000, decoupled=mode == 4))
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([out.encode()], np.object_))]))
        return responses
