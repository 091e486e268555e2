"""ONNX models from a Triton repository on Osprey's own runtime (backend
"onnxruntime"): configs absent, partial and full; every frontend; varying
shapes; dynamic batching; config mismatches and hostile files.

The graphs are built with the onnx package (tests/integration/onnx_models.py)
and every answer is compared with onnxruntime's.
"""

import concurrent.futures
import json
import shutil

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

import harness
import onnx_models

RTOL, ATOL = 1e-4, 1e-5


def write_onnx(repo, name, model, config=None, filename="model.onnx"):
    vdir = repo / name / "1"
    vdir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(vdir / filename))
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    return vdir


def index(srv):
    r = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=10)
    return {m["name"]: m for m in r.json()}


def http_infer(srv, model, feeds, binary=True):
    client = httpclient.InferenceServerClient(srv.hostport)
    inputs = []
    for name, arr in feeds.items():
        i = httpclient.InferInput(name, list(arr.shape), "FP32")
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    return client.infer(model, inputs)


def grpc_infer(srv, model, feeds):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    inputs = []
    for name, arr in feeds.items():
        i = grpcclient.InferInput(name, list(arr.shape), "FP32")
        i.set_data_from_numpy(arr)
        inputs.append(i)
    return client.infer(model, inputs)


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    return path


def test_model_without_config_is_auto_completed_as_triton_does(repo, start_server):
    model = onnx_models.mlp()
    write_onnx(repo, "mlp", model)
    srv = start_server(repo)
    cfg = requests.get(f"{srv.url}/v2/models/mlp/config", timeout=10).json()
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["backend"] == "onnxruntime"
    assert cfg["max_batch_size"] == 4
    assert "dynamic_batching" in cfg
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == \
        [("x", "TYPE_FP32", [16])]
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == \
        [("y", "TYPE_FP32", [4])]
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    (want,) = onnx_models.reference(model, {"x": x})
    got = http_infer(srv, "mlp", {"x": x}).as_numpy("y")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_backend_config_sets_the_default_max_batch_size(repo, start_server):
    write_onnx(repo, "mlp", onnx_models.mlp())
    srv = start_server(repo, ["--backend-config=onnxruntime,default-max-batch-size=16"])
    cfg = requests.get(f"{srv.url}/v2/models/mlp/config", timeout=10).json()
    assert cfg["max_batch_size"] == 16


