"""An ONNX model on GPUs, without a GPU (issue 23).

`osprey_fakegpu` is the server over tests/fake_cuda, whose kernels are the
CUDA device's own `.cu` files run on the host. The model here is built of
ONNX ops that the CUDA device's elementwise and data-movement slots carry
(Transpose, Add with broadcast, Tanh, Gather, Pad, Greater, Where, CumSum,
Slice, Concat, Expand, ScatterElements, TopK); it is loaded on both fake
GPUs and on the CPU, and the GPU copy must answer exactly what the CPU copy
answers, over HTTP (binary and JSON) and gRPC, and what onnxruntime
answers to within float rounding. A second model reshapes by a shape
given as a graph input, which a GPU instance plans from the request's
host bytes; a third, a 1x1 Conv, shows allow_tf32 reaching cuBLAS.
"""

import json
import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from onnx import TensorProto, helper, numpy_helper

import harness
from queue_util import RawQueue

FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"

pytestmark = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists(),
    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")


def movement_model():
    """x [batch, 3, 8] FP32 -> values [batch, 3, 5] FP32, indices INT64."""
    def const(name, array):
        return numpy_helper.from_array(np.asarray(array), name)

    inits = [
        const("bias", np.linspace(-1, 1, 3, dtype=np.float32).reshape(3, 1)),
        const("idx", np.array([7, 0, -1, 3], dtype=np.int64)),
        const("pads", np.array([0, 1, 2, 0, 1, 1], dtype=np.int64)),
        const("zero", np.array(0, dtype=np.float32)),
        const("neg", np.array(-0.5, dtype=np.float32)),
        const("axis", np.array(2, dtype=np.int64)),
        const("starts", np.array([1], dtype=np.int64)),
        const("ends", np.array([4], dtype=np.int64)),
        const("axes", np.array([1], dtype=np.int64)),
        const("shape", np.array([1, 3, 7], dtype=np.int64)),
        const("sidx", np.array([[[0, 13], [5, 2], [9, 9]]], dtype=np.int64)),
        const("supd", np.full((1, 3, 2), 10.0, dtype=np.float32)),
        const("k", np.array([5], dtype=np.int64)),
    ]
    node = helper.make_node
    nodes = [
        node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        node("Transpose", ["t"], ["t2"], perm=[0, 2, 1]),
        node("Add", ["t2", "bias"], ["a"]),
        node("Tanh", ["a"], ["g"]),
        node("Gather", ["g", "idx"], ["h"], axis=2),             # [b, 3, 4]
        node("Pad", ["h", "pads"], ["p"], mode="reflect"),       # [b, 5, 7]
        node("Greater", ["p", "zero"], ["c"]),
        node("Where", ["c", "p", "neg"], ["w"]),
        node("CumSum", ["w", "axis"], ["cs"]),
        node("Slice", ["cs", "starts", "ends", "axes"], ["s"]),  # [b, 3, 7]
        node("Expand", ["neg", "shape"], ["e"]),                 # [1, 3, 7]
        node("Add", ["s", "e"], ["se"]),
        node("Concat", ["s", "se"], ["cat"], axis=2),            # [b, 3, 14]
        node("ScatterElements", ["cat", "sidx", "supd"], ["sc"], axis=2),
        node("TopK", ["sc", "k"], ["values", "indices"], axis=2),
    ]
    graph = helper.make_graph(
        nodes, "movement",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 8])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["b", 3, 5]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, ["b", 3, 5])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def model():
    return movement_model()


@pytest.fixture
def gpu_server(start_server, tmp_path, model):
    repo = tmp_path / "repo"
    for name, group in (("movement", "kind: KIND_GPU count: 1 gpus: [ 0, 1 ]"),
                        ("movement_cpu", "kind: KIND_CPU count: 1")):
        (repo / name / "1").mkdir(parents=True)
        onnx.save(model, str(repo / name / "1" / "model.onnx"))
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
            f"instance_group [ {{ {group} }} ]\n")
    return start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)


