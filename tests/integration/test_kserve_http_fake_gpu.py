"""The server with its models on GPUs, without a GPU (issue 4).

`osprey_fakegpu` is the real server linked against tests/fake_cuda: the CUDA
device's host code (pools, pinned buffers, streams, async copies, events,
cuBLAS calls) runs over a fake CUDA runtime with two fake GPUs whose memory
host code cannot touch. Every bundled model is loaded twice, on the GPUs
(KIND_GPU, two instances on each GPU) and on the CPU, and the GPU copy must
answer what the CPU copy answers, through tritonclient, under concurrency,
with dynamic batching, and with the pinned pool too small. The real kernels
are checked on a GPU by tests/gpu/check.sh, not here.
"""

import concurrent.futures
import pathlib
import re
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

import harness

# Beside the server under test, so the sanitizer build checks its own.
FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"
MODELS = ["simple", "simple_identity", "identity_fp32", "digits_mlp", "simple_string"]

pytestmark = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists(),
    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")


def placed_repository(root):
    """models/ twice: <name> on both fake GPUs, <name>_cpu on the CPU."""
    for name in MODELS:
        src = harness.ROOT / "models" / name
        config = (src / "config.pbtxt").read_text()
        for suffix, group in (("", "kind: KIND_GPU count: 2 gpus: [ 0, 1 ]"),
                              ("_cpu", "kind: KIND_CPU count: 1")):
            dst = root / (name + suffix)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.py"))
            text = re.sub(r'name: "[^"]*"', f'name: "{name}{suffix}"', config, count=1)
            text += f"\ninstance_group [ {{ {group} }} ]\n"
            if name == "digits_mlp":
                text += "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
            (dst / "config.pbtxt").write_text(text)
    return root


@pytest.fixture
def gpu_server(start_server, tmp_path):
    return start_server(placed_repository(tmp_path / "repo"), ["--strict-gpu"],
                        binary=FAKE_GPU_BIN)


def infer(client, model, inputs, outputs, binary=True):
    """inputs: [(name, array, datatype)]; returns {output name: array}."""
    req = []
    for name, array, dtype in inputs:
        i = httpclient.InferInput(name, list(array.shape), dtype)
        i.set_data_from_numpy(array, binary_data=binary)
        req.append(i)
    outs = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    result = client.infer(model, req, outputs=outs)
    return {o: result.as_numpy(o) for o in outputs}


def test_instances_are_placed_on_both_gpus(gpu_server):
    log = gpu_server.log()
    assert "Fake CUDA GPU 0" in log and "Fake CUDA GPU 1" in log, log
    config = requests.get(f"{gpu_server.url}/v2/models/digits_mlp/config").json()
    groups = config["instance_group"]
    assert {g["kind"] for g in groups} == {"KIND_GPU"}
    assert sorted(gpu for g in groups for gpu in g["gpus"]) == [0, 1]
    assert all(g["count"] == 2 for g in groups)
    cpu = requests.get(f"{gpu_server.url}/v2/models/digits_mlp_cpu/config").json()
    assert {g["kind"] for g in cpu["instance_group"]} == {"KIND_CPU"}


@pytest.mark.parametrize("binary", [True, False])
def test_add_sub_wraps_like_the_cpu(gpu_server, binary):
    client = httpclient.InferenceServerClient(gpu_server.hostport)
    rng = np.random.default_rng(4)
    a = rng.integers(-2**31, 2**31, size=(8, 16), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, size=(8, 16), dtype=np.int64).astype(np.int32)
    a[0, :2] = [2**31 - 1, -2**31]
    b[0, :2] = [1, 1]
    inputs = [("INPUT0", a, "INT32"), ("INPUT1", b, "INT32")]
    gpu = infer(client, "simple", inputs, ["OUTPUT0", "OUTPUT1"], binary)
    cpu = infer(client, "simple_cpu", inputs, ["OUTPUT0", "OUTPUT1"], binary)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(gpu["OUTPUT0"], a + b)
        np.testing.assert_array_equal(gpu["OUTPUT1"], a - b)
    np.testing.assert_array_equal(gpu["OUTPUT0"], cpu["OUTPUT0"])
    np.testing.assert_array_equal(gpu["OUTPUT1"], cpu["OUTPUT1"])


