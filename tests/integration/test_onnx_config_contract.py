"""The config side of serving Triton's ONNX models, without the ONNX backend
itself: platform onnxruntime_onnx means backend onnxruntime (and the other
way round), model folders without config.pbtxt, --backend-config, and the
`optimization` and `default_model_filename` fields of /config as Triton 2.51
prints them.

Written to pass with or without a registered "onnxruntime" backend: where
that backend decides, the tests only check that the config reached it (the
reason never says "unknown platform", and names no backend but onnxruntime).
"""

import json
import shutil

import pytest
import requests

import harness

# What Triton 2.51 prints for a config without `optimization` (every config
# is normalised to have one, pinned memory on), between batch_output and the
# scheduler.
TRITON_DEFAULT_OPTIMIZATION = {
    "priority": "PRIORITY_DEFAULT",
    "input_pinned_memory": {"enable": True},
    "output_pinned_memory": {"enable": True},
    "gather_kernel_buffer_threshold": 0,
    "eager_batching": False,
}
# ModelConfig's fields in proto declaration order, as protobuf's JSON
# printer writes them (dynamic_batching only when configured).
TRITON_KEY_ORDER = [
    "name", "platform", "backend", "runtime", "version_policy", "max_batch_size",
    "input", "output", "batch_input", "batch_output", "optimization",
    "dynamic_batching", "instance_group", "default_model_filename",
    "cc_model_filenames", "metric_tags", "parameters", "model_warmup"]

UNDETECTABLE = ("Invalid model name: Could not determine backend for model '{}' "
                "with no backend in model configuration. Expected model name of "
                "the form 'model.<backend_name>'.")

ONNX_IO = (
    'max_batch_size: 4\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n')


def config_of(srv, model):
    r = requests.get(f"{srv.url}/v2/models/{model}/config", timeout=10)
    assert r.status_code == 200, r.text
    return r


def load(srv, model):
    return requests.post(f"{srv.url}/v2/repository/models/{model}/load", timeout=30)


def index(srv):
    r = requests.post(f"{srv.url}/v2/repository/index", timeout=10)
    assert r.status_code == 200, r.text
    return {e["name"]: e for e in r.json()}


def assert_reached_onnxruntime(r):
    """The load got as far as the onnxruntime backend: READY (the backend
    is there and took the files) or refused naming that backend."""
    if r.status_code == 200:
        return
    error = r.json()["error"]
    assert "unknown platform" not in error, error
    if "unknown backend" in error:
        assert "unknown backend 'onnxruntime'" in error, error


def key_order(cfg):
    keys = [k for k in cfg if k in TRITON_KEY_ORDER]
    assert keys == [k for k in TRITON_KEY_ORDER if k in cfg], list(cfg)


@pytest.fixture
def onnx_repo(tmp_path):
    """simple (add_sub) plus ONNX-looking models whose graphs are empty
    files: only the config side is exercised."""
    repo = tmp_path / "repo"
    shutil.copytree(harness.EXAMPLE_MODELS / "simple", repo / "simple")
    onnx = {"model.onnx": b""}
    harness.write_model(repo, "by_platform",
                        'platform: "onnxruntime_onnx"\n' + ONNX_IO, files=onnx)
    harness.write_model(repo, "by_backend",
                        'backend: "onnxruntime"\n' + ONNX_IO, files=onnx)
    harness.write_model(repo, "unserved_platform",
                        'platform: "tensorrt_plan"\n' + ONNX_IO,
                        files={"model.plan": b""})
    # No config.pbtxt at all: found from the version folder's file.
    (repo / "no_config" / "1").mkdir(parents=True)
    (repo / "no_config" / "1" / "model.onnx").write_bytes(b"")
    (repo / "no_config_dir" / "2" / "model.onnx").mkdir(parents=True)
    (repo / "nothing_to_go_by" / "1").mkdir(parents=True)
    harness.write_model(
        repo, "tuned", harness.add_sub_config("tuned") + (
            'default_model_filename: "graph.onnx"\n'
            "optimization {\n"
            "  graph { level: -1 }\n"
            "  execution_accelerators {\n"
            '    cpu_execution_accelerator [ { name: "openvino"\n'
            '      parameters { key: "num_of_threads" value: "2" } } ]\n'
            "  }\n"
            "  input_pinned_memory { enable: false }\n"
            "}\n"))
    return repo


def explicit(start_server, repo, *args):
    return start_server(repo, ["--model-control-mode=explicit", "--load-model=simple",
                               *args])


def test_platform_onnxruntime_onnx_means_backend_onnxruntime(start_server, onnx_repo):
    srv = explicit(start_server, onnx_repo)
    for model in ("by_platform", "by_backend"):
        assert_reached_onnxruntime(load(srv, model))
    # A platform Osprey does not serve keeps its answer.
    r = load(srv, "unserved_platform")
    assert r.status_code == 400, r.text
    assert "unknown platform 'tensorrt_plan'" in r.json()["error"], r.text
    entries = index(srv)
    assert "unknown platform" not in entries["by_platform"].get("reason", "")


def test_model_without_config_pbtxt_is_found_from_its_files(start_server, onnx_repo):
    srv = explicit(start_server, onnx_repo)
    for model in ("no_config", "no_config_dir"):
        assert_reached_onnxruntime(load(srv, model))
    r = load(srv, "nothing_to_go_by")
    assert r.status_code == 400, r.text
    assert r.json()["error"] == UNDETECTABLE.format("nothing_to_go_by")
    entry = index(srv)["nothing_to_go_by"]
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"] == UNDETECTABLE.format("nothing_to_go_by")


