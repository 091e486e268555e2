"""The official tritonclient.grpc against osprey, unchanged: every example
model with the sync client, async callbacks and streams; BYTES, BOOL, FP16;
a 64 MiB tensor; gzip both ways; and the flows of Triton's gRPC client
examples (reproduced here, not copied: CI has no network). Statistics and
metrics count gRPC requests like HTTP ones."""

import queue
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


@pytest.fixture
def client(models_server):
    with grpcclient.InferenceServerClient(models_server.grpc_url) as c:
        yield c


@pytest.fixture
def qa_client(qa_server):
    with grpcclient.InferenceServerClient(qa_server.grpc_url) as c:
        yield c


def make_input(name, array):
    inp = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    inp.set_data_from_numpy(array)
    return inp


def simple_inputs(dtype=np.int32, batch=1):
    a = np.arange(16 * batch, dtype=dtype).reshape(batch, 16)
    b = np.ones((batch, 16), dtype=dtype)
    return a, b, [make_input("INPUT0", a), make_input("INPUT1", b)]


# ---- Triton's client examples, flow by flow ---------------------------------------


def test_example_simple_grpc_health_metadata(client):
    """Mirrors simple_grpc_health_metadata.py: live, ready, model ready,
    server and model metadata, and the config."""
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    meta = client.get_server_metadata()
    assert meta.name == "triton"
    assert "model_repository" in meta.extensions
    mm = client.get_model_metadata("simple")
    assert mm.name == "simple" and mm.versions == ["1"]
    assert [i.name for i in mm.inputs] == ["INPUT0", "INPUT1"]
    assert list(mm.inputs[0].shape) == [-1, 16] and mm.inputs[0].datatype == "INT32"
    cfg = client.get_model_config("simple").config
    assert cfg.name == "simple" and cfg.max_batch_size == 8
    assert [i.name for i in cfg.input] == ["INPUT0", "INPUT1"]
    as_json = client.get_model_config("simple", as_json=True)
    assert as_json["config"]["input"][0]["data_type"] == "TYPE_INT32"
    assert not client.is_model_ready("no_such_model")


def test_example_simple_grpc_infer_client(client):
    """Mirrors simple_grpc_infer_client.py: two INT32 inputs, both outputs
    requested, sum and difference checked."""
    a, b, inputs = simple_inputs()
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
               grpcclient.InferRequestedOutput("OUTPUT1")]
    res = client.infer(model_name="simple", inputs=inputs, outputs=outputs,
                       headers={"test": "1"})
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    r = res.get_response()
    assert r.model_name == "simple" and r.model_version == "1"
    assert len(r.raw_output_contents) == 2  # always raw, as Triton


def test_example_simple_grpc_async_infer_client(client):
    """Mirrors simple_grpc_async_infer_client.py: async_infer with a
    callback, results gathered from a queue."""
    a, b, inputs = simple_inputs()
    done = queue.Queue()
    client.async_infer("simple", inputs, lambda result, error: done.put((result, error)),
                       outputs=[grpcclient.InferRequestedOutput("OUTPUT0"),
                                grpcclient.InferRequestedOutput("OUTPUT1")])
    r, e = done.get(timeout=10)
    assert e is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_example_simple_grpc_model_control(start_server, example_repo_copy):
    """Mirrors simple_grpc_model_control.py: explicit mode, load, infer,
    unload, then the model is not ready and inference fails."""
    srv = start_server(example_repo_copy, ["--model-control-mode=explicit"], wait="live")
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        assert not c.is_model_ready("simple")
        c.load_model("simple")
        assert c.is_model_ready("simple")
        a, b, inputs = simple_inputs()
        np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)
        c.unload_model("simple")
        assert not c.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as e:
            c.infer("simple", inputs)
        assert e.value.status() == "StatusCode.NOT_FOUND"
        assert "has no available versions" in e.value.message()
        index = {m.name: m for m in c.get_model_repository_index().models}
        assert index["simple"].state == "UNAVAILABLE" and index["simple"].reason == "unloaded"


