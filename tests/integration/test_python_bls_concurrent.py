"""BLS calls of a model that is not decoupled run at once while its execute
runs, as in Triton: py_bls_concurrent makes two calls to py_slow (two
instances) with asyncio.gather of async_exec, from two threads with exec,
and from two threads with exec(decoupled=True). Each py_slow call marks its
entry and blocks until its gate file exists; the test opens the gates only
once both calls have entered, so calls run one after the other would never
get there (the wait fails instead of hanging: the gates open regardless)."""

import concurrent.futures

import numpy as np
import pytest
import tritonclient.http as httpclient

import harness
from test_python_backend import http_input, served_python_models, wait_for

SERVED = ["py_bls_concurrent", "py_slow", "py_add_sub"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_python_models(tmp_path_factory, "bls-conc", SERVED)


def call(srv, mode, gates):
    client = httpclient.InferenceServerClient(srv.hostport)
    return client.infer("py_bls_concurrent", [
        http_input("MODE", np.array([mode], np.int32), "INT32"),
        http_input("GATE", np.array([str(g).encode() for g in gates], np.object_),
                   "BYTES")])


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["asyncio_gather", "threads_exec",
                                                 "threads_exec_decoupled"])
def test_two_bls_calls_are_in_flight_at_once(srv, tmp_path, mode):
    gates = [tmp_path / "gate0", tmp_path / "gate1"]
    entered = [g.with_name(g.name + ".entered") for g in gates]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = pool.submit(call, srv, mode, gates)
        try:
            wait_for(lambda: all(e.exists() for e in entered),
                     "both BLS calls to reach py_slow")
        finally:
            for g in gates:
                g.write_text("open")
        out = result.result(timeout=60 * harness.timeout_scale()).as_numpy("OUT")
    assert list(out) == [str(g).encode() for g in gates]


def test_calls_run_again_after_concurrent_ones(srv, tmp_path):
    """The region and the inline path both serve the next execute, and the
    instance's other traffic goes on."""
    for round in range(3):
        gates = [tmp_path / f"r{round}g0", tmp_path / f"r{round}g1"]
        for g in gates:
            g.write_text("open")
        out = call(srv, round % 3, gates).as_numpy("OUT")
        assert list(out) == [str(g).encode() for g in gates]
    a = np.ones(4, np.float32)
    result = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_add_sub", [http_input("INPUT0", a, "FP32"), http_input("INPUT1", a, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
