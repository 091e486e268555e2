"""exec(decoupled=True) from a python model that is not decoupled, as in
Triton: the iterator yields each response as the called model sends it
(py_bls_stream takes py_stream_gate's first response while the second one
waits for a gate the test opens only once the first has arrived), and
ResponseIterator.cancel() cancels the called request: the called model
sees request.is_cancelled() and the iteration ends with its final
response. A decoupled model's threads cancel the same way
(test_python_bls_threads.py)."""

import concurrent.futures

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness
from test_python_backend import grpc_input, http_input, served_python_models, wait_for

SERVED = ["py_bls_stream", "py_stream_gate"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_python_models(tmp_path_factory, "bls-stream", SERVED)


def call(srv, mode, gate, protocol="http"):
    if protocol == "http":
        client, make = httpclient.InferenceServerClient(srv.hostport), http_input
    else:
        client, make = grpcclient.InferenceServerClient(srv.grpc_url), grpc_input
    result = client.infer("py_bls_stream", [
        make("MODE", np.array([mode], np.int32), "INT32"),
        make("GATE", np.array([str(gate).encode()], np.object_), "BYTES")])
    return result.as_numpy("OUT").tolist()


def test_each_response_comes_as_the_called_model_sends_it(srv, tmp_path):
    gate = tmp_path / "gate"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = pool.submit(call, srv, 0, gate)
        try:
            wait_for(tmp_path.joinpath("gate.first").exists,
                     "the first response before the second is sent")
        finally:
            gate.write_text("")  # never leave py_stream_gate waiting
        assert result.result(timeout=60 * harness.timeout_scale()) == [0, 1]


@pytest.mark.parametrize("mode", [1, 2], ids=["exec", "async_exec"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cancel_ends_the_called_request(srv, tmp_path, mode, protocol):
    gate = tmp_path / "gate"
    out = call(srv, mode, gate, protocol)
    assert out[:3] == [0, 1, 2]
    assert out[3] >= 1  # at least the final response came after the cancel
    wait_for(tmp_path.joinpath("gate.cancelled").exists,
             "py_stream_gate to see is_cancelled()")


def test_a_finished_iterator_iterates_again_from_its_first_response(srv, tmp_path):
    assert call(srv, 3, tmp_path / "open") == [0, 1, 0, 1]
