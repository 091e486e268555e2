"""Decoupled, each request answered from a thread of its own. MODE 0: OUT
0, then once the file GATE exists OUT 1 with the final flag. MODE 1: OUT
0, 1, 2, ... every 5 ms until request.is_cancelled(), then the file GATE +
".cancelled" and the final flag alone (after 10 minutes without a cancel,
an error response instead)."""
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(i):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            gate = pb_utils.get_input_tensor_by_name(request, "GATE").as_numpy()[0].decode()
            threading.Thread(target=self.answer, daemon=True,
                             args=(request, mode, gate)).start()
        return None

    def answer(self, request, mode, gate):
        sender = request.get_response_sender()
        deadline = time.monotonic() + 600
        if mode == 0:
            sender.send(out(0))
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            sender.send(out(1), flags=FINAL)
            return
        i = 0
        while not request.is_cancelled() and time.monotonic() < deadline:
            sender.send(out(i))
            i += 1
            time.sleep(0.005)
        if not request.is_cancelled():
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "never cancelled")), flags=FINAL)
            return
        with open(gate + ".cancelled", "w"):
            pass
        sender.send(flags=FINAL)