def test_cnn_through_every_frontend(repo, start_server):
    model = onnx_models.cnn()
    write_onnx(repo, "cnn", model, harness.model_config(
        "cnn", "onnxruntime", [("image", "TYPE_FP32", [3, 16, 16])],
        [("logits", "TYPE_FP32", [5])], max_batch_size=8).replace(
            'backend: "onnxruntime"', 'platform: "onnxruntime_onnx"'))
    srv = start_server(repo)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    (want,) = onnx_models.reference(model, {"image": x})
    for binary in (True, False):
        got = http_infer(srv, "cnn", {"image": x}, binary=binary).as_numpy("logits")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    got = grpc_infer(srv, "cnn", {"image": x}).as_numpy("logits")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # TF Serving's REST API, row format
    r = requests.post(f"{srv.url}/v1/models/cnn:predict",
                      data=json.dumps({"instances": x.tolist()}), timeout=30)
    assert r.status_code == 200, r.text
    got = np.array(r.json()["predictions"], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_unfused_plan_gives_the_same_answers(repo, start_server):
    """graph level -1 turns fusion off; both plans match onnxruntime."""
    model = onnx_models.cnn()
    base = harness.model_config(
        "cnn", "onnxruntime", [("image", "TYPE_FP32", [3, 16, 16])],
        [("logits", "TYPE_FP32", [5])], max_batch_size=8)
    write_onnx(repo, "cnn", model, base)
    write_onnx(repo, "cnn_unfused", model,
               base.replace('name: "cnn"', 'name: "cnn_unfused"') +
               "optimization { graph { level: -1 } }\n")
    srv = start_server(repo)
    x = np.random.default_rng(2).standard_normal((4, 3, 16, 16)).astype(np.float32)
    (want,) = onnx_models.reference(model, {"image": x})
    for name in ("cnn", "cnn_unfused"):
        got = http_infer(srv, name, {"image": x}).as_numpy("logits")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_sequence_length_and_batch_vary_per_request(repo, start_server):
    model = onnx_models.attention()
    write_onnx(repo, "attn", model)
    srv = start_server(repo)
    rng = np.random.default_rng(3)
    for batch, seq in ((1, 3), (2, 7), (1, 3), (3, 1)):
        x = rng.standard_normal((batch, seq, 16)).astype(np.float32)
        (want,) = onnx_models.reference(model, {"x": x})
        got = http_infer(srv, "attn", {"x": x}).as_numpy("y")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_dynamic_batching_runs_requests_together(repo, start_server):
    model = onnx_models.mlp()
    write_onnx(repo, "mlp", model, harness.model_config(
        "mlp", "onnxruntime", [("x", "TYPE_FP32", [16])], [("y", "TYPE_FP32", [4])],
        max_batch_size=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 200000 }\n"))
    srv = start_server(repo)
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda x: http_infer(srv, "mlp", {"x": x}).as_numpy("y"), xs))
    for x, got in zip(xs, results):
        (want,) = onnx_models.reference(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    stats = requests.get(f"{srv.url}/v2/models/mlp/stats", timeout=10).json()
    s = stats["model_stats"][0]
    assert s["inference_count"] == 8
    assert s["execution_count"] < 8


def test_default_model_filename_and_a_model_folder_with_external_data(repo, start_server):
    model = onnx_models.mlp()
    write_onnx(repo, "named", model, 'backend: "onnxruntime"\n'
               'default_model_filename: "net.onnx"\n', filename="net.onnx")
    # model.onnx as a folder: the graph plus its weights in a side file
    folder = repo / "folder" / "1" / "model.onnx"
    folder.mkdir(parents=True)
    ext = onnx_models.mlp()
    onnx.save_model(ext, str(folder / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    srv = start_server(repo)
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    (want,) = onnx_models.reference(model, {"x": x})
    for name in ("named", "folder"):
        got = http_infer(srv, name, {"x": x}).as_numpy("y")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _mlp_config(name, dtype="TYPE_FP32", in_name="x", dims=(16,), mbs=8):
    return harness.model_config(name, "onnxruntime", [(in_name, dtype, list(dims))],
                                [("y", "TYPE_FP32", [4])], max_batch_size=mbs)


def test_config_mismatches_get_tritons_messages(repo, start_server):
    model = onnx_models.mlp()
    write_onnx(repo, "bad_type", model, _mlp_config("bad_type", dtype="TYPE_INT32"))
    write_onnx(repo, "bad_name", model, _mlp_config("bad_name", in_name="z"))
    write_onnx(repo, "bad_dims", model, _mlp_config("bad_dims", dims=(8, 2)))
    fixed = onnx_models.mlp()
    fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    fixed.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    write_onnx(repo, "no_batch", fixed, _mlp_config("no_batch"))
    write_onnx(repo, "good", model, _mlp_config("good"))
    # Triton's --exit-on-error (default true) would exit at the failed loads.
    srv = start_server(repo, ["--exit-on-error=false"], wait="live")
    harness_wait_loaded(srv, "good")
    idx = index(srv)
    assert idx["good"]["state"] == "READY"
    assert "configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32" \
        in idx["bad_type"]["reason"]
    assert "unexpected inference input 'z', allowed inputs are: x" in idx["bad_name"]["reason"]
    assert "tensor 'x': the model expects 2 dimensions" in idx["bad_dims"]["reason"]
    assert ("for the model to support batching the shape should have at least 1 "
            "dimension and the first dimension must be -1") in idx["no_batch"]["reason"]


def harness_wait_loaded(srv, model, timeout=30.0):
    import time
    deadline = time.monotonic() + timeout * harness.timeout_scale()
    while time.monotonic() < deadline:
        if requests.get(f"{srv.url}/v2/models/{model}/ready", timeout=5).status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"{model} never became ready")


def _graph(nodes, inits=(), inputs=None, outputs=None):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])]
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _huge_tensor(name):
    """An initializer that declares 2^80 floats and holds none."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend([1 << 40, 1 << 40])
    return t


def test_hostile_models_fail_their_load_and_the_server_keeps_serving(repo, start_server):
    good = onnx_models.mlp()
    raw = good.SerializeToString()
    bad = {
        "truncated": raw[: len(raw) // 2],
        "garbage": b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 64,
        "cycle": _graph([helper.make_node("Relu", ["x", ], ["a"]),
                         helper.make_node("Add", ["a", "b"], ["c"]),
                         helper.make_node("Relu", ["c"], ["b"]),
                         helper.make_node("Identity", ["c"], ["y"])]).SerializeToString(),
        "undefined": _graph([helper.make_node("Add", ["x", "nowhere"], ["y"])]).SerializeToString(),
        "huge_dims": _graph([helper.make_node("Add", ["x", "w"], ["y"])],
                            [_huge_tensor("w")]).SerializeToString(),
        "unknown_op": _graph([helper.make_node("NoSuchOp", ["x"], ["y"])]).SerializeToString(),
    }
    ext = _graph([helper.make_node("Add", ["x", "w"], ["y"])],
                 [helper.make_tensor("w", TensorProto.FLOAT, [4], [1, 2, 3, 4])])
    t = ext.graph.initializer[0]
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../../../etc/passwd"), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    bad["outside"] = ext.SerializeToString()
    for name, data in bad.items():
        d = repo / name / "1"
        d.mkdir(parents=True)
        (d / "model.onnx").write_bytes(data)
    write_onnx(repo, "good", good)
    srv = start_server(repo, ["--exit-on-error=false"], wait="live")
    harness_wait_loaded(srv, "good")
    idx = index(srv)
    for name in bad:
        assert idx[name]["state"] == "UNAVAILABLE", name
        assert idx[name]["reason"], name
        assert str(repo) not in idx[name]["reason"], name
    assert "cycle" in idx["cycle"]["reason"]
    assert "'nowhere'" in idx["undefined"]["reason"]
    assert "NoSuchOp" in idx["unknown_op"]["reason"]
    x = np.ones((1, 16), dtype=np.float32)
    (want,) = onnx_models.reference(good, {"x": x})
    np.testing.assert_allclose(http_infer(srv, "good", {"x": x}).as_numpy("y"), want,
                               rtol=RTOL, atol=ATOL)


def test_bundled_digits_model_answers(models_server):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data[1500:1532] / 16.0).astype(np.float32)
    # no config.pbtxt: auto-complete gives max_batch_size 4
    probs = np.concatenate([
        http_infer(models_server, "digits_onnx", {"pixels": x[i:i + 4]}).as_numpy("probabilities")
        for i in range(0, 32, 4)])
    assert probs.shape == (32, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    accuracy = (probs.argmax(axis=1) == digits.target[1500:1532]).mean()
    assert accuracy > 0.8
