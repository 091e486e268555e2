"""Model warmup (model_warmup in config.pbtxt): samples of each data kind
run on every instance while the model loads, before it is ready; a failing
sample fails the load with Triton's message."""

import re
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness
import sequence_models


def warmup(name, inputs, batch_size=1, count=1):
    parts = []
    for key, dtype, dims, source in inputs:
        parts.append(f'    inputs {{ key: "{key}" value {{ data_type: {dtype}\n'
                     f"      dims: {harness._dims(dims)} {source} }} }}\n")
    return (f'model_warmup {{ name: "{name}" batch_size: {batch_size} count: {count}\n'
            + "".join(parts) + "}\n")


def simple_with(name, samples, instances=1):
    return (harness.add_sub_config(name)
            + f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
            + "".join(samples))


def both_inputs(source):
    return [("INPUT0", "TYPE_INT32", [16], source), ("INPUT1", "TYPE_INT32", [16], source)]


@pytest.fixture(scope="module")
def warm_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("warm_repo")
    harness.write_model(repo, "warm_zero", simple_with(
        "warm_zero", [warmup("zero sample", both_inputs("zero_data: true"), 4, 3)],
        instances=2))
    harness.write_model(repo, "warm_random", simple_with(
        "warm_random", [warmup("random sample", both_inputs("random_data: true"), 8)]))
    harness.write_model(repo, "warm_string", harness.identity_config("warm_string", "TYPE_STRING", [-1])
                        + warmup("strings", [("INPUT0", "TYPE_STRING", [3], "random_data: true")], 2))
    mdir = harness.write_model(repo, "warm_file", simple_with(
        "warm_file", [warmup("file sample", both_inputs('input_data_file: "ones"'), 2)]))
    (mdir / "warmup").mkdir()
    (mdir / "warmup" / "ones").write_bytes(np.ones(16, dtype=np.int32).tobytes())
    mdir = harness.write_model(repo, "warm_short_file", simple_with(
        "warm_short_file", [warmup("short", both_inputs('input_data_file: "short"'))]))
    (mdir / "warmup").mkdir()
    (mdir / "warmup" / "short").write_bytes(b"\0" * 12)
    mdir = harness.write_model(repo, "warm_long_file", simple_with(
        "warm_long_file", [warmup("long", both_inputs('input_data_file: "long"'))]))
    (mdir / "warmup").mkdir()
    (mdir / "warmup" / "long").write_bytes(b"\1" * 100)  # the first 64 bytes are used
    harness.write_model(repo, "warm_no_data", simple_with(
        "warm_no_data", [warmup("none", both_inputs(""))]))
    harness.write_model(repo, "warm_variable_dims", simple_with(
        "warm_variable_dims", [warmup("var", [("INPUT0", "TYPE_INT32", [-1], "zero_data: true")])]))
    # batch_size 0: Triton skips the sample (this one would fail)
    harness.write_model(repo, "warm_batch0", simple_with(
        "warm_batch0", [warmup("skipped", both_inputs(""), batch_size=0)]))
    harness.write_model(repo, "warm_missing_file", simple_with(
        "warm_missing_file", [warmup("missing", both_inputs('input_data_file: "nope"'))]))
    harness.write_model(repo, "warm_wrong_input", simple_with(
        "warm_wrong_input", [warmup("typo", [("INPUT9", "TYPE_INT32", [16], "zero_data: true")])]))
    # A sequence model's sample runs straight on the instance: without the
    # state input the accumulator has nothing to add to and fails...
    harness.write_model(repo, "warm_seq_failing", sequence_models.accumulator_config(
        "warm_seq_failing", sequence_models.DIRECT,
        extra=warmup("zero sample", [("INPUT", "TYPE_INT32", [1], "zero_data: true")])))
    # ...and with it (and its controls) the sample runs.
    controls = [("INPUT", "TYPE_INT32", [1], "random_data: true"),
                ("INPUT_STATE", "TYPE_INT32", [1], "zero_data: true"),
                ("START", "TYPE_INT32", [1], "zero_data: true"),
                ("END", "TYPE_FP32", [1], "zero_data: true"),
                ("READY", "TYPE_BOOL", [1], "zero_data: true")]
    harness.write_model(repo, "warm_seq", sequence_models.accumulator_config(
        "warm_seq", sequence_models.DIRECT, corrid=None,
        extra=warmup("with state", controls, 2)))
    return repo


