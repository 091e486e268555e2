"""Ensembles (platform "ensemble"), driven by tritonclient over HTTP and
gRPC: a diamond of add_sub and identity steps, an erroring step, concurrent
requests, Triton's load checks and messages, unloading a step model, the
statistics of the ensemble and its steps, and step traces as children of
the ensemble's trace. Configs are written as Triton's docs write them."""

import concurrent.futures
import json
import pathlib
import sys
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

def io_block(kind, names, dtype="TYPE_INT32", dims="[ 16 ]"):
    items = ",\n".join(
        f'  {{ name: "{n}" data_type: {dtype} dims: {dims} }}' for n in names)
    return f"{kind} [\n{items}\n]\n"


def step(model, inputs, outputs):
    """One ensemble_scheduling step; inputs/outputs: {model tensor: ensemble tensor}."""
    ins = "".join(f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in inputs.items())
    outs = "".join(f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in outputs.items())
    return ("    {\n"
            f'      model_name: "{model}"\n'
            "      model_version: -1\n"
            f"{ins}{outs}"
            "    }")


def ensemble_config(name, inputs, outputs, steps, max_batch_size=8,
                    dtype="TYPE_INT32", dims="[ 16 ]"):
    return (f'name: "{name}"\n'
            'platform: "ensemble"\n'
            f"max_batch_size: {max_batch_size}\n"
            + io_block("input", inputs, dtype, dims)
            + io_block("output", outputs, dtype, dims)
            + "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n")