def http_infer(server, model_name, x, binary):
    client = httpclient.InferenceServerClient(server.hostport)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    outs = [httpclient.InferRequestedOutput(o, binary_data=binary)
            for o in ("values", "indices")]
    r = client.infer(model_name, [i], outputs=outs)
    return r.as_numpy("values"), r.as_numpy("indices")


def grpc_infer(server, model_name, x):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    r = client.infer(model_name, [i])
    return r.as_numpy("values"), r.as_numpy("indices")


def tfs_predict(server, model_name, x):
    """TF Serving's REST predict, the columnar form; the reply's JSON."""
    r = requests.post(f"{server.url}/v1/models/{model_name}:predict",
                      json={"inputs": {"x": x.tolist()}}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def queue_predict(server, model_name, x):
    """A KServe JSON request through the model's queue; its result's
    outputs, from the sink."""
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.flatten().tolist()}]}
    r = RawQueue(f"{server.url}/api/predict/{model_name}").put(
        json.dumps(body).encode())
    assert r.status_code == 200, r.text
    rid = r.headers["X-Eas-Queueservice-Request-Id"]
    sink = RawQueue(f"{server.url}/api/predict/{model_name}/sink")
    item = harness.wait_for(
        lambda: sink.get(request_id=rid, timeout="1s", auto_delete=False),
        what=f"the sink item of {model_name}")[0]
    assert item["tags"]["status"] == "200", item["data"]
    return json.loads(item["data"])["outputs"]


def test_model_is_placed_on_both_gpus(gpu_server):
    assert ("successfully loaded 'movement' version 1 on GPU 0 (Fake CUDA "
            "GPU 0), GPU 1 (Fake CUDA GPU 1)") in gpu_server.log()


