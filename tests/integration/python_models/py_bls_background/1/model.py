"""BLS from threads of a model that is not decoupled, outside execute.

initialize starts a thread that waits for the file `go` in the model's
folder, then calls py_add_sub (exec, two async_exec gathered) and iterates
py_square (exec(decoupled=True)) while no request runs, and writes what came
back, as JSON, to `done` there. execute, MODE 0: starts a thread that waits
for the file GATE (after execute returned), makes the same calls (COUNT
exec calls, COUNT = 20) and writes GATE + ".done"; OUT "started". MODE 1:
OUT = GATE (a plain request). MODE 2: starts a thread that calls py_slow
with GATE and ends the stub once py_slow holds the call (the file GATE +
".entered") and the file GATE + ".die" exists. MODE 3: OUT = what the BLS call in initialize raised.
finalize logs what a BLS call there raised.
"""
import asyncio
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

COUNT = 20


def wait_for_file(path):
    deadline = time.monotonic() + 600
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def write_json(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.rename(path + ".tmp", path)


def add(x, i):
    response = pb_utils.InferenceRequest(
        model_name="py_add_sub", requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", np.full(4, x, np.float32)),
                pb_utils.Tensor("INPUT1", np.full(4, i, np.float32))])
    return response


def first_value(response):
    if response.has_error():
        return "error: " + response.error().message()
    return float(pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()[0])


def calls(count):
    """exec count times, two async_exec gathered, one exec(decoupled=True)
    iterated: what each gave."""
    execs = [first_value(add(100, i).exec()) for i in range(count)]

    async def gather():
        return await asyncio.gather(add(1, 2).async_exec(), add(3, 4).async_exec())
    gathered = [first_value(r) for r in asyncio.run(gather())]
    square = pb_utils.InferenceRequest(
        model_name="py_square", requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", np.array([3], np.int32))])
    streamed = []
    for response in square.exec(decoupled=True):
        out = pb_utils.get_output_tensor_by_name(response, "OUT")
        streamed.append(None if out is None else int(out.as_numpy()[0]))
    return {"exec": execs, "async": gathered, "stream": streamed}


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]
        try:
            add(0, 0).exec()
            self.init_error = "a BLS call from initialize was served"
        except pb_utils.TritonModelException as e:
            self.init_error = str(e)
        threading.Thread(target=self.when_told, daemon=True).start()

    def when_told(self):
        wait_for_file(os.path.join(self.folder, "go"))
        write_json(os.path.join(self.folder, "done"), calls(1))

    def after_execute(self, gate):
        wait_for_file(gate)
        write_json(gate + ".done", calls(COUNT))

    def end_stub_mid_call(self, gate):
        def end_stub():
            wait_for_file(gate + ".entered")
            wait_for_file(gate + ".die")
            os._exit(1)
        threading.Thread(target=end_stub, daemon=True).start()
        pb_utils.InferenceRequest(
            model_name="py_slow", requested_output_names=["OUT"],
            inputs=[pb_utils.Tensor("GATE", np.array([gate.encode()], np.object_))]
        ).exec()

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            gate = pb_utils.get_input_tensor_by_name(request, "GATE").as_numpy()[0].decode()
            out = "started"
            if mode == 0:
                threading.Thread(target=self.after_execute, args=(gate,), daemon=True).start()
            elif mode == 1:
                out = gate
            elif mode == 2:
                threading.Thread(target=self.end_stub_mid_call, args=(gate,),
                                 daemon=True).start()
            else:
                out = self.init_error
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([out.encode()], np.object_))]))
        return responses

    def finalize(self):
        try:
            add(0, 0).exec()
            message = "a BLS call from finalize was served"
        except pb_utils.TritonModelException as e:
            message = str(e)
        pb_utils.Logger.log_info("py_bls_background finalize: " + message)
