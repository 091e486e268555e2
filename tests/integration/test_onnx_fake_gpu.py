"""ONNX models on GPU instances, without a GPU (issue 23).

`osprey_fakegpu` (the real server over tests/fake_cuda's runtime, two fake
GPUs) serves one ONNX graph three times: on two instances of a GPU with
CUDA graphs on, with them off, and on the CPU. Every copy must answer what
the CPU copy answers, through KServe HTTP and gRPC, batch after batch
(the graph copy records its graph on the second run of a shape and then
replays it), for several batch sizes. The graph is what the CUDA device can
run today: MatMul chains with a Cast (its gemm and cast slots). A model
with STRING tensors on GPU instances runs its graph on the CPU device and
answers as its KIND_CPU copy.
"""

import pathlib

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

import harness

FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"

pytestmark = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists(),
    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")

IN, HIDDEN, OUT = 32, 256, 8


def matmul_model():
    """x[batch, 32] -> MatMul(W1) -> MatMul(W2) -> y[batch, 8] (FP32), and
    y cast to FP16 as y16."""
    rng = np.random.default_rng(23)
    inits = [numpy_helper.from_array((rng.standard_normal((IN, HIDDEN)) * 0.2)
                                     .astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((HIDDEN, OUT)) * 0.2)
                                     .astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("MatMul", ["h", "w2"], ["y"], name="fc2"),
             helper.make_node("Cast", ["y"], ["y16"], to=TensorProto.FLOAT16,
                              name="cast")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT]),
         helper.make_tensor_value_info("y16", TensorProto.FLOAT16, ["batch", OUT])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# name -> (optimization fields after graph { level: -1 }, placement)
VARIANTS = {
    "mm_graphs": ("cuda { graphs: true }",  # Triton's field
                  'instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n'),
    "mm_eager": ("", 'instance_group [ { kind: KIND_GPU count: 2 gpus: [ 1 ] } ]\n'),
    "mm_tf32": ("", 'instance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n'
                'parameters { key: "allow_tf32" value: { string_value: "true" } }\n'),
    "mm_fp16": ("", 'instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n'
                'parameters { key: "precision" value: { string_value: "fp16" } }\n'
                'parameters { key: "cuda_graphs" value: { string_value: "true" } }\n'),
    "mm_cpu": ("", 'instance_group [ { kind: KIND_CPU count: 1 } ]\n'),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_fake_gpu")
    model = matmul_model()
    for name, (optimization, placement) in VARIANTS.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, str(root / name / "1" / "model.onnx"))
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 64\n'
            f'optimization {{ graph {{ level: -1 }} {optimization} }}\n' + placement)
    return root


@pytest.fixture
def server(start_server, repo):
    return start_server(repo, ["--strict-gpu", "--log-verbose=1"], binary=FAKE_GPU_BIN)


def infer_http(client, model, x):
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    outs = [httpclient.InferRequestedOutput(o, binary_data=True) for o in ("y", "y16")]
    r = client.infer(model, [i], outputs=outs)
    return r.as_numpy("y"), r.as_numpy("y16")


def infer_grpc(client, model, x):
    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    outs = [grpcclient.InferRequestedOutput(o) for o in ("y", "y16")]
    r = client.infer(model, [i], outputs=outs)
    return r.as_numpy("y"), r.as_numpy("y16")


def test_gpu_instances_answer_as_the_cpu_over_http_and_grpc(server):
    http = httpclient.InferenceServerClient(server.hostport)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    rng = np.random.default_rng(5)
    # Each batch size several times: warm-up, recording, replays (and the
    # two instances of each model take turns).
    for batch in (1, 4, 4, 4, 4, 16, 16, 16, 1, 1, 1):
        x = rng.standard_normal((batch, IN)).astype(np.float32)
        want, want16 = infer_http(http, "mm_cpu", x)
        for model in ("mm_graphs", "mm_eager"):
            for infer, client in ((infer_http, http), (infer_grpc, grpc)):
                y, y16 = infer(client, model, x)
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{model} batch {batch}")
                assert y16.dtype == np.float16
                np.testing.assert_allclose(y16.astype(np.float32),
                                           want16.astype(np.float32),
                                           rtol=1e-3, atol=1e-3)
    log = server.log()
    assert "Fake CUDA GPU 0" in log and "Fake CUDA GPU 1" in log, log
    # mm_graphs recorded a graph per (instance, batch size) it ran twice:
    # batch 4 and 16 on at least one instance each, batch 1 too.
    recorded = log.count("CUDA graph recorded")
    assert recorded >= 3, log
    assert "refused to record" not in log, log