def test_example_simple_grpc_stream(client):
    """Mirrors the streaming example (simple_grpc_sequence_stream_infer_client
    flow on a model that fits): one stream, several requests in flight,
    each response matched by its id."""
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(8):
            a = np.full((1, 16), i, dtype=np.int32)
            b = np.ones((1, 16), dtype=np.int32)
            client.async_stream_infer("simple", [make_input("INPUT0", a), make_input("INPUT1", b)],
                                      request_id=str(i))
        got = {}
        for _ in range(8):
            r, e = results.get(timeout=10)
            assert e is None, e
            got[r.get_response().id] = r.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert sorted(got) == [str(i) for i in range(8)]
    for i in range(8):
        np.testing.assert_array_equal(got[str(i)], np.full((1, 16), i + 1, dtype=np.int32))


# ---- every example model -----------------------------------------------------------


def test_identity_fp32_sync_async_stream(client):
    x = np.linspace(-1, 1, 40, dtype=np.float32).reshape(2, 20)
    np.testing.assert_array_equal(client.infer("identity_fp32", [make_input("INPUT0", x)])
                                  .as_numpy("OUTPUT0"), x)
    done = queue.Queue()
    client.async_infer("identity_fp32", [make_input("INPUT0", x)], lambda result, error: done.put((result, error)))
    r, e = done.get(timeout=10)
    assert e is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    client.start_stream(callback=lambda result, error: done.put((result, error)))
    client.async_stream_infer("identity_fp32", [make_input("INPUT0", x)])
    r, e = done.get(timeout=10)
    client.stop_stream()
    assert e is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)


def test_simple_identity_bytes(client):
    x = np.array([[b"hello", b"", b"\x00\xffbytes", "ünï".encode()]], dtype=np.object_)
    y = client.infer("simple_identity", [make_input("INPUT0", x)]).as_numpy("OUTPUT0")
    assert y.shape == x.shape and list(y.ravel()) == list(x.ravel())


def test_simple_string(client):
    """simple_grpc_string_infer_client.py's flow: integers as text."""
    a = np.array([[str(v).encode() for v in range(16)]], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    r = client.infer("simple_string", [make_input("INPUT0", a), make_input("INPUT1", b)])
    assert [int(v) for v in r.as_numpy("OUTPUT0")[0]] == [v + 1 for v in range(16)]
    assert [int(v) for v in r.as_numpy("OUTPUT1")[0]] == [v - 1 for v in range(16)]


def test_half_plus_two_and_three(client):
    x = np.array([1.0, 2.0, 5.0], dtype=np.float32)
    r = client.infer("half_plus_two", [make_input("x", x)],
                     outputs=[grpcclient.InferRequestedOutput("y")])
    np.testing.assert_allclose(r.as_numpy("y"), x * 0.5 + 2)
    r = client.infer("saved_model_half_plus_three", [make_input("x", x)], model_version="123")
    np.testing.assert_allclose(r.as_numpy("y"), x * 0.5 + 3)


def test_digits_mlp(client):
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x[-200:] / 16.0).astype(np.float32)
    p = client.infer("digits_mlp", [make_input("image", x)]).as_numpy("probabilities")
    assert p.shape == (200, 10)
    assert (p.argmax(axis=1) == y[-200:]).mean() >= 0.95


# ---- dtypes (QA repository) -----------------------------------------------------------


