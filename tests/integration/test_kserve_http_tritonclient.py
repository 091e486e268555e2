"""The official tritonclient.http against osprey, unchanged: Triton's HTTP
quick-start flow (health, metadata, config, infer with binary and JSON
tensors), every example model, BYTES/BOOL/FP16, async_infer, compression,
model control, and bodies built by the client but sent with `requests`."""

import gzip
import json
import zlib

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


@pytest.fixture
def client(models_server):
    with httpclient.InferenceServerClient(models_server.hostport, concurrency=4) as c:
        yield c


@pytest.fixture
def qa_client(qa_server):
    with httpclient.InferenceServerClient(qa_server.hostport, concurrency=4) as c:
        yield c


def make_input(name, array, binary=True):
    inp = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


def simple_inputs(binary=True, dtype=np.int32):
    a = np.arange(16, dtype=dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=dtype)
    return a, b, [make_input("INPUT0", a, binary), make_input("INPUT1", b, binary)]


# ---- health and metadata ----------------------------------------------------------


def test_server_live_ready(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    for m in ("simple", "simple_identity", "identity_fp32", "digits_mlp"):
        assert client.is_model_ready(m)
    assert not client.is_model_ready("no_such_model")


def test_server_metadata(client):
    meta = client.get_server_metadata()
    assert meta["name"]
    assert meta["version"]
    assert "binary_tensor_data" in meta["extensions"]


def test_model_metadata(client):
    meta = client.get_model_metadata("simple")
    assert meta["name"] == "simple"
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "add_sub"
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]}]
    assert meta["outputs"] == [
        {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]}]
    meta = client.get_model_metadata("simple", model_version="1")
    assert meta["versions"] == ["1"]
    meta = client.get_model_metadata("simple_identity")
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, -1]}]


def test_model_metadata_unknown(client):
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert e.value.status() == "404"
    assert "Request for unknown model: 'no_such_model' is not found" in e.value.message()


def test_model_config(client):
    cfg = client.get_model_config("simple")
    assert cfg["name"] == "simple"
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["name"] == "INPUT0"
    assert cfg["input"][0]["data_type"] == "TYPE_INT32"
    assert cfg["input"][0]["dims"] == [16]
    assert cfg["output"][0]["name"] == "OUTPUT0"
    cfg = client.get_model_config("simple_identity")
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"
    assert cfg["input"][0]["dims"] == [-1]


def test_repository_index(client):
    idx = client.get_model_repository_index()
    names = {e["name"]: e for e in idx}
    for m in ("simple", "simple_identity", "identity_fp32", "digits_mlp", "simple_string"):
        assert names[m]["state"] == "READY"


# ---- infer: simple (the quick-start model) ---------------------------------------


@pytest.mark.parametrize("binary_in", [True, False], ids=["bin_in", "json_in"])
@pytest.mark.parametrize("binary_out", [True, False], ids=["bin_out", "json_out"])
def test_infer_simple(client, binary_in, binary_out):
    a, b, inputs = simple_inputs(binary_in)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out)]
    res = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert res.as_numpy("OUTPUT0").dtype == np.int32
    out = res.get_output("OUTPUT0")
    assert out["datatype"] == "INT32" and out["shape"] == [1, 16]
    if binary_out:
        assert out["parameters"] == {"binary_data_size": 64}
    else:
        assert "parameters" not in out and len(out["data"]) == 16
    resp = res.get_response()
    assert resp["model_name"] == "simple"
    assert resp["model_version"] == "1"
    assert "id" not in resp


def test_infer_simple_default_outputs(client):
    """No outputs given: the client sends binary_data_output:true."""
    a, b, inputs = simple_inputs()
    res = client.infer("simple", inputs)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    for o in res.get_response()["outputs"]:
        assert o["parameters"]["binary_data_size"] == 64


def test_infer_simple_batch_and_version(client):
    a = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    b = np.full((8, 16), 7, dtype=np.int32)
    res = client.infer("simple", [make_input("INPUT0", a), make_input("INPUT1", b)],
                       model_version="1", request_id="batch-8")
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert res.get_response()["id"] == "batch-8"


def test_infer_one_output_only(client):
    a, b, inputs = simple_inputs()
    res = client.infer("simple", inputs,
                       outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert res.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert [o["name"] for o in res.get_response()["outputs"]] == ["OUTPUT1"]


def test_infer_errors(client):
    a, b, inputs = simple_inputs()
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", inputs)
    assert e.value.status() == "404"
    assert "Request for unknown model: 'no_such_model' is not found" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs[:1])
    assert e.value.status() == "400"
    assert ("expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s).") \
        in e.value.message()
    big = np.zeros((9, 16), np.int32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", [make_input("INPUT0", big), make_input("INPUT1", big)])
    assert e.value.status() == "400"
    assert "inference request batch-size must be <= 8 for 'simple'" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs, model_version="2")
    assert e.value.status() == "404"
    assert "Request for unknown model: 'simple' version 2 is not found" in e.value.message()