def test_reduced_precisions_stay_close_but_are_not_fp32(server):
    """allow_tf32 reaches cuBLAS's math mode (the fake rounds the products'
    inputs to TF32) and precision fp16 runs the MatMuls in FP16: both close
    to the CPU's FP32, neither equal to it."""
    http = httpclient.InferenceServerClient(server.hostport)
    x = np.random.default_rng(9).standard_normal((16, IN)).astype(np.float32)
    want, _ = infer_http(http, "mm_cpu", x)
    scale = np.abs(want).max()
    for model, tol in (("mm_tf32", 5e-3), ("mm_fp16", 5e-3)):
        for _ in range(3):  # fp16 with graphs: warm-up, recording, replay
            y, _ = infer_http(http, model, x)
            assert np.abs(y - want).max() <= tol * scale, model
            assert not np.array_equal(y, want), f"{model} gave FP32 results"


def test_bad_graph_parameter_fails_the_load(start_server, tmp_path):
    root = tmp_path / "repo"
    (root / "bad" / "1").mkdir(parents=True)
    onnx.save(matmul_model(), str(root / "bad" / "1" / "model.onnx"))
    (root / "bad" / "config.pbtxt").write_text(
        'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'instance_group [ { kind: KIND_GPU count: 1 } ]\n'
        'parameters { key: "cuda_graphs" value: { string_value: "yes" } }\n')
    srv = start_server(root, ["--exit-on-error=false"], wait="live",
                       binary=FAKE_GPU_BIN)
    index = requests.post(srv.url + "/v2/repository/index", data="{}").json()
    assert index[0]["state"] == "UNAVAILABLE"
    assert "parameter 'cuda_graphs' must be true or false, got 'yes'" in index[0]["reason"]