# IN0, IN1 -> simple -> (sum, diff) -> id_a(sum), id_b(diff) -> simple -> OUT_SUM = 2*IN0,
# OUT_DIFF = 2*IN1: the two middle steps run side by side.
DIAMOND = ensemble_config(
    "ens_diamond", ["IN0", "IN1"], ["OUT_SUM", "OUT_DIFF"], [
        step("simple", {"INPUT0": "IN0", "INPUT1": "IN1"},
             {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        step("id_a", {"INPUT0": "sum"}, {"OUTPUT0": "a"}),
        step("id_b", {"INPUT0": "diff"}, {"OUTPUT0": "b"}),
        step("simple", {"INPUT0": "a", "INPUT1": "b"},
             {"OUTPUT0": "OUT_SUM", "OUTPUT1": "OUT_DIFF"}),
    ])

# A string passes an identity step, then string_add_sub adds it to itself:
# a string that is not a number fails the second step. (Its OUTPUT1 is an
# ensemble output too: Triton refuses a tensor no one reads.)
STRINGS = ensemble_config(
    "ens_strings", ["TEXT"], ["TWICE", "ZERO"], [
        step("id_str", {"INPUT0": "TEXT"}, {"OUTPUT0": "copy"}),
        step("str_add_sub", {"INPUT0": "copy", "INPUT1": "TEXT"},
             {"OUTPUT0": "TWICE", "OUTPUT1": "ZERO"}),
    ], dtype="TYPE_STRING", dims="[ -1 ]")


def write_step_models(repo):
    harness.write_model(repo, "simple", harness.add_sub_config("simple"))
    for name in ("id_a", "id_b"):
        harness.write_model(repo, name, harness.model_config(
            name, "identity", [("INPUT0", "TYPE_INT32", [16])],
            [("OUTPUT0", "TYPE_INT32", [16])]))
    harness.write_model(repo, "id_str", harness.identity_config("id_str", "TYPE_STRING", [-1]))
    harness.write_model(repo, "str_add_sub", harness.model_config(
        "str_add_sub", "string_add_sub",
        [("INPUT0", "TYPE_STRING", [-1]), ("INPUT1", "TYPE_STRING", [-1])],
        [("OUTPUT0", "TYPE_STRING", [-1]), ("OUTPUT1", "TYPE_STRING", [-1])]))


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    write_step_models(repo)
    harness.write_model(repo, "ens_diamond", DIAMOND)
    return repo


def diamond_inputs(mod, a, b):
    i0 = mod.InferInput("IN0", list(a.shape), "INT32")
    i1 = mod.InferInput("IN1", list(b.shape), "INT32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(b)
    return [i0, i1]


def stats_of(server, name):
    r = requests.get(f"{server.url}/v2/models/{name}/stats", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["model_stats"][0]


def test_diamond_over_http_and_grpc(start_server, repo):
    srv = start_server(repo)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 7, dtype=np.int32)
    http = httpclient.InferenceServerClient(srv.hostport)
    r = http.infer("ens_diamond", diamond_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUT_SUM"), 2 * a)
    np.testing.assert_array_equal(r.as_numpy("OUT_DIFF"), 2 * b)
    assert r.get_response()["model_name"] == "ens_diamond"

    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    outputs = [grpcclient.InferRequestedOutput("OUT_DIFF")]
    r = grpc.infer("ens_diamond", diamond_inputs(grpcclient, a, b), outputs=outputs,
                   request_id="r7")
    np.testing.assert_array_equal(r.as_numpy("OUT_DIFF"), 2 * b)
    assert r.as_numpy("OUT_SUM") is None
    assert r.get_response().id == "r7"

    # Two requests: the ensemble counts each once (an execution each, two
    # inferences of batch 2), the "simple" step twice per request, the
    # identity steps once.
    ens = stats_of(srv, "ens_diamond")
    assert ens["inference_stats"]["success"]["count"] == 2
    assert ens["execution_count"] == 2
    assert ens["inference_count"] == 4
    assert ens["inference_stats"]["compute_infer"]["count"] == 2
    assert stats_of(srv, "simple")["inference_stats"]["success"]["count"] == 4
    assert stats_of(srv, "id_a")["inference_stats"]["success"]["count"] == 2
    assert stats_of(srv, "id_b")["execution_count"] == 2


def test_config_shows_the_steps(start_server, repo):
    srv = start_server(repo)
    cfg = httpclient.InferenceServerClient(srv.hostport).get_model_config("ens_diamond")
    assert cfg["platform"] == "ensemble" and cfg["backend"] == ""
    assert "optimization" not in cfg and cfg["instance_group"] == []
    steps = cfg["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["simple", "id_a", "id_b", "simple"]
    assert steps[0]["input_map"] == {"INPUT0": "IN0", "INPUT1": "IN1"}
    assert steps[3]["output_map"] == {"OUTPUT0": "OUT_SUM", "OUTPUT1": "OUT_DIFF"}
    assert steps[1]["model_version"] == -1
    gcfg = grpcclient.InferenceServerClient(srv.grpc_url).get_model_config(
        "ens_diamond", as_json=True)["config"]
    assert "optimization" not in gcfg
    assert [s["model_name"] for s in gcfg["ensemble_scheduling"]["step"]] == \
        ["simple", "id_a", "id_b", "simple"]
    assert gcfg["ensemble_scheduling"]["step"][2]["input_map"] == {"INPUT0": "diff"}


def test_concurrent_requests_get_their_own_results(start_server, repo):
    srv = start_server(repo)

    def one(k):
        client = httpclient.InferenceServerClient(srv.hostport)
        a = np.full((1, 16), k, dtype=np.int32)
        b = np.arange(16, dtype=np.int32).reshape(1, 16) * k
        r = client.infer("ens_diamond", diamond_inputs(httpclient, a, b))
        return k, r.as_numpy("OUT_SUM"), r.as_numpy("OUT_DIFF")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for k, s, d in pool.map(one, range(64)):
            np.testing.assert_array_equal(s, np.full((1, 16), 2 * k))
            np.testing.assert_array_equal(d, np.arange(16).reshape(1, 16) * 2 * k)
    assert stats_of(srv, "ens_diamond")["inference_stats"]["success"]["count"] == 64


def test_a_failing_step_fails_the_request_with_its_message(start_server, repo):
    harness.write_model(repo, "ens_strings", STRINGS)
    srv = start_server(repo)
    client = httpclient.InferenceServerClient(srv.hostport)

    def infer(values):
        t = httpclient.InferInput("TEXT", [1, len(values)], "BYTES")
        t.set_data_from_numpy(np.array([values], dtype=np.object_))
        return client.infer("ens_strings", [t])

    r = infer([b"20", b"-3"])
    assert r.as_numpy("TWICE").tolist() == [[b"40", b"-6"]]
    with pytest.raises(InferenceServerException) as e:
        infer([b"12", b"twelve"])
    assert e.value.message().startswith("in ensemble 'ens_strings', string_add_sub model "
                                        "'str_add_sub': ")
    assert "twelve" in e.value.message() or "element 1" in e.value.message()
    ens = stats_of(srv, "ens_strings")
    assert ens["inference_stats"]["fail"]["count"] == 1
    assert ens["inference_stats"]["success"]["count"] == 1
    # The server keeps serving.
    assert infer([b"1"]).as_numpy("TWICE").tolist() == [[b"2"]]


def test_unload_of_a_step_model_fails_requests_until_it_is_back(start_server, repo):
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=*"])
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.ones((1, 16), dtype=np.int32)
    client.unload_model("id_b")
    assert client.is_model_ready("ens_diamond")
    with pytest.raises(InferenceServerException) as e:
        client.infer("ens_diamond", diamond_inputs(httpclient, a, a))
    assert e.value.message() == ("in ensemble 'ens_diamond', Request for unknown model: "
                                 "'id_b' has no available versions")
    client.load_model("id_b")
    r = client.infer("ens_diamond", diamond_inputs(httpclient, a, a))
    np.testing.assert_array_equal(r.as_numpy("OUT_SUM"), 2 * a)


def test_explicit_load_of_an_ensemble_loads_its_steps(start_server, repo):
    srv = start_server(repo, ["--model-control-mode=explicit"])
    client = httpclient.InferenceServerClient(srv.hostport)
    client.load_model("ens_diamond")
    for name in ("ens_diamond", "simple", "id_a", "id_b"):
        assert client.is_model_ready(name), name
    assert not client.is_model_ready("id_str")


def test_an_ensemble_waits_for_a_step_model(start_server, tmp_path):
    repo = tmp_path / "repo"
    write_step_models(repo)
    # Named to sort before its steps; loaded with four threads.
    harness.write_model(repo, "a_ens", DIAMOND.replace("ens_diamond", "a_ens"))
    srv = start_server(repo)
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.ones((1, 16), dtype=np.int32)
    r = client.infer("a_ens", diamond_inputs(httpclient, a, a))
    np.testing.assert_array_equal(r.as_numpy("OUT_DIFF"), 2 * a)


BAD_ENSEMBLES = {
    # An ensemble output no step writes: the model never gets past the poll.
    "ens_unwritten": (
        ensemble_config("ens_unwritten", ["IN0"], ["OUT", "NEVER"], [
            step("id_a", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})]),
        500, "failed to load 'ens_unwritten', failed to poll from model repository",
        "ensemble output 'NEVER' for ensemble ens_unwritten' is not used"),
    # A cycle: x needs y needs x, so OUT is never written.
    "ens_cycle": (
        ensemble_config("ens_cycle", ["IN0"], ["OUT"], [
            step("simple", {"INPUT0": "IN0", "INPUT1": "y"}, {"OUTPUT0": "x", "OUTPUT1": "OUT"}),
            step("id_a", {"INPUT0": "x"}, {"OUTPUT0": "y"})]),
        500, "failed to load 'ens_cycle', failed to poll from model repository",
        "output 'OUT' for ensemble 'ens_cycle' is not written: at least one of its "
        "depending tensors, 'x', is not connected"),
    "ens_unused": (
        ensemble_config("ens_unused", ["IN0"], ["OUT"], [
            step("simple", {"INPUT0": "IN0", "INPUT1": "IN0"},
                 {"OUTPUT0": "OUT", "OUTPUT1": "spare"})]),
        500, "failed to load 'ens_unused', failed to poll from model repository",
        "ensemble tensor 'spare' is unused in ensemble 'ens_unused'"),
    # Type and shape mismatches are found against the step models' configs
    # (messages as a running Triton 2.51 gives them, newline included).
    "ens_dtype": (
        ensemble_config("ens_dtype", ["IN0"], ["OUT"], [
            step("id_a", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})], dtype="TYPE_FP32"),
        400, "load failed for model 'ens_dtype': "
        "in ensemble ens_dtype, ensemble tensor IN0: inconsistent data type: TYPE_FP32 is "
        "inferred from model ens_dtype while TYPE_INT32 is inferred from model id_a\n", None),
    "ens_shape": (
        ensemble_config("ens_shape", ["IN0"], ["OUT"], [
            step("id_a", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})], dims="[ 8 ]"),
        400, "load failed for model 'ens_shape': "
        "in ensemble ens_shape, ensemble tensor IN0: inconsistent shape: [-1,8] is "
        "inferred from model ens_shape while [-1,16] is inferred from model id_a\n", None),
    "ens_no_model": (
        ensemble_config("ens_no_model", ["IN0"], ["OUT"], [
            step("missing", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})]),
        400, "load failed for model 'ens_no_model': ensemble ens_no_model contains models "
        "that are not available or ambiguous: missing\n", None),
    "ens_bad_input": (
        ensemble_config("ens_bad_input", ["IN0"], ["OUT"], [
            step("id_a", {"INPUT9": "IN0"}, {"OUTPUT0": "OUT"})]),
        400, "load failed for model 'ens_bad_input': "
        "in ensemble ens_bad_input, ensemble tensor IN0 is mapping to non-existing input "
        "INPUT9 in model id_a\n", None),
}


@pytest.mark.parametrize("name", sorted(BAD_ENSEMBLES))
def test_load_checks_give_tritons_messages(start_server, repo, name):
    config, status, message, logged = BAD_ENSEMBLES[name]
    harness.write_model(repo, name, config)
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=simple",
                              "--load-model=id_a"])
    r = requests.post(f"{srv.url}/v2/repository/models/{name}/load", timeout=30)
    assert (r.status_code, r.json()["error"]) == (status, message)
    if logged:
        assert f"Poll failed for model directory '{name}': {logged}" in srv.log()
    # As Triton's index shows a model that never got to a version load.
    index = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=10).json()
    assert {"name": name} in index
    # The server goes on serving its other models.
    assert requests.get(f"{srv.url}/v2/models/simple/ready", timeout=10).status_code == 200


