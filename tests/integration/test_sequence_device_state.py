"""Implicit state kept on a GPU instance's device between requests, on two
fake GPUs (osprey_fakegpu): an ONNX sequence model on KIND_GPU carries its
state across many steps with correct values under `direct` and `oldest`,
with interleaved sequences, a restarting START and failed requests that
leave the state as it was; and the fake CUDA runtime's copy log
(FAKE_CUDA_COPY_LOG) shows that the state never goes between host and
device once the model is loaded, only device to device."""

import pathlib
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

import harness
import sequence_models

FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"
pytestmark = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists(),
    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")

# The state is 7 floats, 28 bytes a row: no other tensor of these models
# has a multiple of 28 bytes in a batch of at most 4 rows (INPUT, the
# controls and OUTPUT are 4 bytes a row), so every copy of a multiple of
# 28 bytes in the copy log is a copy of states.
STATE_DIMS = 7
STATE_ROW_BYTES = 4 * STATE_DIMS
# OUTPUT = the sum of the state's 7 elements, each the running sum of
# INPUT: OUTPUT = OUTPUT_SCALE * running sum.
OUTPUT_SCALE = float(STATE_DIMS)

CONTROLS = (
    '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
    "        fp32_false_true: [ 0, 1 ] } ] },\n"
    '    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY\n'
    "        fp32_false_true: [ 0, 1 ] } ] }")
STRATEGIES = {
    "direct": sequence_models.DIRECT,
    "oldest": ("oldest {\n    max_candidate_sequences: 4\n"
               "    preferred_batch_size: [ 4 ]\n"
               "    max_queue_delay_microseconds: 2000\n  }"),
}


def vector_accumulator():
    """INPUT [b,n] (n is 1 for a good request), START and READY [b,1]
    FP32, INPUT_STATE [b,7] FP32 in: OUTPUT_STATE = INPUT_STATE * (1 -
    START) * READY + INPUT (each of the 7 the running sum), OUTPUT = the
    sum of the 7 ([b,1]). A request whose INPUT has n=2 fails (no
    broadcast to 7)."""
    import onnx
    f32 = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    inputs = [vi("INPUT", f32, ["batch", "n"]), vi("START", f32, ["batch", 1]),
              vi("READY", f32, ["batch", 1]),
              vi("INPUT_STATE", f32, ["batch", STATE_DIMS])]
    outputs = [vi("OUTPUT", f32, ["batch", 1]),
               vi("OUTPUT_STATE", f32, ["batch", STATE_DIMS])]
    # No constant of 28 bytes (the runtime uploads its constants when a
    # plan first runs): each state element keeps the same running sum.
    consts = [helper.make_tensor("one", f32, [1], [1.0]),
              helper.make_tensor("axis1", TensorProto.INT64, [1], [1])]
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["not_start"]),
        helper.make_node("Mul", ["not_start", "READY"], ["keep"]),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["kept", "INPUT"], ["OUTPUT_STATE"]),
        helper.make_node("ReduceSum", ["OUTPUT_STATE", "axis1"], ["OUTPUT"],
                         keepdims=1),
    ]
    graph = helper.make_graph(nodes, "seq_vec7", inputs, outputs, consts)
    model = helper.make_model(graph, producer_name="osprey-tests",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_repo(path):
    path = pathlib.Path(path)
    for strategy, block in STRATEGIES.items():
        name = f"gpu_state_{strategy}"
        extra = (sequence_models.sequence_block(
            block, controls=CONTROLS, dtype="TYPE_FP32", dims=(STATE_DIMS,))
            + "instance_group [ { count: 1 kind: KIND_GPU } ]\n")  # one per GPU
        harness.write_model(
            path, name,
            harness.model_config(name, "onnxruntime", [("INPUT", "TYPE_FP32", [-1])],
                                 [("OUTPUT", "TYPE_FP32", [1])], 4, extra),
            files={"model.onnx": vector_accumulator()})
    return path


@pytest.fixture
def gpu_server(start_server, tmp_path, monkeypatch):
    """The fake-GPU server with both models, and its copy log's path."""
    log = tmp_path / "copies.log"
    monkeypatch.setenv("FAKE_CUDA_COPY_LOG", str(log))
    repo = write_repo(tmp_path / "repo")
    server = start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)
    return server, log