# ---- infer: the other example models ------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_identity_fp32(client, binary):
    x = np.linspace(-3, 3, 2 * 50, dtype=np.float32).reshape(2, 50)
    x[0, 0] = 0.1
    res = client.infer("identity_fp32", [make_input("INPUT0", x, binary)],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    y = res.as_numpy("OUTPUT0")
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_simple_identity_bytes(client, binary):
    values = [b"hello", b"", "wörld ü".encode(), b"x" * 1000]
    if binary:
        values.append(b"\x00\xff\xfe binary \x00")
    x = np.array([values], dtype=np.object_)
    res = client.infer("simple_identity", [make_input("INPUT0", x, binary)],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    y = res.as_numpy("OUTPUT0")
    assert y.shape == x.shape
    got = [v if isinstance(v, bytes) else str(v).encode() for v in y.ravel()]
    assert got == values


def test_infer_simple_string_as_the_client_example(client):
    """simple_http_string_infer_client.py's simple_string_inference, step by
    step: integers as text in (INPUT0 binary, INPUT1 JSON), their sum and
    difference as text out (OUTPUT0 binary, OUTPUT1 JSON)."""
    in0 = np.expand_dims(np.arange(start=0, stop=16, dtype=np.int32), axis=0)
    in1 = np.ones(shape=(1, 16), dtype=np.int32)
    expected_sum = np.add(in0, in1)
    expected_diff = np.subtract(in0, in1)
    input0_data = np.array([str(x).encode("utf-8") for x in in0.reshape(in0.size)],
                           dtype=np.object_).reshape(in0.shape)
    input1_data = np.array([str(x).encode("utf-8") for x in in1.reshape(in1.size)],
                           dtype=np.object_).reshape(in1.shape)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
              httpclient.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(input0_data, binary_data=True)
    inputs[1].set_data_from_numpy(input1_data, binary_data=False)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    results = client.infer(model_name="simple_string", inputs=inputs, outputs=outputs)
    output0_data = results.as_numpy("OUTPUT0")
    output1_data = results.as_numpy("OUTPUT1")
    assert output0_data.shape == (1, 16) and output1_data.shape == (1, 16)
    for i in range(16):
        assert int(output0_data[0][i]) == expected_sum[0][i]
        assert int(output1_data[0][i]) == expected_diff[0][i]
    assert output1_data[0][0] in (b"-1", "-1")


def test_infer_simple_string_batch_and_large_values(client):
    a = np.array([[str(v).encode() for v in range(-8, 8)],
                  [b"9223372036854775806"] + [b"-42"] * 15], dtype=np.object_)
    b = np.array([[b"+3"] * 16, [b"1"] + [b"007"] * 15], dtype=np.object_)
    r = client.infer("simple_string", [make_input("INPUT0", a), make_input("INPUT1", b)])
    sums, diffs = r.as_numpy("OUTPUT0"), r.as_numpy("OUTPUT1")
    assert sums.shape == (2, 16)
    assert [int(x) for x in sums[0]] == [v + 3 for v in range(-8, 8)]
    assert [int(x) for x in diffs[0]] == [v - 3 for v in range(-8, 8)]
    assert sums[1][0] == b"9223372036854775807"
    assert [int(x) for x in sums[1][1:]] == [-35] * 15
    assert [int(x) for x in diffs[1][1:]] == [-49] * 15


@pytest.mark.parametrize("bad", [b"x1", b"", b"1.5", b" 1", b"99999999999999999999"])
def test_infer_simple_string_refuses_non_integers(client, bad):
    a = np.array([[bad] + [b"1"] * 15], dtype=np.object_)
    b = np.array([[b"1"] * 16], dtype=np.object_)
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple_string", [make_input("INPUT0", a), make_input("INPUT1", b)])
    assert "not a 64-bit decimal integer" in str(e.value)
    assert e.value.status() == "400"


def test_infer_digits_mlp_binary(client):
    from sklearn.datasets import load_digits
    meta = client.get_model_metadata("digits_mlp")
    in_name, out_name = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(0).permutation(len(x))[-360:]
    x, y = x[order], y[order]
    mbs = client.get_model_config("digits_mlp")["max_batch_size"]
    preds = []
    for s in range(0, len(x), mbs):
        res = client.infer("digits_mlp", [make_input(in_name, x[s:s + mbs])],
                           outputs=[httpclient.InferRequestedOutput(out_name)])
        p = res.as_numpy(out_name)
        assert p.shape == (len(x[s:s + mbs]), 10)
        preds.append(p.argmax(axis=1))
    assert (np.concatenate(preds) == y).mean() >= 0.95


# ---- BOOL, FP16 and other dtypes (QA repository) ---------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_bool(qa_client, binary):
    x = np.array([[True, False, True, True, False]])
    res = qa_client.infer("identity_bool", [make_input("INPUT0", x, binary)],
                          outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    y = res.as_numpy("OUTPUT0")
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, x)
    assert res.get_output("OUTPUT0")["datatype"] == "BOOL"
    if binary:
        assert res.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 5
    else:
        assert res.get_output("OUTPUT0")["data"] == [True, False, True, True, False]


def test_infer_fp16_identity(qa_client):
    x = np.array([[[1.5, -2.0, 65504.0], [0.0, 1e-3, -0.25]]], dtype=np.float16)
    res = qa_client.infer("onnx_zero_1_float16", [make_input("INPUT0", x)])
    y = res.as_numpy("OUTPUT0")
    assert y.dtype == np.float16 and y.shape == (1, 2, 3)
    np.testing.assert_array_equal(y, x)


def test_infer_fp16_add_sub(qa_client):
    a = (np.arange(16, dtype=np.float16) / 4).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float16)
    res = qa_client.infer("simple_fp16", [make_input("INPUT0", a), make_input("INPUT1", b)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    assert res.as_numpy("OUTPUT0").dtype == np.float16


@pytest.mark.parametrize("model,dtype", [("simple_fp32", np.float32), ("simple_int64", np.int64)])
def test_infer_add_sub_dtypes(qa_client, model, dtype):
    a = (np.arange(32, dtype=dtype) * 3).reshape(2, 16)
    b = np.full((2, 16), 2, dtype=dtype)
    for binary in (True, False):
        res = qa_client.infer(model, [make_input("INPUT0", a, binary), make_input("INPUT1", b, binary)],
                              outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
                                       httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)])
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


def test_fp16_over_json_refused(qa_client):
    x = np.ones((1, 2, 2), dtype=np.float16)
    with pytest.raises(InferenceServerException) as e:
        qa_client.infer("onnx_zero_1_float16", [make_input("INPUT0", x, binary=False)])
    assert e.value.status() == "400"
    assert e.value.message() == ("receiving FP16 data via JSON is not supported. "
                                 "Please use the binary data format for input INPUT0")
    with pytest.raises(InferenceServerException) as e:
        qa_client.infer("onnx_zero_1_float16", [make_input("INPUT0", x)],
                        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    assert e.value.status() == "400"
    assert ("sending FP16 data via JSON is not supported. "
            "Please use the binary data format for output") in e.value.message()


def test_infer_bf16_binary(qa_client):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([[1.0, -2.5, 3.140625]], dtype=ml_dtypes.bfloat16)
    inp = httpclient.InferInput("INPUT0", [1, 3], "BF16")
    inp.set_data_from_numpy(x)
    res = qa_client.infer("identity_bf16", [inp])
    assert res.get_output("OUTPUT0")["datatype"] == "BF16"
    assert res.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 6
    y = res.as_numpy("OUTPUT0")
    np.testing.assert_array_equal(np.asarray(y).astype(np.float32), x.astype(np.float32))


@pytest.mark.parametrize("model,dtype", [("identity_uint32", np.uint32), ("identity_int8", np.int8),
                                         ("identity_fp64", np.float64),
                                         ("simple_identity_int64", np.int64)])
def test_infer_identity_dtypes(qa_client, model, dtype):
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
    x = np.array([[info.min, 0, 1, info.max]], dtype=dtype)
    for binary in (True, False):
        res = qa_client.infer(model, [make_input("INPUT0", x, binary)],
                              outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
        y = res.as_numpy("OUTPUT0")
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, x)


def test_infer_empty_tensor(qa_client):
    x = np.zeros((1, 0), dtype=np.float32)
    res = qa_client.infer("onnx_zero_1_float32", [make_input("INPUT0", x)])
    assert res.get_output("OUTPUT0")["shape"] == [1, 0]
    assert res.as_numpy("OUTPUT0").shape == (1, 0)


def test_infer_three_inputs(qa_client):
    xs = [np.full((2, 3), i, dtype=np.float32) for i in range(3)]
    res = qa_client.infer("onnx_zero_3_float32",
                          [make_input(f"INPUT{i}", x, binary=(i != 1)) for i, x in enumerate(xs)],
                          outputs=[httpclient.InferRequestedOutput("OUTPUT2"),
                                   httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
                                   httpclient.InferRequestedOutput("OUTPUT1")])
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(res.as_numpy(f"OUTPUT{i}"), x)


# ---- async, compression, request options ---------------------------------------------


def test_async_infer(client):
    reqs = []
    for i in range(12):
        a = np.full((1, 16), i, dtype=np.int32)
        b = np.arange(16, dtype=np.int32).reshape(1, 16)
        reqs.append((a, b, client.async_infer(
            "simple", [make_input("INPUT0", a), make_input("INPUT1", b)], request_id=str(i))))
    for i, (a, b, handle) in enumerate(reqs):
        res = handle.get_result()
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
        assert res.get_response()["id"] == str(i)


def test_async_infer_error(client):
    a, b, inputs = simple_inputs()
    handle = client.async_infer("no_such_model", inputs)
    with pytest.raises(InferenceServerException) as e:
        handle.get_result()
    assert "Request for unknown model: 'no_such_model' is not found" in e.value.message()


@pytest.mark.parametrize("req_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("resp_alg", [None, "gzip", "deflate"])
def test_infer_compression(client, req_alg, resp_alg):
    a, b, inputs = simple_inputs()
    res = client.infer("simple", inputs, request_compression_algorithm=req_alg,
                       response_compression_algorithm=resp_alg)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


def test_infer_custom_parameters(client):
    a, b, inputs = simple_inputs()
    res = client.infer("simple", inputs, parameters={"my_key": "v", "n": 3, "flag": True, "x": 0.5},
                       priority=1, timeout=10_000_000)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)


def test_client_rejects_transfer_encoding_header(client):
    """qa test_content_encoding_unsupported_client (client-side only)."""
    a, b, inputs = simple_inputs()
    for enc in ("chunked", "compress", "deflate", "gzip"):
        with pytest.raises(InferenceServerException, match="Unsupported HTTP header"):
            client.infer("simple", inputs, headers={"Transfer-Encoding": enc})


# ---- model control through the client -------------------------------------------------


def test_client_model_control(start_server, example_repo_copy):
    srv = start_server(example_repo_copy, ["--model-control-mode=explicit"])
    with httpclient.InferenceServerClient(srv.hostport) as c:
        assert not c.is_model_ready("simple")
        c.load_model("simple")
        assert c.is_model_ready("simple")
        a, b, inputs = simple_inputs()
        np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)
        c.unload_model("simple")
        assert not c.is_model_ready("simple")
        idx = {e["name"]: e for e in c.get_model_repository_index()}
        assert idx["simple"]["state"] == "UNAVAILABLE"
        assert idx["simple"]["reason"] == "unloaded"
        with pytest.raises(InferenceServerException):
            c.infer("simple", inputs)


# ---- client-built bodies sent with requests ---------------------------------------------


def post_client_body(url, model, inputs, outputs=None, headers=None, **kw):
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs, **kw)
    hdrs = dict(headers or {})
    if json_size is not None:
        hdrs["Inference-Header-Content-Length"] = str(json_size)
    return requests.post(f"{url}/v2/models/{model}/infer", data=body, headers=hdrs), body, json_size


