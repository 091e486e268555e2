"""Decoupled, one instance: two requests of a PAIR take turns. Request KEY 0
answers only once request KEY 1 of its pair has reached execute (an event
that execute sets); then their threads send OUT = 0, 1, 2, ... alternately
(KEY 0 the even values, KEY 1 the odd ones), ROUNDS responses each, and
the final flag. A wait that lasts past WAIT_S ends the request with an
error instead of hanging. KEY 9 kills the stub from execute."""
import os
import signal
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

WAIT_S = 20


class Pair:
    def __init__(self):
        self.second_arrived = threading.Event()
        self.turn = threading.Condition()
        self.next_value = 0


class TritonPythonModel:
    def initialize(self, args):
        self.lock = threading.Lock()
        self.pairs = {}

    def pair(self, pair_id):
        with self.lock:
            return self.pairs.setdefault(pair_id, Pair())

    def execute(self, requests):
        for request in requests:
            def value(name):
                return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0])
            key = value("KEY")
            if key == 9:
                os.kill(os.getpid(), signal.SIGKILL)
            pair = self.pair(value("PAIR"))
            if key == 1:
                pair.second_arrived.set()
            threading.Thread(target=self.respond, daemon=True,
                             args=(request.get_response_sender(), pair, key,
                                   value("ROUNDS"))).start()
        return None

    def respond(self, sender, pair, key, rounds):
        error = None
        if not pair.second_arrived.wait(WAIT_S):
            error = "request KEY 1 never reached execute"
        for i in range(rounds):
            if error:
                break
            mine = 2 * i + key
            with pair.turn:
                if not pair.turn.wait_for(lambda: pair.next_value == mine, WAIT_S):
                    error = "the other request never took its turn"
                    break
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([mine], np.int32))]))
                pair.next_value += 1
                pair.turn.notify_all()
        if error:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
