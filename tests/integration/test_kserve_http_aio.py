"""Mirrors Triton's qa/L0_http/python_http_aio_test.py (TestHttpAioClient):
every call of tritonclient.http.aio reaches the server and answers as
Triton's does, with the server started as L0_http/test.sh starts it for
that test (default model control mode, --allow-client-shm=true). Each test
names the upstream case it reproduces; the code is the project's own."""

import asyncio

import numpy as np
import pytest
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

import harness

MODELS = ["simple", "onnx_zero_1_float32", "onnx_zero_1_object"]
POLLING = "explicit model load / unload is not allowed if polling is enabled"


@pytest.fixture(scope="module")
def aio_server(tmp_path_factory):
    repo = harness.make_repo(tmp_path_factory.mktemp("aio_repo"), MODELS)
    srv = harness.OspreyServer(repo, ["--allow-client-shm=true"],
                               workdir=tmp_path_factory.mktemp("aio_srv")).start()
    yield srv
    srv.stop()
    assert not srv.clean_exit_problems(), srv.log_tail()


def call(server, fn):
    """Runs `await fn(client)` on a fresh aio client (the upstream asyncSetUp
    and asyncTearDown) and returns its result."""

    async def run():
        client = aioclient.InferenceServerClient(url=server.hostport)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(run())


def test_is_server_live(aio_server):  # test_is_server_live
    assert call(aio_server, lambda c: c.is_server_live()) is True


def test_is_server_ready(aio_server):  # test_is_server_ready
    assert call(aio_server, lambda c: c.is_server_ready()) is True


def test_is_model_ready(aio_server):  # test_is_model_ready
    assert call(aio_server, lambda c: c.is_model_ready("simple")) is True


def test_get_server_metadata(aio_server):  # test_get_server_metadata
    assert call(aio_server, lambda c: c.get_server_metadata())["name"] == "triton"


def test_get_model_metadata(aio_server):  # test_get_model_metadata
    assert call(aio_server, lambda c: c.get_model_metadata("simple"))["name"] == "simple"


def test_get_model_config(aio_server):  # test_get_model_config
    assert call(aio_server, lambda c: c.get_model_config("simple"))["name"] == "simple"


def test_get_model_repository_index(aio_server):  # test_get_model_repository_index
    # upstream's repository holds 7 models; this one holds len(MODELS)
    index = call(aio_server, lambda c: c.get_model_repository_index())
    assert len(index) == len(MODELS)
    assert sorted(m["name"] for m in index) == sorted(MODELS)


# test_load_model and test_unload_model (which, upstream, both call
# load_model): model control mode none refuses both
@pytest.mark.parametrize("action", ["load_model", "unload_model"])
def test_load_and_unload_model(aio_server, action):
    with pytest.raises(InferenceServerException, match=POLLING):
        call(aio_server, lambda c: getattr(c, action)("simple"))


def test_get_inference_statistics(aio_server):  # test_get_inference_statistics
    stats = call(aio_server, lambda c: c.get_inference_statistics())
    assert sorted(s["name"] for s in stats["model_stats"]) == sorted(MODELS)


def test_update_and_get_trace_settings(aio_server):
    # test_update_trace_settings (an empty update) and test_get_trace_settings
    updated = call(aio_server, lambda c: c.update_trace_settings())
    got = call(aio_server, lambda c: c.get_trace_settings())
    assert updated == got and "trace_level" in got


def test_system_shared_memory(aio_server):
    # test_get_system_shared_memory_status, test_register_system_shared_memory
    # (an empty name is an error) and test_unregister_system_shared_memory
    assert call(aio_server, lambda c: c.get_system_shared_memory_status()) == []
    with pytest.raises(InferenceServerException):
        call(aio_server, lambda c: c.register_system_shared_memory("", "", 0))
    assert call(aio_server, lambda c: c.unregister_system_shared_memory()) is None


def test_cuda_shared_memory(aio_server):
    # test_get_cuda_shared_memory_status, test_register_cuda_shared_memory and
    # test_unregister_cuda_shared_memory. Upstream passes b"" as the handle,
    # which this tritonclient cannot serialize (a TypeError before any
    # request); an empty base64 string makes the same empty-name request.
    assert call(aio_server, lambda c: c.get_cuda_shared_memory_status()) == []
    with pytest.raises(InferenceServerException):
        call(aio_server, lambda c: c.register_cuda_shared_memory("", "", 0, 0))
    assert call(aio_server, lambda c: c.unregister_cuda_shared_memory()) is None


def test_infer_through_the_aio_client(aio_server):
    # simple_http_aio_infer_client.py, which L0_http runs beside the test
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)

    async def infer(c):
        inputs = [aioclient.InferInput("INPUT0", [1, 16], "INT32"),
                  aioclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b, binary_data=False)
        results = await asyncio.gather(*[c.infer("simple", inputs) for _ in range(8)])
        return [(r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")) for r in results]

    for out0, out1 in call(aio_server, infer):
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)
