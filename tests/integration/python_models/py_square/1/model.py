"""Decoupled, as Triton's square example: IN responses each carrying IN,
sent from execute, the last one with the final flag (none at all for 0:
only the flag). IN < 0: one error response, final. IN 1000: one response
with the final flag, then a send that must fail (its text goes to the
log). execute must return None; IN -2 returns a list instead."""
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.int32))])
            if n == -2:
                return [out]
            if n < 0:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative count %d" % n)), flags=FINAL)
            elif n == 1000:
                sender.send(out, flags=FINAL)
                try:
                    sender.send(out)
                except pb_utils.TritonModelException as e:
                    pb_utils.Logger.log_info("py_square: " + str(e))
            elif n == 0:
                sender.send(flags=FINAL)
            else:
                for i in range(n):
                    sender.send(out, flags=FINAL if i == n - 1 else 0)
        return None
