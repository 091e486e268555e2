"""Triton's python backend on Osprey: model.py files from
tests/integration/python_models run in stub processes, driven by tritonclient
over HTTP and gRPC. Covers the initialize args, every datatype family,
batching, error responses and exceptions as Triton words them, crashes and
hangs of user code (the server keeps serving and restarts the instance),
load failures, unload/finalize, the shared-memory region's growth and limit,
and the choice of Python (python-executable, EXECUTION_ENV_PATH).
"""

import concurrent.futures
import json
import pathlib
import re
import shutil
import sys
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

MODELS = pathlib.Path(__file__).parent / "python_models"
SERVED = ["py_add_sub", "py_args", "py_auto", "py_bls", "py_bytes", "py_dtypes",
          "py_errors", "py_large", "py_slow", "simple"]
REGION = 64 * 1024        # shm-default-byte-size and shm-growth-byte-size
REGION_MAX = 8 * 1024 * 1024


def python_flags():
    """The Python of the test run (it has numpy) runs the stubs."""
    return [f"--backend-config=python,python-executable={sys.executable}",
            f"--backend-config=python,shm-default-byte-size={REGION}",
            f"--backend-config=python,shm-growth-byte-size={REGION}",
            f"--backend-config=python,shm-region-max-byte-size={REGION_MAX}"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("py-repo")
    shutil.copytree(MODELS, repo, dirs_exist_ok=True)
    shutil.copytree(MODELS.parent.parent.parent / "models" / "simple", repo / "simple")
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit"] +
        [f"--load-model={m}" for m in SERVED] + python_flags(),
        workdir=tmp_path_factory.mktemp("py-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def served_python_models(tmp_path_factory, tag, names):
    """The body of a module fixture: a server loading the python test
    models `names`, copied into a fresh repository; yields it, then stops
    it and checks its exit."""
    repo = tmp_path_factory.mktemp(tag + "-repo")
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit"] +
        [f"--load-model={m}" for m in names] + python_flags(),
        workdir=tmp_path_factory.mktemp(tag + "-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout * harness.timeout_scale()
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.02)


def http_input(name, array, dtype):
    i = httpclient.InferInput(name, list(array.shape), dtype)
    i.set_data_from_numpy(array)
    return i


def grpc_input(name, array, dtype):
    i = grpcclient.InferInput(name, list(array.shape), dtype)
    i.set_data_from_numpy(array)
    return i


def mode_http(srv, mode):
    client = httpclient.InferenceServerClient(srv.hostport)
    return client.infer("py_errors", [http_input("MODE", np.array([mode], np.int32), "INT32")])


def mode_raw(srv, mode):
    return requests.post(f"{srv.url}/v2/models/py_errors/infer", json={
        "inputs": [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [mode]}]},
        timeout=60)


# ---- serving ---------------------------------------------------------------

def test_add_sub_http_and_grpc(srv):
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([0.5, 1, 1.5, 2], np.float32)
    http = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_add_sub", [http_input("INPUT0", a, "FP32"), http_input("INPUT1", b, "FP32")])
    grpc = grpcclient.InferenceServerClient(srv.grpc_url).infer(
        "py_add_sub", [grpc_input("INPUT0", a, "FP32"), grpc_input("INPUT1", b, "FP32")])
    for result in (http, grpc):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_only_requested_output_is_returned(srv):
    a = np.ones(4, np.float32)
    result = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_add_sub", [http_input("INPUT0", a, "FP32"), http_input("INPUT1", a, "FP32")],
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros(4, np.float32))


def test_initialize_args(srv):
    result = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_args", [http_input("DUMMY", np.array([0], np.int32), "INT32")])
    args = json.loads(result.as_numpy("ARGS")[0])
    assert args["model_name"] == "py_args"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_instance_name"] == "py_args_0_0"
    assert pathlib.Path(args["model_repository"]).name == "py_args"
    config = args["model_config"]
    assert config["name"] == "py_args"
    assert config["backend"] == "python"
    assert config["input"][0] == {"name": "DUMMY", "data_type": "TYPE_INT32",
                                  "dims": [1], "optional": False}
    assert config["output"][0]["data_type"] == "TYPE_STRING"
    assert config["parameters"]["greeting"] == {"string_value": 'hello "world"'}


def test_logger_writes_into_server_log_at_its_level(srv):
    log = srv.log()
    assert re.search(r"^I.*\] \"py_add_sub initialized as py_add_sub_0_0\"$", log, re.M)
    assert re.search(r"^W.*\] \"py_add_sub warns\"$", log, re.M)
    assert re.search(r"^E.*\] \"py_add_sub errs\"$", log, re.M)


