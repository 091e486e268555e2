"""Model load with overrides: the load API's "config" parameter (a
ModelConfig in protobuf JSON, used instead of config.pbtxt) and its
"file:<path>" parameters (base64 file contents that stand in for the model
folder), protocol reference §1 and L0_http's test_load_oversized_file_parameter.
"""

import base64
import json
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

POLL_FAILED = "failed to load '{}', failed to poll from model repository"


@pytest.fixture
def server(start_server, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(harness.ROOT / "models", repo,
                    ignore=shutil.ignore_patterns("*.py"))
    return start_server(repo, ["--model-control-mode=explicit", "--load-model=*"])


def load(srv, model, parameters):
    return requests.post(f"{srv.url}/v2/repository/models/{model}/load",
                         data=json.dumps({"parameters": parameters}), timeout=60)


def config_of(srv, model):
    return requests.get(f"{srv.url}/v2/models/{model}/config", timeout=10).json()


def add_sub(client, model="simple"):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_config_override_replaces_config_pbtxt(server):
    client = httpclient.InferenceServerClient(server.hostport)
    config = client.get_model_config("simple")
    config["max_batch_size"] = 4
    config["instance_group"] = [{"kind": "KIND_CPU", "count": 3}]
    config["dynamic_batching"] = {"max_queue_delay_microseconds": 100}
    client.load_model("simple", config=json.dumps(config))
    now = client.get_model_config("simple")
    assert now["max_batch_size"] == 4
    assert [g["count"] for g in now["instance_group"]] == [3]
    assert now["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    add_sub(client)
    # The next plain load reads config.pbtxt again.
    client.load_model("simple")
    assert client.get_model_config("simple")["max_batch_size"] == 8


def test_config_round_trips_through_get_config(server):
    """What GET .../config returns loads back unchanged, for every model."""
    client = httpclient.InferenceServerClient(server.hostport)
    for model in ("simple", "simple_identity", "identity_fp32", "digits_mlp",
                  "half_plus_two", "saved_model_half_plus_three"):
        before = config_of(server, model)
        r = load(server, model, {"config": json.dumps(before)})
        assert r.status_code == 200, r.text
        assert config_of(server, model) == before
    add_sub(client)


def test_protobuf_json_forms(server):
    """lowerCamelCase names, 64-bit integers as strings, enums as strings,
    maps for parameters: what protobuf's own JSON printer writes."""
    config = {
        "name": "simple", "backend": "add_sub", "maxBatchSize": 2,
        "input": [{"name": "INPUT0", "dataType": "TYPE_INT32", "dims": ["16"]},
                  {"name": "INPUT1", "dataType": "TYPE_INT32", "dims": ["16"]}],
        "output": [{"name": "OUTPUT0", "dataType": "TYPE_INT32", "dims": ["16"]},
                   {"name": "OUTPUT1", "dataType": "TYPE_INT32", "dims": ["16"]}],
        "instanceGroup": [{"kind": "KIND_CPU", "count": 1}],
        "dynamicBatching": {"maxQueueDelayMicroseconds": "250",
                            "priorityLevels": "2", "defaultPriorityLevel": "1",
                            "priorityQueuePolicy": {"2": {"maxQueueSize": "5"}}},
        "parameters": {"note": {"string_value": "a \"quoted\"\nvalue"}},
        "optimization": None,
    }
    r = load(server, "simple", {"config": json.dumps(config)})
    assert r.status_code == 200, r.text
    now = config_of(server, "simple")
    assert now["max_batch_size"] == 2
    assert now["dynamic_batching"]["max_queue_delay_microseconds"] == 250
    assert now["dynamic_batching"]["priority_queue_policy"]["2"]["max_queue_size"] == 5
    assert now["parameters"] == {"note": {"string_value": 'a "quoted"\nvalue'}}
    add_sub(httpclient.InferenceServerClient(server.hostport))


def test_integers_as_strings_and_enums_as_numbers(server):
    """Protobuf's JSON parser takes strings for 32-bit integers too (what
    Triton's simple_http_model_control.py sends) and enum numbers."""
    client = httpclient.InferenceServerClient(server.hostport)
    config = client.get_model_config("simple")
    config["max_batch_size"] = "16"
    config["instance_group"] = [{"kind": 2, "count": "2"}]
    for io in config["input"] + config["output"]:
        io["data_type"] = 8  # TYPE_INT32
    client.load_model("simple", config=json.dumps(config))
    now = client.get_model_config("simple")
    assert now["max_batch_size"] == 16
    assert [(g["kind"], g["count"]) for g in now["instance_group"]] == [("KIND_CPU", 2)]
    assert {io["data_type"] for io in now["input"]} == {"TYPE_INT32"}
    add_sub(client)


@pytest.mark.parametrize("config", [
    "{",                                         # not JSON
    "[]",                                        # not an object
    '{"max_batch_size": "eight"}',               # wrong type
    '{"no_such_field": 1}',                      # not in model_config.proto
    '{"name": "other"}',                         # another model's name
    '{"input": [[1]]}',                          # nested list
    "[" * 100 + "]" * 100,                       # too deep
])
def test_bad_config_is_a_poll_failure_and_old_model_serves(server, config):
    r = load(server, "simple", {"config": config})
    assert r.status_code == 500, r.text
    assert r.json() == {"error": POLL_FAILED.format("simple")}
    add_sub(httpclient.InferenceServerClient(server.hostport))
    assert "Invalid config override: " in server.log()  # Triton's log line


def test_files_override_loads_a_model_from_the_request(server):
    """A dense model that is not in the repository, its weights in the
    request: it must answer what the repository's digits_mlp answers."""
    weights = (harness.ROOT / "models" / "digits_mlp" / "1" / "model.safetensors").read_bytes()
    config = config_of(server, "digits_mlp")
    config["name"] = "digits_copy"
    config["instance_group"] = [{"kind": "KIND_CPU", "count": 1}]
    r = load(server, "digits_copy", {
        "config": json.dumps(config),
        "file:1/model.safetensors": base64.b64encode(weights).decode(),
    })
    assert r.status_code == 200, r.text
    client = httpclient.InferenceServerClient(server.hostport)
    x = np.random.default_rng(3).uniform(0, 1, (5, 64)).astype(np.float32)
    outs = []
    for model in ("digits_copy", "digits_mlp"):
        i = httpclient.InferInput("image", [5, 64], "FP32")
        i.set_data_from_numpy(x)
        outs.append(client.infer(model, [i]).as_numpy("probabilities"))
    np.testing.assert_array_equal(outs[0], outs[1])
    # The files lived in a temporary folder only while loading.
    assert "osprey-load-" not in " ".join(str(p) for p in server.workdir.iterdir())
    assert client.is_model_ready("digits_copy")


@pytest.mark.parametrize("path", [
    "A" * 256,          # L0_http test_load_oversized_file_parameter
    "1/" + "b" * 256,
    "../escape",
    "1/../../escape",
    "/abs/model",
    "1//model",
    "1/./model",
    "",
])
def test_bad_file_paths_are_poll_failures(server, tmp_path, path):
    r = load(server, "simple", {"config": "{}", "file:" + path: "YQ=="})
    assert r.status_code == 500, r.text
    assert r.json() == {"error": POLL_FAILED.format("simple")}
    assert requests.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
    assert not (tmp_path / "escape").exists()
    add_sub(httpclient.InferenceServerClient(server.hostport))


def test_files_need_a_config(server):
    r = load(server, "simple", {"file:1/model.bin": "YQ=="})
    assert r.status_code == 500
    assert r.json() == {"error": POLL_FAILED.format("simple")}


@pytest.mark.parametrize("value", ["YQ=", "Y===", "Y Q==", "!!!!"])
def test_file_contents_must_be_base64(server, value):
    r = load(server, "simple", {"config": "{}", "file:1/model.bin": value})
    assert r.status_code == 400
    assert r.json() == {"error": "load parameter 'file:1/model.bin' is not base64"}


def test_config_override_of_a_missing_model_is_not_found(server):
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("no_such_model", config="{}")
    assert "no_such_model" in str(e.value)


def test_partial_override_is_completed_from_config_pbtxt(server):
    """Triton auto-completes a partial override (simple_http_model_control.py
    sends only max_batch_size); Osprey completes it from the model's own
    config.pbtxt: the override's fields win, the rest is the folder's."""
    client = httpclient.InferenceServerClient(server.hostport)
    client.load_model("simple", config='{"max_batch_size":"16"}')
    now = client.get_model_config("simple")
    assert now["max_batch_size"] == 16
    assert now["backend"] == "add_sub"
    assert [i["name"] for i in now["input"]] == ["INPUT0", "INPUT1"]
    add_sub(client)


def test_override_naming_an_unserved_platform_says_so(server):
    config = {"name": "simple", "platform": "tensorrt_plan", "max_batch_size": 8}
    r = load(server, "simple", {"config": json.dumps(config)})
    assert r.status_code == 400, r.text
    assert "unknown platform 'tensorrt_plan'" in r.json()["error"], r.text


@pytest.mark.parametrize("flag", ["--disable-auto-complete-config",
                                  "--strict-model-config=true"])
def test_completion_can_be_switched_off(start_server, tmp_path, flag):
    repo = tmp_path / "repo"
    shutil.copytree(harness.ROOT / "models", repo, ignore=shutil.ignore_patterns("*.py"))
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=simple", flag])
    r = load(srv, "simple", {"config": '{"max_batch_size": 16}'})
    # Nothing names a backend and simple/1 holds no file that would: as
    # Triton, the config cannot be completed, the poll fails, and the log
    # says why.
    assert r.status_code == 500, r.text
    assert r.json() == {"error": POLL_FAILED.format("simple")}
    assert ("Could not determine backend for model 'simple' with no backend "
            "in model configuration") in srv.log()
    # The loaded version keeps serving.
    add_sub(httpclient.InferenceServerClient(srv.hostport))


# ---- dense: inputs and outputs completed from the safetensors header ----------

DIGITS = np.linspace(0.0, 1.0, 64, dtype=np.float32).reshape(1, 64)


def digits_probabilities(client, model, input_name, output_name):
    i = httpclient.InferInput(input_name, [1, 64], "FP32")
    i.set_data_from_numpy(DIGITS)
    return client.infer(model, [i]).as_numpy(output_name)


def test_dense_override_without_tensors_is_completed_from_its_weights(server):
    """As Triton's auto-complete fills a model's inputs and outputs from its
    files, a dense override that names none gets them from the header of its
    safetensors weights: FP32 [in] of layers.0.weight, FP32 [out] of the last
    layer, named INPUT0 and OUTPUT0."""
    client = httpclient.InferenceServerClient(server.hostport)
    want = digits_probabilities(client, "digits_mlp", "image", "probabilities")
    client.load_model("digits_mlp", config=json.dumps({
        "backend": "dense", "max_batch_size": 8,
        "parameters": {"output_activation": {"string_value": "softmax"}}}))
    now = config_of(server, "digits_mlp")
    assert [(t["name"], t["data_type"], t["dims"]) for t in now["input"]] == [
        ("INPUT0", "TYPE_FP32", [64])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in now["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [10])]
    got = digits_probabilities(client, "digits_mlp", "INPUT0", "OUTPUT0")
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # a config that names its output keeps it; only the input is added
    client.load_model("digits_mlp", config=json.dumps({
        "backend": "dense", "max_batch_size": 8,
        "output": [{"name": "p", "data_type": "TYPE_FP32", "dims": [10]}]}))
    now = config_of(server, "digits_mlp")
    assert [t["name"] for t in now["input"]] == ["INPUT0"]
    assert [t["name"] for t in now["output"]] == ["p"]


def test_dense_repository_config_without_tensors_is_completed(start_server, tmp_path):
    repo = tmp_path / "repo"
    src = harness.ROOT / "models" / "digits_mlp"
    harness.write_model(repo, "bare_mlp", 'backend: "dense"\nmax_batch_size: 4\n',
                        files={"model.safetensors":
                               (src / "1" / "model.safetensors").read_bytes()})
    srv = start_server(repo)
    now = config_of(srv, "bare_mlp")
    assert [t["dims"] for t in now["input"]] == [[64]]
    assert [t["dims"] for t in now["output"]] == [[10]]
    client = httpclient.InferenceServerClient(srv.hostport)
    assert digits_probabilities(client, "bare_mlp", "INPUT0", "OUTPUT0").shape == (1, 10)


@pytest.mark.parametrize("flag", ["--disable-auto-complete-config",
                                  "--strict-model-config=true"])
def test_dense_completion_can_be_switched_off(start_server, tmp_path, flag):
    repo = tmp_path / "repo"
    shutil.copytree(harness.ROOT / "models", repo, ignore=shutil.ignore_patterns("*.py"))
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=digits_mlp",
                              flag])
    r = load(srv, "digits_mlp", {"config": json.dumps(
        {"backend": "dense", "max_batch_size": 8})})
    assert r.status_code == 400, r.text
    assert "needs exactly 1 input and 1 output, got 0 and 0" in r.json()["error"], r.text
    # The loaded version keeps serving, with its own tensors.
    client = httpclient.InferenceServerClient(srv.hostport)
    assert digits_probabilities(client, "digits_mlp", "image", "probabilities").shape == (1, 10)


def test_override_files_are_written_under_the_repository_cache_dir(start_server, tmp_path):
    """`file:` contents go into --repository-cache-dir (the s3:// cache),
    never next to the models: with that folder missing, the load fails,
    and its answer names no server path."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "m", harness.identity_config("m", "TYPE_FP32", [-1]))
    missing = tmp_path / "no-such-cache"
    server = start_server(repo, ["--model-control-mode=explicit",
                                 f"--repository-cache-dir={missing}"])
    config = ('{"backend": "identity", "max_batch_size": 8, '
              '"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}], '
              '"output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}')
    body = {"parameters": {"config": config, "file:1/README": "aGVsbG8="}}
    r = requests.post(f"{server.url}/v2/repository/models/m/load", json=body)
    assert r.status_code != 200, r.text
    assert str(tmp_path) not in r.text
    missing.mkdir()
    r = requests.post(f"{server.url}/v2/repository/models/m/load", json=body)
    assert r.status_code == 200, r.text
    assert list(missing.iterdir()) == []  # the folder goes once the model is loaded
