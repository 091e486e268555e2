"""Triton's --http-header-forward-pattern and --grpc-header-forward-pattern:
the headers of a KServe infer request (gRPC ModelInfer and
ModelStreamInfer metadata) whose name the pattern matches anywhere become
string parameters of the request, beside its own, which the model sees in
request.parameters() (tests/integration/python_models/py_requests echoes
them). A pattern that is not a regular expression stops the server at
start, naming the flag."""

import json
import pathlib
import queue
import shutil
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness

MODELS = pathlib.Path(__file__).parent / "python_models"
FORWARDED = {"x-fwd-tenant": "acme", "x-fwd-trace": "t-1"}
OTHER = {"x-other": "kept out"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("forward-repo")
    shutil.copytree(MODELS / "py_requests", repo / "py_requests")
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit", "--load-model=py_requests",
               f"--backend-config=python,python-executable={sys.executable}",
               "--http-header-forward-pattern=fwd",
               "--grpc-header-forward-pattern=^x-fwd-t"],
        workdir=tmp_path_factory.mktemp("forward-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def inputs(mod):
    # 8 rows: the batch the model's dynamic batcher waits for, at once.
    rows = np.ones((8, 1), np.int32)
    ins = [mod.InferInput("IN", [8, 1], "INT32"), mod.InferInput("MODE", [8, 1], "INT32")]
    ins[0].set_data_from_numpy(rows)
    ins[1].set_data_from_numpy(np.zeros((8, 1), np.int32))
    return ins


def params_seen(result):
    return json.loads(result.as_numpy("PARAMS")[0][0].decode())


def test_http_headers_become_parameters(srv):
    client = httpclient.InferenceServerClient(srv.hostport)
    result = client.infer("py_requests", inputs(httpclient), parameters={"own": 1},
                          headers={**FORWARDED, **OTHER})
    client.close()
    assert params_seen(result) == {"own": 1, **FORWARDED}


def test_grpc_metadata_becomes_parameters(srv):
    with grpcclient.InferenceServerClient(srv.grpc_url) as client:
        result = client.infer("py_requests", inputs(grpcclient), parameters={"own": 1},
                              headers={**FORWARDED, **OTHER})
    assert params_seen(result) == {"own": 1, **FORWARDED}


def test_grpc_stream_metadata_becomes_parameters(srv):
    answers = queue.Queue()
    with grpcclient.InferenceServerClient(srv.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)),
                            headers={"x-fwd-tenant": "acme", **OTHER})
        client.async_stream_infer("py_requests", inputs(grpcclient))
        result, error = answers.get(timeout=30 * harness.timeout_scale())
        client.stop_stream()
    assert error is None, error
    assert params_seen(result) == {"x-fwd-tenant": "acme"}


def test_without_the_flag_nothing_is_forwarded(tmp_path):
    shutil.copytree(MODELS / "py_requests", tmp_path / "repo" / "py_requests")
    server = harness.OspreyServer(
        tmp_path / "repo", ["--model-control-mode=explicit", "--load-model=py_requests",
                            f"--backend-config=python,python-executable={sys.executable}"],
        workdir=tmp_path / "srv").start()
    try:
        client = httpclient.InferenceServerClient(server.hostport)
        result = client.infer("py_requests", inputs(httpclient), headers=FORWARDED)
        client.close()
        assert params_seen(result) == {}
    finally:
        server.stop()


def test_an_invalid_pattern_stops_the_start(tmp_path):
    (tmp_path / "repo").mkdir()
    server = harness.OspreyServer(tmp_path / "repo", ["--grpc-header-forward-pattern=(x"],
                                  workdir=tmp_path / "srv").spawn()
    assert server.wait_exit() != 0
    assert "--grpc-header-forward-pattern: invalid regular expression '(x'" in server.log()
