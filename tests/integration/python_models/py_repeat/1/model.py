"""Decoupled, as Triton's repeat example: execute starts a thread per
request and returns None; the thread sends IN[i] (and its index) as one
response each, DELAY_MS apart, then the final flag on its own. It stops
early when the client has gone (is_cancelled) and says so in the log."""
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not pb_utils.using_decoupled_model_transaction_policy(
                json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("py_repeat must be decoupled")
        self.lock = threading.Lock()
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            thread = threading.Thread(target=self.respond, daemon=True,
                                      args=(request.get_response_sender(), values, delay))
            thread.start()
            with self.lock:
                self.threads.append(thread)
        return None

    def respond(self, sender, values, delay):
        for index, value in enumerate(values):
            if sender.is_cancelled():
                pb_utils.Logger.log_info("py_repeat: cancelled after %d responses" % index)
                break
            if delay:
                time.sleep(delay / 1000.0)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("IDX", np.array([index], np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join()