@pytest.mark.parametrize("batch", [1, 5])
def test_gpu_answers_what_the_cpu_and_onnxruntime_answer(gpu_server, model, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 3, 8)).astype(np.float32)
    want_values, want_indices = onnxruntime.InferenceSession(
        model.SerializeToString()).run(None, {"x": x})
    cpu = http_infer(gpu_server, "movement_cpu", x, True)
    answers = [http_infer(gpu_server, "movement", x, True),
               http_infer(gpu_server, "movement", x, False),
               grpc_infer(gpu_server, "movement", x)]
    for values, indices in answers:
        np.testing.assert_array_equal(values, cpu[0])
        np.testing.assert_array_equal(indices, cpu[1])
        np.testing.assert_allclose(values, want_values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(indices, want_indices)
    # TF Serving's REST surface: the same JSON from the GPU as from the CPU
    assert tfs_predict(gpu_server, "movement", x) == \
        tfs_predict(gpu_server, "movement_cpu", x)
    # the queue service: the item's result from the GPU as from the CPU
    assert queue_predict(gpu_server, "movement", x) == \
        queue_predict(gpu_server, "movement_cpu", x)


def reshape_model():
    """y = Relu(Reshape(x, shape)) with `shape` a graph input: the plan
    needs its values, which a GPU instance reads from the request's host
    bytes."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])],
        "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r0", "r1"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def reshape_server(start_server, tmp_path):
    repo = tmp_path / "repo"
    for name, group in (("reshape", "kind: KIND_GPU count: 1 gpus: [ 1 ]"),
                        ("reshape_cpu", "kind: KIND_CPU count: 1")):
        (repo / name / "1").mkdir(parents=True)
        onnx.save(reshape_model(), str(repo / name / "1" / "model.onnx"))
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
            f"instance_group [ {{ {group} }} ]\n")
    return start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)


def reshape_infer(server, model_name, x, shape, binary):
    client = httpclient.InferenceServerClient(server.hostport)
    inputs = [httpclient.InferInput("x", list(x.shape), "FP32"),
              httpclient.InferInput("shape", [2], "INT64")]
    inputs[0].set_data_from_numpy(x, binary_data=binary)
    inputs[1].set_data_from_numpy(shape, binary_data=binary)
    out = httpclient.InferRequestedOutput("y", binary_data=binary)
    return client.infer(model_name, inputs, outputs=[out]).as_numpy("y")


def test_gpu_reshapes_by_a_shape_given_as_an_input(reshape_server):
    x = np.random.default_rng(7).standard_normal((4, 6)).astype(np.float32)
    grpc = grpcclient.InferenceServerClient(reshape_server.grpc_url)
    # Each shape value gets its own plan; going back to one reuses it.
    for dims in ([3, 8], [2, -1], [24, 1], [3, 8]):
        shape = np.array(dims, dtype=np.int64)
        want = np.maximum(x.reshape(dims), 0)
        cpu = reshape_infer(reshape_server, "reshape_cpu", x, shape, True)
        np.testing.assert_array_equal(cpu, want)
        for binary in (True, False):
            np.testing.assert_array_equal(
                reshape_infer(reshape_server, "reshape", x, shape, binary), cpu)
        inputs = [grpcclient.InferInput("x", [4, 6], "FP32"),
                  grpcclient.InferInput("shape", [2], "INT64")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(shape)
        np.testing.assert_array_equal(
            grpc.infer("reshape", inputs).as_numpy("y"), cpu)


def test_gpu_refuses_a_shape_input_as_the_cpu_does(reshape_server):
    x = np.zeros((4, 6), dtype=np.float32)
    shape = np.array([5, 5], dtype=np.int64)
    messages = []
    for name in ("reshape", "reshape_cpu"):
        with pytest.raises(InferenceServerException) as e:
            reshape_infer(reshape_server, name, x, shape, True)
        messages.append(e.value.message())
    assert "Reshape" in messages[0]
    assert messages[0] == messages[1]
    # The server keeps serving that model.
    np.testing.assert_array_equal(
        reshape_infer(reshape_server, "reshape", x, np.array([6, 4]), True),
        np.zeros((6, 4), dtype=np.float32))


def pointwise_conv_model():
    """y = Conv(x [1, 64, 5, 6], w [8, 64, 1, 1]): one cuBLAS GEMM."""
    w = np.random.default_rng(3).uniform(0.1, 1.0, (8, 64, 1, 1))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1])],
        "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 6])],
        [numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_allow_tf32_reaches_a_1x1_conv(start_server, tmp_path):
    """The fake cuBLAS rounds TF32 products' inputs to 10 mantissa bits:
    with allow_tf32 the GPU's 1x1 conv is close to the CPU's but not
    equal; without it, FP32."""
    repo = tmp_path / "repo"
    tf32 = 'parameters { key: "allow_tf32" value: { string_value: "true" } }\n'
    for name, group, extra in (
            ("conv_tf32", "kind: KIND_GPU count: 1 gpus: [ 0 ]", tf32),
            ("conv_fp32", "kind: KIND_GPU count: 1 gpus: [ 0 ]", ""),
            ("conv_cpu", "kind: KIND_CPU count: 1", "")):
        (repo / name / "1").mkdir(parents=True)
        onnx.save(pointwise_conv_model(), str(repo / name / "1" / "model.onnx"))
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
            f"instance_group [ {{ {group} }} ]\n" + extra)
    server = start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)
    client = httpclient.InferenceServerClient(server.hostport)
    x = np.random.default_rng(4).uniform(0.1, 1.0, (1, 64, 5, 6)).astype(np.float32)

    def infer(name):
        i = httpclient.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        return client.infer(name, [i]).as_numpy("y")

    want = infer("conv_cpu")
    scale = np.abs(want).max()
    np.testing.assert_allclose(infer("conv_fp32"), want, rtol=1e-5, atol=1e-5 * scale)
    got = infer("conv_tf32")
    assert np.abs(got - want).max() <= 5e-3 * scale
    assert np.abs(got - want).max() > 1e-5 * scale, "conv_tf32 gave FP32 results"