def parse_client_response(r):
    ihcl = r.headers.get("Inference-Header-Content-Length")
    return httpclient.InferenceServerClient.parse_response_body(
        r.content, header_length=int(ihcl) if ihcl is not None else None)


def test_requests_with_client_body(models_server):
    a, b, inputs = simple_inputs()
    r, body, json_size = post_client_body(models_server.url, "simple", inputs,
                                          [httpclient.InferRequestedOutput("OUTPUT0"),
                                           httpclient.InferRequestedOutput("OUTPUT1")])
    assert json_size is not None and len(body) == json_size + 128
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    ihcl = int(r.headers["Inference-Header-Content-Length"])
    header = json.loads(r.content[:ihcl])
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [64, 64]
    assert len(r.content) == ihcl + 128
    res = parse_client_response(r)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)


def test_requests_with_client_body_compressed(models_server):
    a, b, inputs = simple_inputs()
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs)
    for enc, fn in (("gzip", gzip.compress), ("deflate", zlib.compress)):
        r = requests.post(f"{models_server.url}/v2/models/simple/infer", data=fn(body),
                          headers={"Content-Encoding": enc, "Accept-Encoding": enc,
                                   "Inference-Header-Content-Length": str(json_size)})
        assert r.status_code == 200, r.text
        assert r.headers["Content-Encoding"] == enc
        res = parse_client_response(r)  # requests has already decoded the body
        np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