def test_bytes_batched_requests_keep_their_own_strings(srv):
    client = httpclient.InferenceServerClient(srv.hostport, concurrency=8)
    batches = [np.array([[f"r{i}-{k}".encode() for k in range(i % 3 + 1)]], dtype=np.object_)
               for i in range(16)]
    pending = [client.async_infer("py_bytes", [http_input("INPUT0", b, "BYTES")])
               for b in batches]
    for batch, p in zip(batches, pending):
        result = p.get_result()
        assert result.as_numpy("OUTPUT0").tolist() == batch.tolist()
        assert result.as_numpy("OUTPUT1").tolist() == [[s.upper() for s in batch[0]]]


def test_bytes_over_grpc_with_empty_and_binary_strings(srv):
    data = np.array([[b"", b"\x00\xff", "é".encode()]], dtype=np.object_)
    result = grpcclient.InferenceServerClient(srv.grpc_url).infer(
        "py_bytes", [grpc_input("INPUT0", data, "BYTES")])
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


def test_datatypes_round_trip(srv):
    feeds = {
        "BOOL": (np.array([True, False, True]), "BOOL"),
        "INT8": (np.array([-128, 0, 127], np.int8), "INT8"),
        "UINT16": (np.array([0, 65535], np.uint16), "UINT16"),
        "INT64": (np.array([-(2 ** 62), 2 ** 62], np.int64), "INT64"),
        "FP16": (np.array([0.5, -2.0, 65504], np.float16), "FP16"),
        "FP64": (np.array([np.pi, -1e300], np.float64), "FP64"),
    }
    for client, make in ((httpclient.InferenceServerClient(srv.hostport), http_input),
                         (grpcclient.InferenceServerClient(srv.grpc_url), grpc_input)):
        result = client.infer("py_dtypes", [make("I_" + k, a, t) for k, (a, t) in feeds.items()])
        for k, (a, _) in feeds.items():
            out = result.as_numpy("O_" + k)
            assert out.dtype == a.dtype
            np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("count", [0, 1, REGION // 4 - 1, REGION // 4 + 1, 3 * REGION,
                                   REGION_MAX // 8 - 64])
def test_tensor_sizes_around_region_growth(srv, count):
    data = np.arange(count, dtype=np.float32)
    result = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_large", [http_input("IN", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUT"), data * 2)