@pytest.mark.parametrize("binary", [True, False])
def test_simple_string_on_gpu_matches_cpu(gpu_server, binary):
    """string_add_sub parses host copies of the GPU tensors (the fake GPU's
    memory cannot be read from the host) and answers what the CPU does."""
    client = httpclient.InferenceServerClient(gpu_server.hostport)
    rng = np.random.default_rng(7)
    av = rng.integers(-10**12, 10**12, size=(4, 16))
    bv = rng.integers(-10**12, 10**12, size=(4, 16))
    a = np.array([[str(x).encode() for x in row] for row in av], dtype=np.object_)
    b = np.array([[str(x).encode() for x in row] for row in bv], dtype=np.object_)
    inputs = [("INPUT0", a, "BYTES"), ("INPUT1", b, "BYTES")]
    gpu = infer(client, "simple_string", inputs, ["OUTPUT0", "OUTPUT1"], binary)
    cpu = infer(client, "simple_string_cpu", inputs, ["OUTPUT0", "OUTPUT1"], binary)
    as_ints = np.vectorize(int)
    np.testing.assert_array_equal(as_ints(gpu["OUTPUT0"]), av + bv)
    np.testing.assert_array_equal(as_ints(gpu["OUTPUT1"]), av - bv)
    assert gpu["OUTPUT0"].tolist() == cpu["OUTPUT0"].tolist()
    assert gpu["OUTPUT1"].tolist() == cpu["OUTPUT1"].tolist()


def test_identity_round_trips_large_and_bytes_tensors(gpu_server):
    client = httpclient.InferenceServerClient(gpu_server.hostport)
    x = np.random.default_rng(5).standard_normal((2, 1 << 19)).astype(np.float32)  # 4 MiB
    out = infer(client, "identity_fp32", [("INPUT0", x, "FP32")], ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], x)
    s = np.array([[b"osprey", b"", b"\x00\xff gpu"]], dtype=np.object_)
    out = infer(client, "simple_identity", [("INPUT0", s, "BYTES")], ["OUTPUT0"])
    assert out["OUTPUT0"].tolist() == s.tolist()


def digits_batch(n, seed):
    return np.random.default_rng(seed).uniform(0, 1, (n, 64)).astype(np.float32)


