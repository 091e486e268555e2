"""Calls py_large (OUT = IN * 2) with an FP32 tensor of MIB MiB and checks
what comes back; OUT "ok" or what went wrong. MODE 0: exec() (through the
region). 1: exec(decoupled=True) (inline). 2: four exec() at once from
threads (one through the region, the others inline). 3: exec() from a
thread after execute returned (inline); OUT "started", the file named by
the model's folder + "/large.done" then holds the result."""
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils


def checked_call(mib, seed, decoupled=False):
    x = np.arange(mib << 18, dtype=np.float32) + seed
    request = pb_utils.InferenceRequest(
        model_name="py_large", requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", x)])
    try:
        if decoupled:
            response = next(request.exec(decoupled=True))
        else:
            response = request.exec()
    except pb_utils.TritonModelException as e:
        return "refused: " + str(e)
    if response.has_error():
        return "error: " + response.error().message()
    out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
    if out.shape != x.shape or not np.array_equal(out, x * 2):
        return "wrong result"
    return "ok"


class TritonPythonModel:
    def initialize(self, args):
        self.done = os.path.join(args["model_repository"], "large.done")

    def later(self, mib):
        result = checked_call(mib, 5)
        with open(self.done + ".tmp", "w") as f:
            f.write(result)
        os.rename(self.done + ".tmp", self.done)

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            mib = int(pb_utils.get_input_tensor_by_name(request, "MIB").as_numpy()[0])
            if mode in (0, 1):
                out = checked_call(mib, 1, decoupled=mode == 1)
            elif mode == 2:
                with ThreadPoolExecutor(4) as pool:
                    results = list(pool.map(lambda k: checked_call(mib, k), range(4)))
                out = ",".join(results)
            else:
                threading.Thread(target=self.later, args=(mib,), daemon=True).start()
                out = "started"
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([out.encode()], np.object_))]))
        return responses
