"""BLS tensors of 64 MiB on every path, bounded by the python backend's
shm-region-max-byte-size (here 160 MiB) rather than a fixed size: through
the region (exec from execute), inline (exec(decoupled=True), calls made
at once from threads, a call after execute returned, a decoupled model's
calls), each checked by the calling model against py_large's OUT = IN * 2.
A call whose tensors pass the limit is refused with a message naming the
setting."""

import pathlib
import shutil
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient

import harness
from test_decoupled import Stream, final_flag
from test_python_backend import MODELS, grpc_input, http_input, wait_for

pytestmark = pytest.mark.large  # 64 MiB tensors (make leakcheck skips them)
SERVED = ["py_bls_large", "py_bls_large_threads", "py_large"]
LIMIT_MIB = 160


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("bls-large-repo")
    for name in SERVED:
        shutil.copytree(MODELS / name, repo / name)
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit"] + [f"--load-model={m}" for m in SERVED] +
        [f"--backend-config=python,python-executable={sys.executable}",
         "--backend-config=python,shm-growth-byte-size=16777216",
         f"--backend-config=python,shm-region-max-byte-size={LIMIT_MIB << 20}"],
        workdir=tmp_path_factory.mktemp("bls-large-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def call(srv, mode, mib):
    result = httpclient.InferenceServerClient(srv.hostport, network_timeout=300).infer(
        "py_bls_large", [http_input("MODE", np.array([mode], np.int32), "INT32"),
                         http_input("MIB", np.array([mib], np.int32), "INT32")])
    return result.as_numpy("OUT")[0].decode()


@pytest.mark.parametrize("mode", [0, 1], ids=["region", "inline"])
def test_a_64_mib_call_from_execute(srv, mode):
    assert call(srv, mode, 64) == "ok"


def test_64_mib_calls_at_once_from_threads(srv):
    assert call(srv, 2, 64) == "ok,ok,ok,ok"


def test_a_64_mib_call_after_execute_returned(srv):
    done = pathlib.Path(srv.repo) / "py_bls_large" / "large.done"
    assert call(srv, 3, 64) == "started"
    wait_for(done.exists, "the thread's call", timeout=120)
    assert done.read_text() == "ok"


def test_64_mib_calls_of_a_decoupled_models_thread(srv):
    stream = Stream(srv)
    got = []
    try:
        stream.send("py_bls_large_threads",
                    [grpc_input("MIB", np.array([64], np.int32), "INT32")])
        while True:
            result, error = stream.next()
            assert error is None, error
            got.append(result.as_numpy("OUT")[0].decode())
            if final_flag(result):
                break
    finally:
        stream.close()
    assert got == ["ok", "ok"]


@pytest.mark.parametrize("mode", [0, 1], ids=["region", "inline"])
def test_a_call_past_the_limit_is_refused_naming_it(srv, mode):
    out = call(srv, mode, LIMIT_MIB + 32)  # past the region and any frame
    assert out.startswith("refused: ") and "shm-region-max-byte-size" in out, out