def width_input_model():
    """x[batch, 8] and width[batch, 1] (INT64) -> y = x[:, :max(width)]:
    the Slice's end comes from a graph input, so the plan needs the
    values of `width` on the host."""
    nodes = [helper.make_node("ReduceMax", ["width"], ["w"], keepdims=0),
             helper.make_node("Reshape", ["w", "one"], ["end"]),
             helper.make_node("Slice", ["x", "zero", "end", "axis1"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("width", TensorProto.INT64, ["batch", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "w"])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_batch_of_requests_gives_its_small_inputs_values_to_the_plan(
        start_server, tmp_path):
    """Four requests batched on a GPU instance: the batch's `width` (a
    value the plan needs) is gathered on the host too, so the batch runs
    instead of failing with 'must be known when the model is planned'."""
    import concurrent.futures
    root = tmp_path / "repo"
    (root / "width" / "1").mkdir(parents=True)
    onnx.save(width_input_model(), str(root / "width" / "1" / "model.onnx"))
    (root / "width" / "config.pbtxt").write_text(
        'name: "width"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
        'dynamic_batching { preferred_batch_size: [ 4 ] '
        'max_queue_delay_microseconds: 60000000 }\n'
        'instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n')
    srv = start_server(root, ["--strict-gpu"], binary=FAKE_GPU_BIN)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(4)]

    def infer(x):
        c = httpclient.InferenceServerClient(srv.hostport)
        i = httpclient.InferInput("x", [1, 8], "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        w = httpclient.InferInput("width", [1, 1], "INT64")
        w.set_data_from_numpy(np.array([[3]], np.int64), binary_data=True)
        return c.infer("width", [i, w]).as_numpy("y")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ys = list(pool.map(infer, xs))
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, x[:, :3])
    stats = requests.get(srv.url + "/v2/models/width/stats").json()
    s = stats["model_stats"][0]
    assert s["inference_count"] == 4
    assert s["execution_count"] == 1, "the four requests ran as one batch"


def strings_model(width):
    """TEXT (STRING [batch, width]) and NUM (FP32 [batch, width]) in;
    AS_FLOAT = TEXT as FP32, SUM = AS_FLOAT + NUM and AS_TEXT = NUM as
    STRING out."""
    S, F32 = TensorProto.STRING, TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Cast", ["TEXT"], ["AS_FLOAT"], to=F32),
         helper.make_node("Add", ["AS_FLOAT", "NUM"], ["SUM"]),
         helper.make_node("Cast", ["NUM"], ["AS_TEXT"], to=S)],
        "g", [vi("TEXT", S, ["batch", width]), vi("NUM", F32, ["batch", width])],
        [vi("AS_FLOAT", F32, ["batch", width]), vi("SUM", F32, ["batch", width]),
         vi("AS_TEXT", S, ["batch", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_model_with_strings_runs_on_gpu_instances(start_server, tmp_path):
    """STRING tensors on KIND_GPU instances: the instances run the graph on
    the CPU device (the log says so once per model), reading their inputs
    from the GPU (batches of four requests, 16 KiB an input, which the
    core gathers on the GPU only) or from a request's own host bytes (no
    dynamic batching), and writing their outputs back to the GPU. Answers
    are the KIND_CPU copy's, over HTTP and gRPC."""
    import concurrent.futures
    width = 1024
    batching = ('dynamic_batching { preferred_batch_size: [ 4 ] '
                'max_queue_delay_microseconds: 60000000 }\n')
    models = {"str_gpu": ("kind: KIND_GPU count: 2 gpus: [ 1 ]", batching),
              "str_gpu_single": ("kind: KIND_GPU count: 1 gpus: [ 0 ]", ""),
              "str_cpu": ("kind: KIND_CPU count: 1", batching)}
    root = tmp_path / "repo"
    for name, (placement, scheduling) in models.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(strings_model(width), str(root / name / "1" / "model.onnx"))
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
            f'{scheduling}instance_group [ {{ {placement} }} ]\n')
    srv = start_server(root, ["--strict-gpu"], binary=FAKE_GPU_BIN)

    def request(seed):
        r = np.random.default_rng(seed)
        num = r.standard_normal((1, width)).astype(np.float32)
        text = np.array([[f"{v:.3f}".encode() for v in r.standard_normal(width)]],
                        dtype=object)
        return text, num

    def infer(model, text, num, grpc=False):
        mod, url = (grpcclient, srv.grpc_url) if grpc else (httpclient, srv.hostport)
        c = mod.InferenceServerClient(url)
        t = mod.InferInput("TEXT", list(text.shape), "BYTES")
        t.set_data_from_numpy(text)
        n = mod.InferInput("NUM", list(num.shape), "FP32")
        n.set_data_from_numpy(num)
        r = c.infer(model, [t, n])
        return {o: r.as_numpy(o) for o in ("AS_FLOAT", "SUM", "AS_TEXT")}

    reqs = [request(seed) for seed in range(8)]
    answers = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for model in ("str_cpu", "str_gpu"):
            # four at a time: each batching model runs them as one batch
            answers[model] = [a for first in (0, 4) for a in pool.map(
                lambda i: infer(model, *reqs[i], grpc=i % 2 == 1),
                range(first, first + 4))]
    answers["str_gpu_single"] = [infer("str_gpu_single", *r, grpc=i % 2 == 1)
                                 for i, r in enumerate(reqs)]
    for model in ("str_cpu", "str_gpu"):
        s = requests.get(srv.url + f"/v2/models/{model}/stats").json()["model_stats"][0]
        assert s["inference_count"] == 8 and s["execution_count"] == 2, s
    for (text, num), want, batched, single in zip(
            reqs, answers["str_cpu"], answers["str_gpu"], answers["str_gpu_single"]):
        for got in (batched, single):
            np.testing.assert_array_equal(got["AS_FLOAT"],
                                          text.astype(str).astype(np.float32))
            np.testing.assert_array_equal(got["SUM"], got["AS_FLOAT"] + num)
            assert got["AS_TEXT"].tolist() == want["AS_TEXT"].tolist()
    log = srv.log()
    for model in ("str_gpu", "str_gpu_single"):
        assert log.count(f"model '{model}' has STRING tensors: its instances on "
                         "GPUs run the graph on the CPU device") == 1, log
    assert "model 'str_cpu' has STRING tensors" not in log, log