def test_step_traces_are_children_of_the_ensemble_trace(start_server, repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    srv = start_server(repo, ["--trace-config=triton,file=" + str(trace_file),
                              "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"])
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.ones((1, 16), dtype=np.int32)
    client.infer("ens_diamond", diamond_inputs(httpclient, a, a), request_id="t1")
    srv.stop()
    records = json.loads(trace_file.read_text())
    models = [r for r in records if "model_name" in r]
    parent = [r for r in models if r["model_name"] == "ens_diamond"]
    assert len(parent) == 1 and "parent_id" not in parent[0]
    children = [r for r in models if r.get("parent_id") == parent[0]["id"]]
    assert sorted(c["model_name"] for c in children) == ["id_a", "id_b", "simple", "simple"]
    assert all(c["request_id"] == "t1" for c in children)
    assert len({c["id"] for c in children}) == 4


def test_an_onnx_model_between_identity_steps(start_server, tmp_path):
    import onnx
    import onnx_models
    repo = tmp_path / "repo"
    model = onnx_models.mlp()
    (repo / "mlp" / "1").mkdir(parents=True)
    onnx.save(model, str(repo / "mlp" / "1" / "model.onnx"))  # auto-completed
    harness.write_model(repo, "pre", harness.identity_config("pre", "TYPE_FP32", [16]))
    harness.write_model(repo, "post", harness.identity_config("post", "TYPE_FP32", [4]))
    # "x16" feeds the model and is returned as well: two readers, one copy.
    harness.write_model(repo, "ens_mlp", (
        'name: "ens_mlp"\nplatform: "ensemble"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] },\n'
        '         { name: "x16" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        "ensemble_scheduling {\n  step [\n" + ",\n".join([
            step("pre", {"INPUT0": "X"}, {"OUTPUT0": "x16"}),
            step("mlp", {"x": "x16"}, {"y": "logits"}),
            step("post", {"INPUT0": "logits"}, {"OUTPUT0": "Y"})]) + "\n  ]\n}\n"))
    srv = start_server(repo)
    x = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    (want,) = onnx_models.reference(model, {"x": x})
    for mod, client in ((httpclient, httpclient.InferenceServerClient(srv.hostport)),
                        (grpcclient, grpcclient.InferenceServerClient(srv.grpc_url))):
        i = mod.InferInput("X", [3, 16], "FP32")
        i.set_data_from_numpy(x)
        r = client.infer("ens_mlp", [i])
        np.testing.assert_allclose(r.as_numpy("Y"), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(r.as_numpy("x16"), x)


def test_a_long_chain_of_steps(start_server, repo):
    # 500 identity steps one after the other, each completing on the
    # thread that submitted it (identity runs inline).
    n = 500
    steps = [step("id_a", {"INPUT0": "IN0" if k == 0 else f"t{k}"},
                  {"OUTPUT0": "OUT" if k == n - 1 else f"t{k + 1}"}) for k in range(n)]
    harness.write_model(repo, "ens_chain", ensemble_config("ens_chain", ["IN0"], ["OUT"], steps))
    srv = start_server(repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i = grpcclient.InferInput("IN0", [1, 16], "INT32")
    i.set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("ens_chain", [i]).as_numpy("OUT"), a)
    assert stats_of(srv, "id_a")["inference_stats"]["success"]["count"] == n


FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"


@pytest.mark.skipif(not FAKE_GPU_BIN.exists(),
                    reason="osprey_fakegpu is built only with the CUDA toolkit")
def test_steps_on_another_instance_kind(start_server, repo):
    # The first "simple" step and id_b on the (fake) GPUs, id_a on the CPU:
    # outputs cross between the devices through host buffers.
    for name in ("simple", "id_b"):
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    srv = start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)
    cfg = httpclient.InferenceServerClient(srv.hostport).get_model_config("simple")
    assert cfg["instance_group"][0]["kind"] == "KIND_GPU"
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    r = client.infer("ens_diamond", diamond_inputs(httpclient, a, b))
    np.testing.assert_array_equal(r.as_numpy("OUT_SUM"), 2 * a)
    np.testing.assert_array_equal(r.as_numpy("OUT_DIFF"), 2 * b)