def check_digits_gpu_matches_cpu(client, x):
    gpu = infer(client, "digits_mlp", [("image", x, "FP32")], ["probabilities"])
    cpu = infer(client, "digits_mlp_cpu", [("image", x, "FP32")], ["probabilities"])
    np.testing.assert_allclose(gpu["probabilities"], cpu["probabilities"],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(gpu["probabilities"].argmax(1),
                                  cpu["probabilities"].argmax(1))


def test_dense_on_gpu_matches_cpu(gpu_server):
    client = httpclient.InferenceServerClient(gpu_server.hostport)
    check_digits_gpu_matches_cpu(client, digits_batch(256, 6))


def test_concurrent_batched_requests_on_gpu(gpu_server):
    """32 clients at once: the batcher gathers requests into batches on the
    GPU instances; each answer must be its own request's."""
    cpu_client = httpclient.InferenceServerClient(gpu_server.hostport)

    def one(i):
        client = httpclient.InferenceServerClient(gpu_server.hostport)
        x = digits_batch(1 + i % 7, 100 + i)
        got = infer(client, "digits_mlp", [("image", x, "FP32")], ["probabilities"])
        return x, got["probabilities"]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(96)))
    for x, got in results:
        want = infer(cpu_client, "digits_mlp_cpu", [("image", x, "FP32")],
                     ["probabilities"])["probabilities"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    stats = requests.get(f"{gpu_server.url}/v2/models/digits_mlp/stats").json()
    s = stats["model_stats"][0]
    assert s["inference_count"] == sum(len(x) for x, _ in results)
    assert s["execution_count"] < len(results)  # some requests were batched
    for stage in ("compute_input", "compute_infer", "compute_output"):
        assert s["inference_stats"][stage]["ns"] > 0, stage


def test_pinned_pool_exhausted_falls_back_to_pageable(start_server, tmp_path):
    srv = start_server(placed_repository(tmp_path / "repo"),
                       ["--strict-gpu", "--pinned-memory-pool-byte-size=65536"],
                       binary=FAKE_GPU_BIN)
    client = httpclient.InferenceServerClient(srv.hostport)
    x = np.random.default_rng(7).standard_normal((1, 1 << 18)).astype(np.float32)  # 1 MiB
    for _ in range(3):
        out = infer(client, "identity_fp32", [("INPUT0", x, "FP32")], ["OUTPUT0"])
        np.testing.assert_array_equal(out["OUTPUT0"], x)
    metrics = requests.get(srv.metrics_url + "/metrics", timeout=10).text
    m = re.search(r"^osprey_pinned_memory_pageable_fallbacks (\d+)", metrics, re.M)
    assert m and int(m.group(1)) > 0, metrics
    assert srv.log().count("pinned memory pool (65536 bytes) exhausted") == 1


def test_pinning_disabled_still_serves(start_server, tmp_path):
    srv = start_server(placed_repository(tmp_path / "repo"),
                       ["--strict-gpu", "--pinned-memory-pool-byte-size=0"],
                       binary=FAKE_GPU_BIN)
    check_digits_gpu_matches_cpu(httpclient.InferenceServerClient(srv.hostport),
                                 digits_batch(16, 8))
    assert "pinned memory pool disabled" in srv.log()


def test_trace_captures_gpu_tensors_and_stamps(start_server, tmp_path):
    """TIMESTAMPS + TENSORS on a GPU model: backend inputs are read back
    from device memory, compute stamps come from events on the stream."""
    from test_kserve_http_trace import (check_complete_trace,
                                        check_simple_tensors, group,
                                        load_trace_file, qa_trace_args,
                                        simple_infer, stop_clean)
    log = tmp_path / "gpu_trace.log"
    srv = start_server(placed_repository(tmp_path / "repo"),
                       ["--strict-gpu"] + qa_trace_args(str(log)) +
                       ["--trace-config=level=TENSORS"], binary=FAKE_GPU_BIN)
    sent = {}
    for i in range(4):
        a = np.arange(16, dtype=np.int32).reshape(1, 16) * (i + 1)
        b = np.full((1, 16), -i, dtype=np.int32)
        with httpclient.InferenceServerClient(srv.hostport) as c:
            simple_infer(c, request_id=f"g{i}", a=a, b=b)
        sent[f"g{i}"] = (a, b)
    stop_clean(srv)
    traces = group(load_trace_file(log))
    assert len(traces) == len(sent)
    for trace in traces.values():
        request_id = next(r for r in trace if "model_name" in r)["request_id"]
        check_complete_trace(trace, request_id)
        check_simple_tensors(trace, *sent[request_id])


def test_cuda_memory_pool_sizes_per_gpu(start_server, tmp_path):
    """--cuda-memory-pool-byte-size=<gpu>:<bytes>; 0 reserves nothing up
    front, and that GPU's pool still grows on demand."""
    srv = start_server(placed_repository(tmp_path / "repo"),
                       ["--strict-gpu", "--cuda-memory-pool-byte-size=0:8388608",
                        "--cuda-memory-pool-byte-size=1:0"], binary=FAKE_GPU_BIN)
    log = srv.log()
    assert "CUDA GPU 0: Fake CUDA GPU 0" in log and "memory pool 8388608 bytes" in log
    assert re.search(r"CUDA GPU 1: Fake CUDA GPU 1.*memory pool 0 bytes", log), log
    client = httpclient.InferenceServerClient(srv.hostport)
    for i in range(4):  # both GPUs' instances take requests
        check_digits_gpu_matches_cpu(client, digits_batch(64, 9 + i))


def test_unpinnable_host_counts_every_host_buffer(start_server, tmp_path, monkeypatch):
    """The configured pinned pool cannot be pinned: the server says so once,
    serves from pageable memory and counts each such buffer."""
    monkeypatch.setenv("FAKE_CUDA_NO_PINNED", "1")
    srv = start_server(placed_repository(tmp_path / "repo"), ["--strict-gpu"],
                       binary=FAKE_GPU_BIN)
    assert "unable to allocate 268435456 bytes of pinned host memory" in srv.log()
    client = httpclient.InferenceServerClient(srv.hostport)
    x = np.random.default_rng(10).standard_normal((3, 1000)).astype(np.float32)
    out = infer(client, "identity_fp32", [("INPUT0", x, "FP32")], ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], x)
    metrics = requests.get(srv.metrics_url + "/metrics", timeout=10).text
    assert re.search(r"^nv_pinned_memory_pool_total_bytes 0$", metrics, re.M), metrics
    m = re.search(r"^osprey_pinned_memory_pageable_fallbacks (\d+)", metrics, re.M)
    assert m and int(m.group(1)) >= 2, metrics  # the input and the output
