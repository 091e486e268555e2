"""BLS from the threads of a python model that is not decoupled, outside
execute, as Triton allows from the end of initialize to finalize:
py_bls_background's threads call other models (exec, async_exec gathered,
exec(decoupled=True) iterated) while no request runs and after execute
returned, alone and while requests of the same instance come and go; they
write what came back to files the test polls. A stub that dies with a call
in flight between requests is replaced at the next request. initialize and
finalize still get Triton's refusal.
"""

import concurrent.futures
import json
import pathlib

import numpy as np
import pytest
import tritonclient.http as httpclient

from test_python_backend import http_input, served_python_models, wait_for

SERVED = ["py_bls_background", "py_add_sub", "py_square", "py_slow"]
COUNT = 20  # exec calls of a thread started by execute (model.py's COUNT)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_python_models(tmp_path_factory, "bls-bg", SERVED)


def call(srv, mode, gate=""):
    client = httpclient.InferenceServerClient(srv.hostport)
    result = client.infer("py_bls_background", [
        http_input("MODE", np.array([mode], np.int32), "INT32"),
        http_input("GATE", np.array([str(gate).encode()], np.object_), "BYTES")])
    return result.as_numpy("OUT")[0].decode()


def expected(count):
    return {"exec": [100.0 + i for i in range(count)], "async": [3.0, 7.0],
            "stream": [3, 3, 3]}


def read_when_written(path):
    wait_for(path.exists, f"{path.name} from the model's thread")
    return json.loads(path.read_text())


def test_a_thread_from_initialize_calls_while_no_request_runs(srv):
    folder = pathlib.Path(srv.repo) / "py_bls_background"
    (folder / "go").write_text("")
    # No request is sent until the thread has written its results: only
    # the watcher of the idle channel can have served its calls.
    assert read_when_written(folder / "done") == expected(1)


def test_a_thread_calls_after_execute_returned(srv, tmp_path):
    gate = tmp_path / "gate"
    assert call(srv, 0, gate) == "started"  # execute has returned
    gate.write_text("")
    assert read_when_written(gate.with_name("gate.done")) == expected(COUNT)


def test_calls_outside_execute_interleave_with_requests(srv, tmp_path):
    gates = [tmp_path / f"gate{k}" for k in range(3)]
    for gate in gates:
        assert call(srv, 0, gate) == "started"
        gate.write_text("")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        echoes = list(pool.map(lambda k: call(srv, 1, f"plain-{k}"), range(60)))
    assert echoes == [f"plain-{k}" for k in range(60)]
    for gate in gates:
        assert read_when_written(gate.with_name(gate.name + ".done")) == expected(COUNT)


def test_initialize_still_refuses_bls(srv):
    assert call(srv, 3) == "BLS is only supported during the 'execute' function."


def test_a_stub_that_dies_between_requests_is_replaced(srv, tmp_path):
    gate = tmp_path / "slow"
    assert call(srv, 2, gate) == "started"
    wait_for(gate.with_name("slow.entered").exists, "py_slow to hold the call")
    gate.with_name("slow.die").write_text("")  # execute has returned
    wait_for(lambda: "'py_bls_background_0_0' closed its channel between requests"
             in srv.log(), "the watcher to see the stub go")
    # py_slow still holds the dead stub's call: its answer, once the gate
    # opens, must reach no one.
    gate.write_text("")
    assert call(srv, 1, "after") == "after"
    assert "restarting the stub of instance 'py_bls_background_0_0'" in srv.log()
    again = tmp_path / "again"
    assert call(srv, 0, again) == "started"
    again.write_text("")
    assert read_when_written(tmp_path / "again.done") == expected(COUNT)


def test_finalize_refuses_bls(srv):
    httpclient.InferenceServerClient(srv.hostport).unload_model("py_bls_background")
    wait_for(lambda: "py_bls_background finalize: BLS is only supported during the "
             "'execute' function." in srv.log(), "finalize's refusal in the log")
