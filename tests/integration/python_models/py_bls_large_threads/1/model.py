"""Decoupled: a thread calls py_large (OUT = IN * 2) with an FP32 tensor
of MIB MiB, once with exec() and once with exec(decoupled=True), and
answers with one response per call: "ok" or what went wrong."""
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def checked_call(mib, decoupled):
    x = np.arange(mib << 18, dtype=np.float32)
    request = pb_utils.InferenceRequest(
        model_name="py_large", requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", x)])
    try:
        response = next(request.exec(decoupled=True)) if decoupled else request.exec()
    except pb_utils.TritonModelException as e:
        return "refused: " + str(e)
    if response.has_error():
        return "error: " + response.error().message()
    out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
    return "ok" if np.array_equal(out, x * 2) else "wrong result"


def text(value):
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("OUT", np.array([value.encode()], np.object_))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mib = int(pb_utils.get_input_tensor_by_name(request, "MIB").as_numpy()[0])
            threading.Thread(target=self.answer, daemon=True,
                             args=(request.get_response_sender(), mib)).start()
        return None

    def answer(self, sender, mib):
        sender.send(text(checked_call(mib, False)))
        sender.send(text(checked_call(mib, True)), flags=FINAL)
