"""Decoupled: execute starts a thread per request and returns None; the
thread makes BLS calls and sends one response per result (OUT, INDEX i),
then the final flag. MODE 0: COUNT exec() calls of py_add_sub, X + i.
1: COUNT async_exec() calls gathered with asyncio.run, X + i. 2:
exec(decoupled=True) on py_square (IN = COUNT): one response per response
of it, OUT = X * its value. 3: a BLS call to py_slow with GATE while
another thread ends the stub once py_slow has started (the file GATE +
".entered"). 4: a BLS call to a model that does not exist, its error sent
as an error response. 5: the error the BLS call in initialize got, as an
error response. 6: one exec() from execute itself, answered from execute.
7: exec(decoupled=True) on py_stream_gate (MODE 1, GATE), cancel() after
COUNT responses, then the rest until its end: one response, OUT = X,
INDEX = how many came after the cancel.
"""
import asyncio
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def add_request(x, i, model="py_add_sub"):
    return pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", x),
                pb_utils.Tensor("INPUT1", np.full(4, i, np.float32))])


def result(out, i):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("OUT", np.asarray(out, np.float32)),
        pb_utils.Tensor("INDEX", np.array([i], np.int32))])


def sum_or_error(response, i):
    if response.has_error():
        return pb_utils.InferenceResponse(error=response.error())
    return result(pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy(), i)


class TritonPythonModel:
    def initialize(self, args):
        x = np.zeros(4, np.float32)
        try:
            add_request(x, 0).exec()
            self.init_error = "a BLS call from initialize was served"
        except pb_utils.TritonModelException as e:
            self.init_error = str(e)
        self.lock = threading.Lock()
        self.threads = []

    def execute(self, requests):
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            mode, count = int(get("MODE")[0]), int(get("COUNT")[0])
            x, gate = get("X").copy(), get("GATE")[0].decode()
            sender = request.get_response_sender()
            if mode == 6:
                sender.send(sum_or_error(add_request(x, count).exec(), 0), flags=FINAL)
                continue
            thread = threading.Thread(target=self.answer, daemon=True,
                                      args=(sender, mode, count, x, gate))
            thread.start()
            with self.lock:
                self.threads.append(thread)
        return None

    def answer(self, sender, mode, count, x, gate):
        if mode == 0:
            for i in range(count):
                sender.send(sum_or_error(add_request(x, i).exec(), i))
        elif mode == 1:
            async def gather():
                return await asyncio.gather(
                    *(add_request(x, i).async_exec() for i in range(count)))
            for i, response in enumerate(asyncio.run(gather())):
                sender.send(sum_or_error(response, i))
        elif mode == 2:
            square = pb_utils.InferenceRequest(
                model_name="py_square", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([count], np.int32))])
            for i, response in enumerate(square.exec(decoupled=True)):
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:  # None: the final flag alone
                    sender.send(result(x * out.as_numpy()[0], i))
        elif mode == 3:
            def end_stub():
                # Once py_slow holds the call (at most 5 min), the stub dies.
                deadline = time.monotonic() + 300
                while (not os.path.exists(gate + ".entered") and
                       time.monotonic() < deadline):
                    time.sleep(0.01)
                os._exit(1)
            threading.Thread(target=end_stub, daemon=True).start()
            slow = pb_utils.InferenceRequest(
                model_name="py_slow", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("GATE", np.array([gate.encode()], np.object_))])
            slow.exec()
            sender.send(result(x, 0))  # never reached: the stub is gone
        elif mode == 4:
            response = add_request(x, 0, model="no_such_model").exec()
            sender.send(sum_or_error(response, 0))
        elif mode == 7:
            stream = pb_utils.InferenceRequest(
                model_name="py_stream_gate", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("MODE", np.array([1], np.int32)),
                        pb_utils.Tensor("GATE", np.array([gate.encode()], np.object_))])
            responses = stream.exec(decoupled=True)
            for _ in range(count):
                next(responses)
            responses.cancel()
            sender.send(result(x, sum(1 for _ in responses)))
        elif mode == 5:
            sender.send(pb_utils.InferenceResponse(
                error=pb_utils.TritonError(self.init_error)))
        sender.send(flags=FINAL)

    def finalize(self):
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join()