def step(client, model, seq_id, values, start=False, end=False):
    inp = httpclient.InferInput("INPUT", [1, len(values)], "FP32")
    inp.set_data_from_numpy(np.array([values], dtype=np.float32))
    r = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT")],
                     sequence_id=seq_id, sequence_start=start, sequence_end=end)
    return float(r.as_numpy("OUTPUT").reshape(-1)[0])


def copies(log):
    """The copy log's entries: [(kind, bytes), ...]."""
    return [(k, int(n)) for k, n in (line.split() for line in log.read_text().splitlines())]


def state_copies(entries, kind):
    return [n for k, n in entries if k == kind and n % STATE_ROW_BYTES == 0]


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_state_stays_on_the_device_across_many_steps(gpu_server, strategy):
    """Six interleaved sequences of 40 steps each (a START again halfway
    restarts the sum) on two GPU instances: every OUTPUT is right, and
    once the initial values are on the instances (at load) the state rows
    only move device to device: none goes host to device or device to
    host."""
    server, log = gpu_server
    model = f"gpu_state_{strategy}"
    c = httpclient.InferenceServerClient(server.hostport)
    # Loading uploaded each state's initial value once per instance: two
    # instances (one per fake GPU) of each of the two models.
    assert state_copies(copies(log), "H2D") == [STATE_ROW_BYTES] * 4
    before = len(copies(log))

    steps, errors = 40, []

    def run(cid):
        try:
            client = httpclient.InferenceServerClient(server.hostport)
            total = 0
            for k in range(steps):
                restart = k in (0, steps // 2)
                value = cid * 10 + k % 7
                total = value if restart else total + value
                got = step(client, model, cid, [value], start=restart, end=k == steps - 1)
                if got != total * OUTPUT_SCALE:
                    errors.append((cid, k, got, total * OUTPUT_SCALE))
        except Exception as e:  # reported below
            errors.append((cid, repr(e)))

    threads = [threading.Thread(target=run, args=(cid,)) for cid in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    during = copies(log)[before:]
    assert state_copies(during, "H2D") == []
    assert state_copies(during, "D2H") == []
    # each step: its row gathered into the batch, its next state out of it
    assert len([n for k, n in during
                if k == "D2D" and n == STATE_ROW_BYTES]) >= 2 * 6 * steps


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_failed_request_leaves_the_state_on_the_device(gpu_server, strategy):
    """A request the model fails (an INPUT that does not broadcast to the
    state) leaves its sequence's state as it was; a failed START leaves
    the initial value (zeros)."""
    server, _ = gpu_server
    model = f"gpu_state_{strategy}"
    c = httpclient.InferenceServerClient(server.hostport)
    assert step(c, model, 7, [1], start=True) == 1 * OUTPUT_SCALE
    assert step(c, model, 7, [2]) == 3 * OUTPUT_SCALE
    with pytest.raises(InferenceServerException):
        step(c, model, 7, [5, 5])
    assert step(c, model, 7, [4]) == 7 * OUTPUT_SCALE
    with pytest.raises(InferenceServerException):
        step(c, model, 7, [5, 5])
    assert step(c, model, 7, [1], end=True) == 8 * OUTPUT_SCALE

    with pytest.raises(InferenceServerException):
        step(c, model, 8, [5, 5], start=True)
    assert step(c, model, 8, [6]) == 6 * OUTPUT_SCALE
    assert step(c, model, 8, [1], end=True) == 7 * OUTPUT_SCALE