def test_bool(qa_client):
    x = np.array([[True, False, True, True, False]])
    r = qa_client.infer("identity_bool", [make_input("INPUT0", x)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    assert r.get_output("OUTPUT0").datatype == "BOOL"


def test_fp16(qa_client):
    x = np.array([[[1.5, -2.0, 65504.0], [0.0, 1e-3, -0.25]]], dtype=np.float16)
    np.testing.assert_array_equal(
        qa_client.infer("onnx_zero_1_float16", [make_input("INPUT0", x)]).as_numpy("OUTPUT0"), x)
    a, b, inputs = simple_inputs(np.float16)
    r = qa_client.infer("simple_fp16", inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("model,dtype", [("identity_uint32", np.uint32),
                                         ("identity_int8", np.int8),
                                         ("identity_fp64", np.float64),
                                         ("simple_identity_int64", np.int64)])
def test_identity_dtypes(qa_client, model, dtype):
    x = (np.arange(12) - 3).astype(dtype).reshape(2, 6)
    np.testing.assert_array_equal(
        qa_client.infer(model, [make_input("INPUT0", x)]).as_numpy("OUTPUT0"), x)


def test_empty_tensor(qa_client):
    x = np.zeros((1, 0), dtype=np.float32)
    y = qa_client.infer("onnx_zero_1_float32", [make_input("INPUT0", x)]).as_numpy("OUTPUT0")
    assert y.shape == (1, 0)


def test_classification(qa_client):
    x = np.array([[0.1, 0.9, 0.5]], dtype=np.float32)
    r = qa_client.infer("onnx_zero_1_float32", [make_input("INPUT0", x)],
                        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert [v.decode() for v in r.as_numpy("OUTPUT0")[0]] == ["0.900000:1", "0.500000:2"]


@pytest.mark.large
def test_64_mib_tensor(client):
    """A 64 MiB FP32 tensor each way, raw contents both ways."""
    x = np.random.RandomState(1).rand(1, 16 * 1024 * 1024).astype(np.float32)
    y = client.infer("identity_fp32", [make_input("INPUT0", x)]).as_numpy("OUTPUT0")
    assert y.shape == x.shape and np.array_equal(x, y)


# ---- compression, parameters, async errors -------------------------------------------


@pytest.mark.parametrize("alg", ["gzip", "deflate"])
def test_request_compression(client, alg):
    a, b, inputs = simple_inputs()
    r = client.infer("simple", inputs, compression_algorithm=alg)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def test_response_compression(start_server, example_repo_copy):
    """--grpc-infer-response-compression-level: responses come compressed
    (the client decompresses), as Triton's flag does."""
    srv = start_server(example_repo_copy, ["--grpc-infer-response-compression-level=high"])
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        x = np.zeros((1, 1 << 18), dtype=np.float32)
        np.testing.assert_array_equal(
            c.infer("identity_fp32", [make_input("INPUT0", x)],
                    compression_algorithm="gzip").as_numpy("OUTPUT0"), x)


def test_custom_parameters_and_priority(client):
    a, b, inputs = simple_inputs()
    r = client.infer("simple", inputs, parameters={"custom": "v", "n": 3, "flag": True},
                     priority=1, timeout=10_000_000)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def test_async_infer_error(client):
    _, _, inputs = simple_inputs()
    done = queue.Queue()
    client.async_infer("no_such_model", inputs, lambda result, error: done.put((result, error)))
    r, e = done.get(timeout=10)
    assert r is None and e.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'no_such_model' is not found" in e.message()


def test_many_async_in_flight(client):
    """64 requests in flight on one channel, all answered."""
    a, b, inputs = simple_inputs()
    done = queue.Queue()
    for _ in range(64):
        client.async_infer("simple", inputs, lambda result, error: done.put((result, error)))
    for _ in range(64):
        r, e = done.get(timeout=20)
        assert e is None
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_statistics_and_metrics_count_grpc(start_server, example_repo_copy):
    srv = start_server(example_repo_copy)
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        _, _, inputs = simple_inputs()
        for _ in range(3):
            c.infer("simple", inputs)
        st = c.get_inference_statistics("simple").model_stats[0]
        assert st.name == "simple" and st.version == "1"
        assert st.inference_count == 3 and st.execution_count == 3
        assert st.inference_stats.success.count == 3
        assert st.batch_stats[0].batch_size == 1
        js = c.get_inference_statistics(as_json=True)
        assert [m["name"] for m in js["model_stats"]][:2] == ["digits_mlp", "digits_onnx"]
    http = requests.get(srv.url + "/v2/models/simple/stats").json()["model_stats"][0]
    assert http["inference_count"] == 3
    text = requests.get(srv.metrics_url + "/metrics").text
    assert 'nv_inference_request_success{model="simple",version="1"} 3' in text