@pytest.fixture(scope="module")
def warm_server(tmp_path_factory, warm_repo):
    server = harness.OspreyServer(warm_repo, ["--model-control-mode=explicit"],
                                  workdir=tmp_path_factory.mktemp("warm_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def load(server, name):
    httpclient.InferenceServerClient(server.hostport).load_model(name)


def load_error(server, name):
    c = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as e:
        c.load_model(name)
    assert not c.is_model_ready(name)
    return e.value.message()


@pytest.mark.parametrize("name,sample,times", [
    ("warm_zero", "zero sample", "3 time(s) on each of 2 instance(s)"),
    ("warm_random", "random sample", "1 time(s) on each of 1 instance(s)"),
    ("warm_string", "strings", "1 time(s) on each of 1 instance(s)"),
    ("warm_file", "file sample", "1 time(s) on each of 1 instance(s)"),
    ("warm_long_file", "long", "1 time(s) on each of 1 instance(s)"),
    ("warm_seq", "with state", "1 time(s) on each of 1 instance(s)"),
])
def test_samples_run_before_ready_and_do_not_count(warm_server, name, sample, times):
    load(warm_server, name)
    assert (f"model '{name}' version 1: warmup sample '{sample}' ran {times}"
            in warm_server.log())
    c = httpclient.InferenceServerClient(warm_server.hostport)
    assert c.is_model_ready(name)
    stats = c.get_inference_statistics(name)["model_stats"][0]
    assert stats["execution_count"] == 0 and stats["inference_count"] == 0
    cfg = c.get_model_config(name)
    assert cfg["model_warmup"][0]["name"] == sample


def test_batch_size_0_sample_is_skipped(warm_server):
    load(warm_server, "warm_batch0")
    assert "warmup sample 'skipped' ran" not in warm_server.log()


def test_model_serves_after_warmup(warm_server):
    load(warm_server, "warm_file")
    c = httpclient.InferenceServerClient(warm_server.hostport)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    r = c.infer("warm_file", inputs)
    assert (r.as_numpy("OUTPUT0") == 2 * a).all()


def test_config_shows_warmup(warm_server):
    load(warm_server, "warm_zero")
    cfg = httpclient.InferenceServerClient(warm_server.hostport).get_model_config("warm_zero")
    assert cfg["model_warmup"] == [{
        "name": "zero sample", "batch_size": 4, "count": 3,
        "inputs": {n: {"data_type": "TYPE_INT32", "dims": [16], "zero_data": True}
                   for n in ("INPUT0", "INPUT1")}}]


def test_failing_sample_fails_the_load(warm_server):
    msg = load_error(warm_server, "warm_seq_failing")
    assert ("failed to run warmup sample 'zero sample': accumulator model "
            "'warm_seq_failing': the batch has no state input 'INPUT_STATE'") in msg


@pytest.mark.parametrize("name,expected", [
    ("warm_short_file", "failed to run warmup sample 'short': warmup setting expects "
                        "64 bytes, but the data provided from shortonly has 12 bytes"),
    ("warm_no_data", "failed to run warmup sample 'none': warmup setting expects "
                     "input 'INPUT0' to have input_data_type set"),
    ("warm_variable_dims", "failed to run warmup sample 'var': warmup setting expects "
                           "all variable-size dimensions are specified for input 'INPUT0'"),
    ("warm_missing_file", "failed to run warmup sample 'missing': failed to read "
                          "input data file 'warmup/nope' of input 'INPUT0'"),
    ("warm_wrong_input", "failed to run warmup sample 'typo': unexpected inference "
                         "input 'INPUT9' for model 'warm_wrong_input'"),
])
def test_bad_sample_fails_the_load(warm_server, warm_repo, name, expected):
    msg = load_error(warm_server, name)
    assert expected in msg
    assert str(warm_repo) not in msg  # no server path in a reply
    # the server goes on serving
    load(warm_server, "warm_random")


def test_grpc_config_shows_warmup(warm_server):
    import tritonclient.grpc as grpcclient
    load(warm_server, "warm_file")
    c = grpcclient.InferenceServerClient(warm_server.grpc_url)
    (w,) = c.get_model_config("warm_file", as_json=True)["config"]["model_warmup"]
    assert w["name"] == "file sample" and w["batch_size"] == 2 and w["count"] == 1
    assert w["inputs"]["INPUT0"] == {"data_type": "TYPE_INT32", "dims": ["16"],
                                     "input_data_file": "ones"}


def test_config_round_trips_through_the_load_api(warm_server):
    """What GET .../config returns loads again as a load override (Triton's
    qa tests edit and send it back), warmup and sequence batching kept."""
    import json
    c = httpclient.InferenceServerClient(warm_server.hostport)
    for name in ("warm_zero", "warm_seq"):
        load(warm_server, name)
        before = c.get_model_config(name)
        c.load_model(name, config=json.dumps(before))
        assert c.get_model_config(name) == before


FINAL_ONLY_PY = b"""import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            r.get_response_sender().send(
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

FAILING_PY = b"""import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            error=pb_utils.TritonError("An Error Occurred")) for r in requests]
"""


def python_warm(name, decoupled):
    return (harness.model_config(name, "python", [("INPUT", "TYPE_FP32", [4])],
                                 [("OUTPUT", "TYPE_FP32", [4])], max_batch_size=0)
            + ("model_transaction_policy { decoupled: true }\n" if decoupled else "")
            + warmup("zero sample", [("INPUT", "TYPE_FP32", [4], "zero_data: true")]))


def test_python_samples_as_tritons_qa_expects(start_server, tmp_path):
    """Triton's qa/L0_warmup: a decoupled model that answers with the final
    flag alone warms up (its verbose 'is running warmup sample' line is
    logged), and a response error fails the load as
    `failed to run warmup sample '<name>': <error>; `."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "warm_decoupled", python_warm("warm_decoupled", True),
                        files={"model.py": FINAL_ONLY_PY})
    harness.write_model(repo, "warm_py_failing", python_warm("warm_py_failing", False),
                        files={"model.py": FAILING_PY})
    srv = start_server(repo, ["--model-control-mode=explicit", "--log-verbose=1",
                              f"--backend-config=python,python-executable={sys.executable}"])
    load(srv, "warm_decoupled")
    assert ("model 'warm_decoupled' instance warm_decoupled_0_0 is running warmup "
            "sample 'zero sample' for iteration 1") in srv.log()
    msg = load_error(srv, "warm_py_failing")
    assert "failed to run warmup sample 'zero sample': An Error Occurred; " in msg