@pytest.mark.parametrize("flag", ["--disable-auto-complete-config",
                                  "--strict-model-config=true"])
def test_without_auto_complete_config_pbtxt_is_required(start_server, onnx_repo, flag):
    srv = explicit(start_server, onnx_repo, flag)
    r = load(srv, "no_config")
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "no_config/config.pbtxt" in error and "No such file" in error, error
    assert str(onnx_repo) not in error  # no server path in a reply
    # The platform mapping does not depend on auto-complete (Triton fills
    # backend fields whatever the flag).
    assert_reached_onnxruntime(load(srv, "by_platform"))


def test_backend_config_flags(start_server, onnx_repo):
    srv = explicit(start_server, onnx_repo,
                   "--backend-config=onnxruntime,default-max-batch-size=8",
                   "--backend-config", "onnxruntime,enable-global-threadpool=1",
                   "--backend-config=global-setting=x=y",
                   "--backend-config=python,shm-default-byte-size=1048576")
    log = srv.log()
    assert "--backend-config has no effect" not in log
    # Settings are for backends only: /config never shows them.
    r = config_of(srv, "simple")
    assert "default-max-batch-size" not in r.text and "backend_config" not in r.text
    assert_reached_onnxruntime(load(srv, "by_platform"))


@pytest.mark.parametrize("value, message", [
    (",x=1", "No backend specified. --backend-config option format is <backend "
             "name>,<setting>=<value> or <setting>=<value>. Got ,x=1"),
    ("onnxruntime,x", "--backend-config option format is '<backend "
                      "name>,<setting>=<value>'. Got onnxruntime,x"),
    ("onnxruntime,=1", "--backend-config option format is '<backend "
                       "name>,<setting>=<value>'. Got onnxruntime,=1"),
    ("x=", "--backend-config option format is '<backend "
           "name>,<setting>=<value>'. Got x="),
    ("x", "--backend-config option format is '<backend "
          "name>,<setting>=<value>'. Got x"),
])
def test_malformed_backend_config_is_refused_at_start(tmp_path, onnx_repo, value, message):
    srv = harness.OspreyServer(onnx_repo, [f"--backend-config={value}"],
                               workdir=tmp_path / "srv")
    assert srv.run_to_exit() == 2, srv.log_tail()
    assert f"Error: {message}\n" in srv.log(), srv.log_tail()


def test_config_shows_optimization_and_default_model_filename(models_server):
    """`simple` as Triton 2.51 prints it: optimization with its defaults
    after batch_output, default_model_filename "" (its backend sets none)."""
    r = config_of(models_server, "simple")
    cfg = r.json()
    assert cfg["optimization"] == TRITON_DEFAULT_OPTIMIZATION
    assert list(cfg["optimization"]) == list(TRITON_DEFAULT_OPTIMIZATION)
    assert cfg["default_model_filename"] == ""
    key_order(cfg)
    assert ('"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
            '"input_pinned_memory":{"enable":true},"output_pinned_memory":'
            '{"enable":true},"gather_kernel_buffer_threshold":0,'
            '"eager_batching":false},"instance_group":') in r.text


def test_configured_optimization_as_triton_prints_it(start_server, onnx_repo):
    srv = explicit(start_server, onnx_repo, "--load-model=tuned")
    r = config_of(srv, "tuned")
    cfg = r.json()
    assert cfg["default_model_filename"] == "graph.onnx"
    assert ('"optimization":{"graph":{"level":-1},"priority":"PRIORITY_DEFAULT",'
            '"execution_accelerators":{"gpu_execution_accelerator":[],'
            '"cpu_execution_accelerator":[{"name":"openvino","parameters":'
            '{"num_of_threads":"2"}}]},"input_pinned_memory":{"enable":false},'
            '"output_pinned_memory":{"enable":true},'
            '"gather_kernel_buffer_threshold":0,"eager_batching":false}') in r.text
    key_order(cfg)
    # What /config printed loads back unchanged (the load API's override).
    r = requests.post(f"{srv.url}/v2/repository/models/tuned/load",
                      json={"parameters": {"config": json.dumps(cfg)}}, timeout=30)
    assert r.status_code == 200, r.text
    assert config_of(srv, "tuned").json() == cfg


def test_grpc_model_config_carries_the_same_fields(start_server, onnx_repo):
    import tritonclient.grpc as grpcclient
    srv = explicit(start_server, onnx_repo, "--load-model=tuned")
    with grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc_port}") as c:
        simple = c.get_model_config("simple").config
        assert simple.HasField("optimization")
        assert simple.optimization.input_pinned_memory.enable
        assert simple.optimization.output_pinned_memory.enable
        assert not simple.optimization.HasField("graph")
        assert simple.default_model_filename == ""
        tuned = c.get_model_config("tuned").config
        assert tuned.default_model_filename == "graph.onnx"
        assert tuned.optimization.graph.level == -1
        assert not tuned.optimization.input_pinned_memory.enable
        accs = tuned.optimization.execution_accelerators.cpu_execution_accelerator
        assert [(a.name, dict(a.parameters)) for a in accs] == [
            ("openvino", {"num_of_threads": "2"})]
