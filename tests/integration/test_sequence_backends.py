"""Sequence models on the backends users write them in: an ONNX graph whose
inputs include the control inputs (START, END, READY, CORRID) and the
implicit state, and whose outputs include the next state; a python model
that reads the same tensors with pb_utils.get_input_tensor_by_name and
returns the next state as a response tensor. Driven by tritonclient over
HTTP, gRPC and gRPC streaming. Also --max-sequences, the bound on live
sequences per model version."""

import pathlib
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

import harness
import sequence_models

ECHO_NAMES = ["OUTPUT", "START_OUT", "END_OUT", "READY_OUT", "CORRID_OUT"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = sequence_models.write_backend_repo(tmp_path_factory.mktemp("seq_be_repo"))
    server = harness.OspreyServer(
        repo, ["--model-control-mode=none",
               f"--backend-config=python,python-executable={sys.executable}"],
        workdir=tmp_path_factory.mktemp("seq_be_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def http_step(client, model, seq_id, value, start=False, end=False, outputs=("OUTPUT",)):
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput(n) for n in outputs],
                        sequence_id=seq_id, sequence_start=start, sequence_end=end)


def grpc_input(value):
    inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return inp


def out(result, name="OUTPUT"):
    return result.as_numpy(name).reshape(-1)[0]


# ---- ONNX -------------------------------------------------------------------


@pytest.mark.parametrize("model", ["onnx_seq", "py_seq"])
def test_control_inputs_reach_the_model(srv, model):
    """START, END, READY (int32, fp32, bool) and a uint64 CORRID arrive as
    the model's inputs with their configured values and types; the state
    carries the running sum."""
    c = httpclient.InferenceServerClient(srv.hostport)
    cid = 12345678901234
    first = http_step(c, model, cid, 5, start=True, outputs=ECHO_NAMES)
    middle = http_step(c, model, cid, 7, outputs=ECHO_NAMES)
    last = http_step(c, model, cid, 1, end=True, outputs=ECHO_NAMES)
    assert [out(first, n) for n in ECHO_NAMES] == [5, 1, 0.0, True, cid]
    assert [out(middle, n) for n in ECHO_NAMES] == [12, 0, 0.0, True, cid]
    assert [out(last, n) for n in ECHO_NAMES] == [13, 0, 1.0, True, cid]
    assert [first.as_numpy(n).dtype for n in ECHO_NAMES] == [
        np.int32, np.int32, np.float32, np.bool_, np.uint64]
    # the state output is the core's, never the client's
    with pytest.raises(InferenceServerException) as e:
        http_step(c, model, cid, 1, start=True, end=True, outputs=["OUTPUT_STATE"])
    assert "OUTPUT_STATE" in e.value.message()


def test_onnx_graph_sees_start(srv):
    """onnx_seq_file's initial state is 100 and its graph ignores the state
    on START: a START step shows INPUT alone only if START reached it."""
    c = httpclient.InferenceServerClient(srv.hostport)
    assert out(http_step(c, "onnx_seq_file", 3, 4, start=True)) == 4
    assert out(http_step(c, "onnx_seq_file", 3, 4)) == 8
    assert out(http_step(c, "onnx_seq_file", 3, 4, start=True)) == 4
    assert out(http_step(c, "onnx_seq_file", 3, 1, end=True)) == 5


@pytest.mark.parametrize("model", ["onnx_seq", "py_seq"])
def test_interleaved_sequences(srv, model):
    """Sequences at once, each a thread of dependent steps, batched
    together (oldest, preferred batch 4, two instances): each row of a
    batch gets its own control values and state."""
    errors = []

    def run(cid, k):
        try:
            c = httpclient.InferenceServerClient(srv.hostport)
            total = 0
            for step in range(15):
                total += k + step
                r = http_step(c, model, cid, k + step, start=step == 0, end=step == 14,
                              outputs=ECHO_NAMES)
                got = [out(r, n) for n in ECHO_NAMES]
                want = [total, int(step == 0), float(step == 14), True, cid]
                if got != want:
                    errors.append((cid, step, got, want))
        except Exception as e:  # reported below
            errors.append((cid, repr(e)))

    threads = [threading.Thread(target=run, args=(500 + k, k + 1)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("model", ["onnx_seq", "py_seq"])
def test_grpc_and_grpc_streaming(srv, model):
    g = grpcclient.InferenceServerClient(srv.grpc_url)
    r = g.infer(model, [grpc_input(2)], sequence_id=41, sequence_start=True)
    assert out(r) == 2
    assert out(g.infer(model, [grpc_input(3)], sequence_id=41, sequence_end=True)) == 5

    results, done = [], threading.Event()

    def callback(result, error):
        results.append(error if error else result)
        if len(results) == 6:
            done.set()

    g.start_stream(callback=callback)
    # two sequences interleaved on one stream, three steps each
    for step in range(3):
        for cid, value in ((42, 10), (43, 1)):
            g.async_stream_infer(model, [grpc_input(value)], sequence_id=cid,
                                 sequence_start=step == 0, sequence_end=step == 2,
                                 outputs=[grpcclient.InferRequestedOutput("OUTPUT"),
                                          grpcclient.InferRequestedOutput("CORRID_OUT")])
    assert done.wait(60 * harness.timeout_scale())
    g.stop_stream()
    assert not [r for r in results if isinstance(r, InferenceServerException)], results
    by_id = {}
    for r in results:
        by_id.setdefault(int(out(r, "CORRID_OUT")), []).append(int(out(r)))
    assert by_id == {42: [10, 20, 30], 43: [1, 2, 3]}


def test_onnx_state_across_many_steps_nonbatching(srv):
    """max_batch_size 0, an FP32 [2] state and a BOOL START: 300 steps,
    restarted halfway."""
    c = httpclient.InferenceServerClient(srv.hostport)
    inp = httpclient.InferInput("INPUT", [2], "FP32")
    inp.set_data_from_numpy(np.array([1.0, 0.5], dtype=np.float32))
    for step in range(300):
        start = step in (0, 150)
        r = c.infer("onnx_seq_nobatch", [inp], sequence_id="vec", sequence_start=start,
                    sequence_end=step == 299)
        n = step % 150 + 1
        assert r.as_numpy("OUTPUT").tolist() == [float(n), 0.5 * n], step


def test_onnx_auto_complete_leaves_out_sequence_tensors(srv):
    """A config without inputs and outputs: the graph's INPUT and outputs
    are filled in, not its control and state tensors (which the core feeds
    and takes), and no dynamic_batching is added to a sequence model."""
    c = httpclient.InferenceServerClient(srv.hostport)
    cfg = c.get_model_config("onnx_seq_auto")
    assert [i["name"] for i in cfg["input"]] == ["INPUT"]
    assert [o["name"] for o in cfg["output"]] == ECHO_NAMES
    assert "dynamic_batching" not in cfg
    assert cfg["max_batch_size"] == 8
    assert out(http_step(c, "onnx_seq_auto", 9, 6, start=True)) == 6
    assert out(http_step(c, "onnx_seq_auto", 9, 6, end=True)) == 12


def test_python_wrong_state_shape_fails_the_request_and_keeps_the_state(srv):
    """The core checks a state output against the state's dims: the model
    returns [1, 2] for a [1] state when INPUT is -1."""
    c = httpclient.InferenceServerClient(srv.hostport)
    assert out(http_step(c, "py_seq", 77, 5, start=True)) == 5
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "py_seq", 77, -1)
    assert e.value.message() == (
        "model 'py_seq': state output 'OUTPUT_STATE' has shape [1,2] (8 bytes), "
        "the state needs shape [1,1] (4 bytes)")
    assert out(http_step(c, "py_seq", 77, 2, end=True)) == 7


FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"


@pytest.mark.skipif(not FAKE_GPU_BIN.exists(),
                    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")
@pytest.mark.parametrize("model", ["onnx_seq", "py_seq"])
def test_sequences_on_gpu_instances(start_server, tmp_path, model):
    """The same models on two (fake) GPU instances: the control and state
    inputs go to the device with the batch, the next state comes back from
    it, and rows of one batch keep their own sequences."""
    repo = sequence_models.write_backend_repo(tmp_path / "repo", kind="KIND_GPU")
    server = start_server(repo, ["--model-control-mode=explicit", f"--load-model={model}",
                                 "--strict-gpu",
                                 f"--backend-config=python,python-executable={sys.executable}"],
                          binary=FAKE_GPU_BIN)
    errors = []

    def run(cid):
        try:
            c = httpclient.InferenceServerClient(server.hostport)
            total = 0
            for step in range(8):
                total += cid + step
                r = http_step(c, model, cid, cid + step, start=step == 0, end=step == 7,
                              outputs=ECHO_NAMES)
                got = [out(r, n) for n in ECHO_NAMES]
                want = [total, int(step == 0), float(step == 7), True, cid]
                if got != want:
                    errors.append((cid, step, got, want))
        except Exception as e:  # reported below
            errors.append((cid, repr(e)))

    threads = [threading.Thread(target=run, args=(cid,)) for cid in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- ONNX load checks --------------------------------------------------------


def _graph(inputs, outputs, nodes):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def _vector_graph(start_type=TensorProto.BOOL, start_dims=(1,), corrid=None):
    vi = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    inputs = [vi("INPUT", f32, [2]), vi("START", start_type, list(start_dims)),
              vi("INPUT_STATE", f32, [2])]
    if corrid is not None:
        inputs.append(vi("CORRID", corrid, [1]))
    return _graph(inputs, [vi("OUTPUT", f32, [2]), vi("OUTPUT_STATE", f32, [2])],
                  [helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["OUTPUT"]),
                   helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"])])


BOOL_START = ('    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
              "        bool_false_true: [ false, true ] } ] }")


def _vector_config(name, controls=BOOL_START, state_output="OUTPUT_STATE", dims=(2,)):
    block = sequence_models.sequence_block(controls=controls, dtype="TYPE_FP32", dims=dims)
    block = block.replace('output_name: "OUTPUT_STATE"', f'output_name: "{state_output}"')
    return harness.model_config(name, "onnxruntime", [("INPUT", "TYPE_FP32", [2])],
                                [("OUTPUT", "TYPE_FP32", [2])], 0, block)


LOAD_CASES = {
    "no_ready": (
        _vector_graph(),
        dict(controls=BOOL_START + ',\n    { name: "READY" control [ { kind: '
             "CONTROL_SEQUENCE_READY\n        bool_false_true: [ false, true ] } ] }"),
        "configuration specified sequence control 'READY', but model does not "
        "provide that input"),
    "start_dims": (
        _vector_graph(start_dims=(2,)), {},
        "unable to load model 'start_dims', sequence control 'START' in model has "
        "dims [2] but dims [1] is expected"),
    "start_type": (
        _vector_graph(start_type=TensorProto.FLOAT), {},
        "unable to load model 'start_type', sequence control 'START', the model "
        "expects data-type FLOAT but the model configuration specifies data-type "
        "TYPE_BOOL"),
    "no_state_output": (
        _vector_graph(), dict(state_output="NEXT_STATE"),
        "unable to load model 'no_state_output', configuration specified state "
        "output 'NEXT_STATE', but model does not provide that output"),
    "state_dims": (
        _vector_graph(), dict(dims=(3,)), "tensor 'INPUT_STATE'"),
}


def test_onnx_load_checks_the_sequence_tensors(start_server, tmp_path):
    """The graph must take each control and state input and give each
    state output, with the config's types and dims (Triton's onnxruntime
    texts where it has them)."""
    repo = tmp_path / "repo"
    for name, (graph, kwargs, _) in LOAD_CASES.items():
        harness.write_model(repo, name, _vector_config(name, **kwargs),
                            files={"model.onnx": graph})
    server = start_server(repo, ["--model-control-mode=explicit"])
    c = httpclient.InferenceServerClient(server.hostport)
    for name, (_, _, message) in LOAD_CASES.items():
        with pytest.raises(InferenceServerException) as e:
            c.load_model(name)
        assert message in e.value.message(), (name, e.value.message())


# ---- a state output that is also a config output ----------------------------


def _state_also_output_graph(batching):
    vi = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    b = ["batch"] if batching else []
    return _graph([vi("INPUT", f32, b + [2]), vi("START", TensorProto.BOOL, b + [1]),
                   vi("INPUT_STATE", f32, b + [2])],
                  [vi("OUTPUT", f32, b + [2]), vi("OUTPUT_STATE", f32, b + [2])],
                  [helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["OUTPUT"]),
                   helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"])])


@pytest.mark.parametrize("max_batch_size", [0, 4])
def test_state_output_may_also_be_a_config_output(start_server, tmp_path, max_batch_size):
    """A state's output_name listed in `output` too (as Triton allows: its
    onnxruntime backend gives the tensor to the response and to the
    state): a client that asks for it gets the next state, and the state
    carries on whether it asks or not."""
    repo = tmp_path / "repo"
    block = sequence_models.sequence_block(controls=BOOL_START, dtype="TYPE_FP32", dims=(2,))
    harness.write_model(
        repo, "state_out",
        harness.model_config("state_out", "onnxruntime", [("INPUT", "TYPE_FP32", [2])],
                             [("OUTPUT", "TYPE_FP32", [2]), ("OUTPUT_STATE", "TYPE_FP32", [2])],
                             max_batch_size, block),
        files={"model.onnx": _state_also_output_graph(max_batch_size > 0)})
    server = start_server(repo, ["--model-control-mode=none"])
    c = httpclient.InferenceServerClient(server.hostport)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    shape = [1, 2] if max_batch_size else [2]

    def step(value, outputs, start=False, client=c, mod=httpclient):
        inp = mod.InferInput("INPUT", shape, "FP32")
        inp.set_data_from_numpy(np.full(shape, value, np.float32))
        r = client.infer("state_out", [inp], sequence_id=7, sequence_start=start,
                         outputs=[mod.InferRequestedOutput(n) for n in outputs])
        return {n: r.as_numpy(n).reshape(-1).tolist() for n in outputs}

    assert step(1, ["OUTPUT", "OUTPUT_STATE"], start=True) == \
        {"OUTPUT": [1, 1], "OUTPUT_STATE": [1, 1]}
    assert step(2, ["OUTPUT"]) == {"OUTPUT": [3, 3]}
    assert step(3, ["OUTPUT_STATE"], client=g, mod=grpcclient) == {"OUTPUT_STATE": [6, 6]}
    # no output named: every config output, the state's among them
    inp = httpclient.InferInput("INPUT", shape, "FP32")
    inp.set_data_from_numpy(np.full(shape, 4, np.float32))
    r = c.infer("state_out", [inp], sequence_id=7)
    assert r.as_numpy("OUTPUT_STATE").reshape(-1).tolist() == [10, 10]
    assert r.as_numpy("OUTPUT").reshape(-1).tolist() == [10, 10]
    meta = c.get_model_metadata("state_out")
    assert [o["name"] for o in meta["outputs"]] == ["OUTPUT", "OUTPUT_STATE"]


def test_python_state_output_may_also_be_a_config_output(start_server, tmp_path):
    """The same with a python model, whose response carries the state
    tensor by name: the client that asks gets it, the state keeps a copy."""
    repo = tmp_path / "repo"
    outputs = [("OUTPUT", "TYPE_INT32", [1]), ("OUTPUT_STATE", "TYPE_INT32", [1])]
    outputs += sequence_models.ECHOES
    harness.write_model(
        repo, "py_state_out",
        harness.model_config("py_state_out", "python", [("INPUT", "TYPE_INT32", [1])],
                             outputs, 8, sequence_models.sequence_block()),
        files={"model.py": sequence_models.PYTHON_ACCUMULATOR.encode()})
    server = start_server(repo, ["--model-control-mode=none",
                                 f"--backend-config=python,python-executable={sys.executable}"])
    c = httpclient.InferenceServerClient(server.hostport)
    r = http_step(c, "py_state_out", 3, 5, start=True, outputs=("OUTPUT", "OUTPUT_STATE"))
    assert (out(r), out(r, "OUTPUT_STATE")) == (5, 5)
    assert out(http_step(c, "py_state_out", 3, 1)) == 6
    r = http_step(c, "py_state_out", 3, 1, outputs=("OUTPUT_STATE",))
    assert out(r, "OUTPUT_STATE") == 7
    assert out(http_step(c, "py_state_out", 3, 1, end=True)) == 8


# ---- --max-sequences ------------------------------------------------------------


def test_max_sequences_bounds_live_sequences(start_server, tmp_path):
    """--max-sequences=3: a fourth live sequence is refused (HTTP 503, gRPC
    UNAVAILABLE) until one of the three ends."""
    repo = sequence_models.write_backend_repo(tmp_path / "repo")
    server = start_server(repo, ["--model-control-mode=explicit", "--load-model=onnx_seq",
                                 "--max-sequences=3"])
    c = httpclient.InferenceServerClient(server.hostport)
    for cid in (1, 2, 3):
        assert out(http_step(c, "onnx_seq", cid, cid, start=True)) == cid
    full = "the sequence table is full (3 sequences in progress)"
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "onnx_seq", 4, 1, start=True)
    assert (e.value.status(), e.value.message()) == ("503", full)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        g.infer("onnx_seq", [grpc_input(1)], sequence_id=4, sequence_start=True)
    assert (e.value.status(), e.value.message()) == ("StatusCode.UNAVAILABLE", full)
    # a live sequence still runs; once one ends, the new one gets its place
    assert out(http_step(c, "onnx_seq", 2, 1, end=True)) == 3
    assert out(g.infer("onnx_seq", [grpc_input(9)], sequence_id=4, sequence_start=True)) == 9
    assert out(http_step(c, "onnx_seq", 4, 1)) == 10


def test_max_sequences_flag_bounds():
    for value in ("0", "65537", "many"):
        p = subprocess.run([harness.osprey_bin(), f"--max-sequences={value}",
                            "--model-repository=/nonexistent"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode != 0
        assert f"invalid value '{value}' for --max-sequences" in p.stderr