def test_a_step_model_that_fails_to_load(start_server, repo):
    harness.write_model(repo, "broken", harness.model_config(
        "broken", "no_such_backend", [("INPUT0", "TYPE_INT32", [16])],
        [("OUTPUT0", "TYPE_INT32", [16])]))
    harness.write_model(repo, "ens_broken", ensemble_config("ens_broken", ["IN0"], ["OUT"], [
        step("broken", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT"})]))
    srv = start_server(repo, ["--model-control-mode=explicit"])
    r = requests.post(f"{srv.url}/v2/repository/models/ens_broken/load", timeout=30)
    assert r.status_code == 400
    assert r.json()["error"].startswith(
        "load failed for model 'ens_broken': ensemble 'ens_broken' depends on 'broken' "
        "which has no loaded version. Model 'broken' loading failed with error: ")


def test_tf_serving_predict_on_an_ensemble(start_server, repo):
    srv = start_server(repo)
    a = list(range(16))
    r = requests.post(f"{srv.url}/v1/models/ens_diamond:predict", timeout=10,
                      json={"inputs": {"IN0": [a], "IN1": [[1] * 16]}})
    assert r.status_code == 200, r.text
    outputs = r.json()["outputs"]
    assert outputs["OUT_SUM"] == [[2 * x for x in a]]
    assert outputs["OUT_DIFF"] == [[2] * 16]


def test_class_count_on_an_ensemble_output(start_server, repo):
    srv = start_server(repo)
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.zeros((1, 16), dtype=np.int32)
    out = httpclient.InferRequestedOutput("OUT_SUM", class_count=2)
    r = client.infer("ens_diamond", diamond_inputs(httpclient, a, b), outputs=[out])
    # The two largest of 2 * a, as "<value>:<index>".
    assert r.as_numpy("OUT_SUM").tolist() == [[b"30:15", b"28:14"]]


def test_in_poll_mode_an_ensemble_waits_for_its_step_models(start_server, tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "ens_diamond", DIAMOND)
    srv = start_server(repo, ["--model-control-mode=poll", "--repository-poll-secs=1",
                              "--exit-on-error=false"], wait="live")
    client = httpclient.InferenceServerClient(srv.hostport)
    assert not client.is_model_ready("ens_diamond")
    write_step_models(repo)  # the step models arrive later
    deadline = time.monotonic() + 30 * harness.timeout_scale()
    while not client.is_model_ready("ens_diamond"):
        assert time.monotonic() < deadline, "the ensemble never became ready"
        time.sleep(0.2)
    a = np.ones((1, 16), dtype=np.int32)
    r = client.infer("ens_diamond", diamond_inputs(httpclient, a, a))
    np.testing.assert_array_equal(r.as_numpy("OUT_SUM"), 2 * a)


# IN0 -> id_a -> OUT_A and IN1 -> id_b -> OUT_B: two independent branches.
BRANCHES = ensemble_config(
    "ens_branches", ["IN0", "IN1"], ["OUT_A", "OUT_B"], [
        step("id_a", {"INPUT0": "IN0"}, {"OUTPUT0": "OUT_A"}),
        step("id_b", {"INPUT0": "IN1"}, {"OUTPUT0": "OUT_B"}),
    ])


def test_only_the_steps_of_the_requested_outputs_run(start_server, repo):
    """As Triton (its L0_simple_ensemble one-output test): a step that only
    leads to outputs the request did not ask for is not run."""
    harness.write_model(repo, "ens_branches", BRANCHES)
    srv = start_server(repo)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    ins = diamond_inputs(grpcclient, a, a + 1)
    result = client.infer("ens_branches", ins,
                          outputs=[grpcclient.InferRequestedOutput("OUT_A")])
    np.testing.assert_array_equal(result.as_numpy("OUT_A"), a)
    assert result.as_numpy("OUT_B") is None
    assert stats_of(srv, "id_a")["inference_count"] == 1
    assert stats_of(srv, "id_b")["inference_count"] == 0
    result = client.infer("ens_branches", ins)  # both: both run
    np.testing.assert_array_equal(result.as_numpy("OUT_B"), a + 1)
    assert stats_of(srv, "id_b")["inference_count"] == 1


HALF_PY = b"""import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def test_an_output_no_step_made_is_left_out_of_the_response(start_server, tmp_path):
    """As Triton (its L0_simple_ensemble partial test): a step that does not
    return one of its outputs leaves that ensemble output out of the
    response, logged at verbose 1, instead of failing the request."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "half", harness.model_config(
        "half", "python", [("INPUT0", "TYPE_INT32", [16])],
        [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]),
        files={"model.py": HALF_PY})
    harness.write_model(repo, "ens_half", ensemble_config(
        "ens_half", ["IN"], ["OUT0", "OUT1"], [
            step("half", {"INPUT0": "IN"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"})]))
    srv = start_server(repo, ["--log-verbose=1",
                              f"--backend-config=python,python-executable={sys.executable}"])
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inp = grpcclient.InferInput("IN", [1, 16], "INT32")
    inp.set_data_from_numpy(a)
    result = client.infer("ens_half", [inp])
    np.testing.assert_array_equal(result.as_numpy("OUT0"), a)
    assert result.as_numpy("OUT1") is None
    assert "Composing models did not output tensor OUT1" in srv.stderr()


def test_responses_carry_the_sequence_parameters_as_tritons_do(start_server, repo):
    """As Triton's qa/L0_simple_ensemble test_ensemble_sequence_flags sees
    them: each response of a stream of three sequence requests carries its
    request's sequence_start and sequence_end (and id); a request without
    them gets 0, false and false."""
    import queue
    srv = start_server(repo)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    flags = [(True, False), (False, False), (False, True)]
    for k, (start, end) in enumerate(flags):
        client.async_stream_infer("ens_diamond", diamond_inputs(grpcclient, a, a),
                                  request_id=f"s{k}", sequence_id=4242,
                                  sequence_start=start, sequence_end=end)
    got = {}
    for _ in flags:
        result, error = answers.get(timeout=30 * harness.timeout_scale())
        assert error is None, error
        r = result.get_response()
        got[r.id] = (r.parameters["sequence_start"].bool_param,
                     r.parameters["sequence_end"].bool_param,
                     r.parameters["sequence_id"].int64_param)
    client.stop_stream()
    assert [got[f"s{k}"] for k in range(3)] == [f + (4242,) for f in flags]

    r = httpclient.InferenceServerClient(srv.hostport).infer(
        "ens_diamond", diamond_inputs(httpclient, a, a))
    assert r.get_response()["parameters"] == {
        "sequence_id": 0, "sequence_start": False, "sequence_end": False}


# max_inflight_requests: a decoupled producer streams IN responses into a
# step that holds each request until its gate file exists.
PRODUCER_PY = b"""import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            for k in range(n):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", np.array([k], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

GATED_PY = b"""import os, time
import triton_python_backend_utils as pb_utils
GATE = os.path.join(os.path.dirname(__file__), "open")
class TritonPythonModel:
    def execute(self, requests):
        # Holds its requests until the test opens the gate (at most 5 min).
        deadline = time.monotonic() + 300
        while not os.path.exists(GATE):
            if time.monotonic() > deadline:
                raise pb_utils.TritonModelException("the gate never opened")
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def backpressure_ensemble(name, limit):
    text = ensemble_config(name, ["IN"], ["OUT"], [
        step("producer", {"IN": "IN"}, {"OUT": "mid"}),
        step("gated", {"INPUT0": "mid"}, {"OUTPUT0": "OUT"})],
        max_batch_size=0, dims="[ 1 ]")
    if limit:
        text = text.replace("ensemble_scheduling {\n",
                            f"ensemble_scheduling {{\n  max_inflight_requests: {limit}\n")
    return text


def pending_of(srv, model):
    text = requests.get(f"{srv.metrics_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'nv_inference_pending_request_count{{model="{model}"'):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_max_inflight_requests_bounds_each_steps_requests(start_server, tmp_path):
    """As Triton's max_inflight_requests: at most N requests of a step are in
    flight at once, across all the ensemble's requests; the producer's other
    responses wait in the ensemble. The gated step holds one request
    executing, so with N = 2 one more waits in its queue (pending), never
    more; without the limit all of them queue there."""
    import queue
    repo = tmp_path / "repo"
    harness.write_model(repo, "producer", harness.model_config(
        "producer", "python", [("IN", "TYPE_INT32", [1])], [("OUT", "TYPE_INT32", [1])],
        max_batch_size=0, extra="model_transaction_policy { decoupled: true }\n"),
        files={"model.py": PRODUCER_PY})
    harness.write_model(repo, "gated", harness.model_config(
        "gated", "python", [("INPUT0", "TYPE_INT32", [1])],
        [("OUTPUT0", "TYPE_INT32", [1])], max_batch_size=0),
        files={"model.py": GATED_PY})
    harness.write_model(repo, "ens_limited", backpressure_ensemble("ens_limited", 2))
    harness.write_model(repo, "ens_free", backpressure_ensemble("ens_free", 0))
    gate = repo / "gated" / "1" / "open"
    srv = start_server(repo, [f"--backend-config=python,python-executable={sys.executable}"])
    assert "Ensemble model 'ens_limited' configured with max_inflight_requests: 2" \
        in srv.stderr()
    deadline_s = 60 * harness.timeout_scale()

    def run(model, streams, per_stream, max_pending, limit):
        """Sends `streams` requests of `per_stream` responses each while the
        gate is shut; waits until the producer is done and the gated step
        queues max_pending (checking it never queues more than `limit`, its
        requests in flight: before the instance takes its first one, all of
        them wait in the queue), then opens the gate and checks every
        response."""
        if gate.exists():
            gate.unlink()
        produced = stats_of(srv, "producer")["inference_count"]
        answers = queue.Queue()
        clients = []
        for _ in range(streams):
            c = grpcclient.InferenceServerClient(srv.grpc_url)
            c.start_stream(callback=lambda result, error: answers.put((result, error)))
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([per_stream], dtype=np.int32))
            c.async_stream_infer(model, [inp])
            clients.append(c)
        deadline = time.monotonic() + deadline_s
        while True:
            pending = pending_of(srv, "gated")
            assert pending <= limit
            done = stats_of(srv, "producer")["inference_count"] == produced + streams
            if done and pending == max_pending:
                break
            assert time.monotonic() < deadline, (pending, done)
        # The producer is done: its responses are all in the ensemble, and
        # the gated step's queue stays as it is while the gate is shut.
        for _ in range(20):
            assert pending_of(srv, "gated") == max_pending
        gate.touch()
        values = []
        for _ in range(streams * per_stream):
            result, error = answers.get(timeout=deadline_s)
            assert error is None, error
            values.append(int(result.as_numpy("OUT")[0]))
        for c in clients:
            c.stop_stream()
        assert sorted(values) == sorted(list(range(per_stream)) * streams)

    # Two requests of 4 share the limit: 2 in flight (1 executing, 1 queued).
    run("ens_limited", 2, 4, max_pending=1, limit=2)
    # Without it the gated step queues all but the one it executes.
    run("ens_free", 2, 4, max_pending=7, limit=8)
    # The slots all came back: the limited ensemble runs again.
    run("ens_limited", 1, 3, max_pending=1, limit=2)


def test_values_cross_between_batching_and_non_batching_models(start_server, tmp_path):
    """As Triton's ensemble reshapes them (its ReshapeTensorDims, which
    L0_simple_ensemble's queue-size tests rely on): a non-batching
    ensemble's [1] reaches a batching step with dims [1] as [1, 1], and
    that step's [1, 1] output comes back as the ensemble's [1]; a batching
    step's batch of one reaches a non-batching [4] step without its batch
    dim."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "id_b1", harness.model_config(
        "id_b1", "identity", [("INPUT0", "TYPE_INT32", [1])],
        [("OUTPUT0", "TYPE_INT32", [1])], max_batch_size=4))
    harness.write_model(repo, "ens_nb", ensemble_config(
        "ens_nb", ["IN"], ["OUT"], [step("id_b1", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})],
        max_batch_size=0, dims="[ 1 ]"))
    harness.write_model(repo, "id_b4", harness.model_config(
        "id_b4", "identity", [("INPUT0", "TYPE_INT32", [4])],
        [("OUTPUT0", "TYPE_INT32", [4])], max_batch_size=4))
    harness.write_model(repo, "id_nb4", harness.model_config(
        "id_nb4", "identity", [("INPUT0", "TYPE_INT32", [4])],
        [("OUTPUT0", "TYPE_INT32", [4])], max_batch_size=0))
    harness.write_model(repo, "ens_b", ensemble_config(
        "ens_b", ["IN"], ["OUT"], [
            step("id_b4", {"INPUT0": "IN"}, {"OUTPUT0": "mid"}),
            step("id_nb4", {"INPUT0": "mid"}, {"OUTPUT0": "OUT"})],
        max_batch_size=4, dims="[ 4 ]"))
    srv = start_server(repo)
    c = httpclient.InferenceServerClient(srv.hostport)
    i = httpclient.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([7], np.int32))
    r = c.infer("ens_nb", [i])
    assert r.as_numpy("OUT").shape == (1,)
    assert r.as_numpy("OUT").tolist() == [7]
    x = np.arange(4, dtype=np.int32).reshape(1, 4)
    i = httpclient.InferInput("IN", [1, 4], "INT32")
    i.set_data_from_numpy(x)
    r = c.infer("ens_b", [i])
    np.testing.assert_array_equal(r.as_numpy("OUT"), x)