def test_inputs_past_region_limit_fail_that_request_only(srv):
    client = httpclient.InferenceServerClient(srv.hostport)
    too_big = np.zeros(REGION_MAX // 4 + 1, np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("py_large", [http_input("IN", too_big, "FP32")])
    assert "shm-region-max-byte-size" in e.value.message()
    # Inputs fit, outputs do not: the stub says so.
    half = np.zeros(REGION_MAX // 8 * 3 // 2, np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("py_large", [http_input("IN", half, "FP32")])
    assert "shm-region-max-byte-size" in e.value.message()
    small = np.ones(5, np.float32)
    np.testing.assert_array_equal(
        client.infer("py_large", [http_input("IN", small, "FP32")]).as_numpy("OUT"), small * 2)


def test_slow_execute_blocks_neither_http_nor_other_models(srv, tmp_path):
    gate = tmp_path / "gate"
    client = httpclient.InferenceServerClient(srv.hostport)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(client.infer, "py_slow", [http_input(
            "GATE", np.array([str(gate).encode()], dtype=np.object_), "BYTES")])
        a = np.ones(4, np.float32)
        for _ in range(3):
            result = httpclient.InferenceServerClient(srv.hostport).infer(
                "py_add_sub", [http_input("INPUT0", a, "FP32"), http_input("INPUT1", a, "FP32")])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        assert requests.get(f"{srv.url}/v2/health/live", timeout=10).status_code == 200
        assert not slow.done()
        gate.write_text("open")
        assert slow.result(timeout=60).as_numpy("OUT")[0] == str(gate).encode()


def test_instances_run_python_in_parallel(srv, tmp_path):
    """py_slow has two instances: both requests are inside execute at once
    (each stub marks its entry), before either gate opens."""
    gates = [tmp_path / "a", tmp_path / "b"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(httpclient.InferenceServerClient(srv.hostport).infer,
                               "py_slow", [http_input("GATE", np.array(
                                   [str(g).encode()], dtype=np.object_), "BYTES")])
                   for g in gates]
        wait_for(lambda: all(pathlib.Path(str(g) + ".entered").exists() for g in gates),
                 "both instances inside execute")
        for g in gates:
            g.write_text("open")
        for g, p in zip(gates, pending):
            assert p.result(timeout=60).as_numpy("OUT")[0] == str(g).encode()


# ---- errors as Triton reports them -------------------------------------------

def test_error_response_fails_the_request_with_its_message(srv):
    r = mode_raw(srv, 1)
    assert r.status_code == 500
    assert r.json() == {"error": "error response from py_errors"}
    r = mode_raw(srv, 2)  # TritonError.INVALID_ARG
    assert r.status_code == 400
    assert r.json() == {"error": "bad MODE"}


def test_exception_in_execute_as_triton_words_it(srv):
    r = mode_raw(srv, 3)
    assert r.status_code == 500
    assert r.json()["error"] == (
        "Failed to process the request(s) for model 'py_errors_0_0', message: "
        "ValueError: mode 3 is not allowed\n\nAt:\n"
        "  py_errors/1/model.py(14): fail\n"
        "  py_errors/1/model.py(31): execute\n")
    with pytest.raises(InferenceServerException) as e:
        grpcclient.InferenceServerClient(srv.grpc_url).infer(
            "py_errors", [grpc_input("MODE", np.array([3], np.int32), "INT32")])
    assert "ValueError: mode 3 is not allowed" in e.value.message()
    assert mode_http(srv, 0).as_numpy("OUT").tolist() == [0]


def test_output_datatype_as_the_model_gave_it_and_response_count(srv):
    # As a running Triton 2.51 answers: the model's FP64, not the config's
    # INT32 (Triton's bls_decoupled example relies on it).
    r = mode_raw(srv, 7)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert (out["name"], out["datatype"], out["data"]) == ("OUT", "FP64", [1.5])
    r = mode_raw(srv, 8)
    assert r.status_code == 500
    assert "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0" in r.json()["error"]


@pytest.mark.parametrize("mode,why", [(4, "os._exit"), (5, "segfault"), (6, "hang"),
                                      (9, "leak past stub-memory-limit-byte-size")])
def test_dead_stub_fails_its_request_and_the_instance_restarts(srv, mode, why):
    r = mode_raw(srv, mode)
    assert r.status_code == 500, why
    assert r.json() == {"error": "Stub process 'py_errors_0_0' is not healthy."}, (
        r.json(), srv.log_tail())
    # The next request starts a new stub and is served.
    assert mode_http(srv, 0).as_numpy("OUT").tolist() == [0]
    assert requests.get(f"{srv.url}/v2/models/py_errors/ready", timeout=10).status_code == 200
    assert "restarting the stub of instance 'py_errors_0_0'" in srv.log()
    if mode == 9:
        assert "instance 'py_errors_0_0' ran out of memory in execute" in srv.log()


# ---- BLS --------------------------------------------------------------------------

def bls(client, make, mode, a, b):
    return client.infer("py_bls", [make("MODE", np.array([mode], np.int32), "INT32"),
                                   make("INPUT0", a, "FP32"), make("INPUT1", b, "FP32")])


def test_bls_exec_async_exec_and_decoupled_iteration(srv):
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([10, 20, 30, 40], np.float32)
    for client, make in ((httpclient.InferenceServerClient(srv.hostport), http_input),
                         (grpcclient.InferenceServerClient(srv.grpc_url), grpc_input)):
        for mode in (0, 2):
            result = bls(client, make, mode, a, b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        result = bls(client, make, 1, a, b)  # async execute, two async_exec
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b - a)


def test_bls_from_initialize_gets_tritons_error(srv):
    a = np.zeros(4, np.float32)
    with pytest.raises(InferenceServerException) as e:
        bls(httpclient.InferenceServerClient(srv.hostport), http_input, 5, a, a)
    assert e.value.message() == "BLS is only supported during the 'execute' function."


def test_bls_reaches_a_model_of_another_backend(srv):
    a = np.zeros(4, np.float32)
    result = bls(httpclient.InferenceServerClient(srv.hostport), http_input, 4, a, a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4) + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.arange(4) - 1)


def test_bls_error_comes_back_as_the_response_error(srv):
    a = np.zeros(4, np.float32)
    with pytest.raises(InferenceServerException) as e:
        bls(httpclient.InferenceServerClient(srv.hostport), http_input, 3, a, a)
    assert "no_such_model" in e.value.message()
    np.testing.assert_array_equal(
        bls(httpclient.InferenceServerClient(srv.hostport), http_input, 0, a, a)
        .as_numpy("OUTPUT0"), a)


# ---- auto_complete_config --------------------------------------------------------

def test_auto_complete_config_fills_a_model_without_config(srv):
    config = requests.get(f"{srv.url}/v2/models/py_auto/config", timeout=10).json()
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"], i["optional"]) for i in config["input"]] == [
        ("IN", "TYPE_FP32", [3], False), ("EXTRA", "TYPE_INT32", [-1], True)]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("OUT", "TYPE_FP32", [3])]
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = grpcclient.InferenceServerClient(srv.grpc_url).infer(
        "py_auto", [grpc_input("IN", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUT"), data + 1)


def test_auto_complete_config_error_fails_the_load(srv):
    with pytest.raises(InferenceServerException) as e:
        httpclient.InferenceServerClient(srv.hostport).load_model("py_auto_error")
    assert ("ValueError: configuration specified max_batch_size 2, but in "
            "auto-complete-config function for model 'py_auto_error' specified "
            "max_batch_size 8") in e.value.message()


# ---- loading, unloading, environments -----------------------------------------

def test_exception_in_initialize_fails_the_load(srv):
    client = httpclient.InferenceServerClient(srv.hostport)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("py_init_error")
    message = e.value.message()
    assert message.startswith("load failed for model 'py_init_error': version 1 is at "
                              "UNAVAILABLE state: "), message
    assert ("RuntimeError: cannot initialize py_init_error\n\nAt:\n"
            "  py_init_error/1/model.py(6): initialize\n") in message
    assert str(srv.repo) not in message


def test_unload_runs_finalize_and_reload_serves(srv):
    client = httpclient.InferenceServerClient(srv.hostport)
    client.unload_model("py_add_sub")
    wait_for(lambda: "py_add_sub finalized" in srv.log(), "finalize in the log")
    client.load_model("py_add_sub")
    a = np.ones(4, np.float32)
    result = client.infer("py_add_sub", [http_input("INPUT0", a, "FP32"),
                                         http_input("INPUT1", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def write_env_model(repo, name, env_path):
    shutil.copytree(MODELS / "py_add_sub", repo / name)
    config = (repo / name / "config.pbtxt").read_text().replace(
        'name: "py_add_sub"', f'name: "{name}"')
    config += ('parameters { key: "EXECUTION_ENV_PATH" value { string_value: "%s" } }\n'
               % env_path)
    (repo / name / "config.pbtxt").write_text(config)


def test_execution_env_path(start_server, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    write_env_model(repo, "py_env", sys.prefix)
    write_env_model(repo, "py_env_tarball", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    (repo / "py_env_tarball" / "env.tar.gz").write_bytes(b"\x1f\x8b")
    # No python-executable: the default python3 may lack numpy, the
    # environment of py_env has it.
    server = start_server(repo, ["--model-control-mode=explicit"])
    client = httpclient.InferenceServerClient(server.hostport)
    client.load_model("py_env")
    a = np.ones(4, np.float32)
    result = client.infer("py_env", [http_input("INPUT0", a, "FP32"),
                                     http_input("INPUT1", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("py_env_tarball")
    assert "conda-pack" in e.value.message()
    assert str(repo) not in e.value.message()


FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"


@pytest.mark.skipif(not FAKE_GPU_BIN.exists(),
                    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")
def test_kind_gpu_instances_get_their_device_and_tensors_cross_it(start_server, tmp_path):
    """On osprey_fakegpu (tests/fake_cuda: device memory host code cannot
    touch) a KIND_GPU python instance gets its device id and its tensors
    are copied to and from the device, never read in place."""
    repo = tmp_path / "repo"
    for name in ("py_add_sub", "py_args"):
        shutil.copytree(MODELS / name, repo / name)
        config = (repo / name / "config.pbtxt").read_text()
        config = config.replace("instance_group [ { kind: KIND_CPU } ]", "")
        (repo / name / "config.pbtxt").write_text(
            config + "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n")
    server = start_server(repo, ["--strict-gpu"] + python_flags(), binary=FAKE_GPU_BIN)
    client = httpclient.InferenceServerClient(server.hostport)
    args = json.loads(client.infer("py_args", [http_input(
        "DUMMY", np.array([0], np.int32), "INT32")]).as_numpy("ARGS")[0])
    assert args["model_instance_kind"] == "GPU"
    assert args["model_instance_device_id"] == "1"
    a = np.array([1, 2, 3, 4], np.float32)
    result = client.infer("py_add_sub", [http_input("INPUT0", a, "FP32"),
                                         http_input("INPUT1", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)


@pytest.mark.parametrize("python, message", [
    ("/nonexistent/python3", "cannot start the Python executable (python-executable or "
                             "EXECUTION_ENV_PATH): No such file or directory"),
    ("/bin/false", "the stub of instance 'py_add_sub_0_0' exited during initialize"),
])
def test_a_python_that_cannot_run_the_stub_fails_the_load_only(start_server, tmp_path,
                                                               python, message):
    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "py_add_sub", repo / "py_add_sub")
    server = start_server(repo, ["--model-control-mode=explicit",
                                 f"--backend-config=python,python-executable={python}"])
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("py_add_sub")
    assert message in e.value.message()
    assert "nonexistent" not in e.value.message()
    assert client.is_server_live()
