"""Scheduler, dynamic batcher, statistics extension and Prometheus metrics
(issue 5), against the real binary: batches forming under concurrent
clients, queue limits, timeouts, priorities, shapes kept apart, shutdown
with queued work, the statistics JSON and its errors (protocol reference
§1, §6), and /metrics (§8) parsed with prometheus_client and compared with
the statistics endpoint."""

import concurrent.futures
import ctypes.util
import json
import os
import threading
import time

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import harness


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def delay_param(ms):
    return f'parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "{ms}" }} }} ]\n'


def identity(name, extra="", max_batch_size=8, dims=(-1,)):
    return harness.identity_config(name, "TYPE_FP32", list(dims),
                                   max_batch_size=max_batch_size, extra=extra)


def repo_with(tmp_path, models):
    """models: {name: config text}."""
    repo = tmp_path / "repo"
    for name, text in models.items():
        harness.write_model(repo, name, text)
    return repo


def infer(srv, model, x, params=None, timeout=60):
    """JSON inference of FP32 array x (its shape as given); returns the
    response."""
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape),
                        "data": x.flatten().tolist()}]}
    if params:
        body["parameters"] = params
    return requests.post(f"{srv.url}/v2/models/{model}/infer", data=json.dumps(body),
                         timeout=timeout)


def output_of(r):
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def stats(srv, model=None, version=None):
    path = "/v2/models/stats"
    if model is not None:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/stats"
    r = requests.get(srv.url + path, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["model_stats"]


def one_stats(srv, model):
    (s,) = stats(srv, model)
    return s


def metrics_text(srv):
    r = requests.get(srv.metrics_url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
    return r.text


def samples(text):
    """{(metric name, frozenset(labels)): value} of every sample. The parser
    names counter samples <name>_total; they are keyed by the name on the
    wire."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = fam.name if s.name in (fam.name, fam.name + "_total") else s.name
            out[(name, frozenset(s.labels.items()))] = s.value
    return out


def model_value(values, name, model, version="1", **labels):
    key = frozenset({"model": model, "version": version, **labels}.items())
    return values[(name, key)]


def run_concurrently(fn, args_list):
    with concurrent.futures.ThreadPoolExecutor(len(args_list)) as pool:
        return list(pool.map(fn, args_list))


# ---- batches form -----------------------------------------------------------------


def test_concurrent_clients_form_batches(start_server, tmp_path):
    repo = repo_with(tmp_path, {
        "batched": identity("batched", delay_param(150) +
                            "dynamic_batching { max_queue_delay_microseconds: 100000 }\n"),
        "unbatched": identity("unbatched", delay_param(20)),
    })
    srv = start_server(repo)
    n = 16
    inputs = [np.full((1, 4), i, dtype=np.float32) + np.arange(4, dtype=np.float32)
              for i in range(n)]

    outs = run_concurrently(lambda x: output_of(infer(srv, "batched", x)), inputs)
    for x, y in zip(inputs, outs):  # each request got its own rows back
        np.testing.assert_array_equal(x, y)
    s = one_stats(srv, "batched")
    assert s["inference_count"] == n
    assert s["inference_stats"]["success"]["count"] == n
    assert s["execution_count"] < s["inference_count"], s
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in s["batch_stats"]) == n
    assert sum(b["compute_infer"]["count"] for b in s["batch_stats"]) == s["execution_count"]
    assert max(b["batch_size"] for b in s["batch_stats"]) > 1

    # Without dynamic_batching every request runs alone.
    run_concurrently(lambda x: output_of(infer(srv, "unbatched", x)), inputs[:6])
    s = one_stats(srv, "unbatched")
    assert s["inference_count"] == s["execution_count"] == 6
    assert [b["batch_size"] for b in s["batch_stats"]] == [1]


def test_batch_dimension_counts_rows(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity("m", delay_param(100) + (
        "dynamic_batching { preferred_batch_size: [ 6 ] max_queue_delay_microseconds: 2000000 }\n"))})
    srv = start_server(repo)
    xs = [np.arange(k * 3, dtype=np.float32).reshape(k, 3) + 100 * k for k in (1, 2, 3)]
    t0 = time.monotonic()
    outs = run_concurrently(lambda x: output_of(infer(srv, "m", x)), xs)
    # 1 + 2 + 3 rows = the preferred 6: sent without waiting the 2 s delay.
    assert time.monotonic() - t0 < 1.5
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(x, y)
    s = one_stats(srv, "m")
    assert s["inference_count"] == 6
    assert s["execution_count"] == 1
    assert [b["batch_size"] for b in s["batch_stats"]] == [6]


def test_different_shapes_are_not_batched_together(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity("m", delay_param(50) + (
        "dynamic_batching { max_queue_delay_microseconds: 300000 }\n"))})
    srv = start_server(repo)
    xs = [np.arange(w, dtype=np.float32).reshape(1, w) + 10 * i
          for i, w in enumerate((4, 6, 4, 6, 4, 6))]
    outs = run_concurrently(lambda x: output_of(infer(srv, "m", x)), xs)
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(x, y)
    s = one_stats(srv, "m")
    assert s["inference_count"] == 6
    assert s["execution_count"] >= 2
    assert all(b["batch_size"] <= 3 for b in s["batch_stats"]), s["batch_stats"]


def test_preserve_ordering_with_two_instances(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity("m", delay_param(20) + (
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        "dynamic_batching { preserve_ordering: true max_queue_delay_microseconds: 1000 }\n"))})
    srv = start_server(repo)
    xs = [np.full((1, 3), i, dtype=np.float32) for i in range(24)]
    outs = run_concurrently(lambda x: output_of(infer(srv, "m", x)), xs)
    for x, y in zip(xs, outs):
        np.testing.assert_array_equal(x, y)
    assert one_stats(srv, "m")["inference_count"] == 24


# ---- queue policies ------------------------------------------------------------------


def test_full_queue_gives_503_and_is_not_counted(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["onnx_zero_1_float32_queue"])
    srv = start_server(repo)
    model = "onnx_zero_1_float32_queue"
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    first = {}
    t = threading.Thread(target=lambda: first.setdefault("r", infer(srv, model, x)))
    t.start()
    # The first request waits (up to 1 s) for a batch of 8 in the queue.
    harness.wait_pending(srv, model, 1)
    r = infer(srv, model, x)
    assert r.status_code == 503
    assert r.json()["error"] == "[request id: <id_unknown>] Exceeds maximum queue size"
    t.join()
    np.testing.assert_array_equal(output_of(first["r"]), x)
    s = one_stats(srv, model)
    assert s["inference_stats"]["success"]["count"] == 1
    assert s["inference_stats"]["fail"]["count"] == 0  # refused before queuing
    # It waited the delay in the queue.
    assert s["inference_stats"]["queue"]["ns"] >= 900_000_000


QUEUE_TIMEOUT = (
    "dynamic_batching {\n"
    "  max_queue_delay_microseconds: 3000000\n"
    "  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 2000000\n"
    "    allow_timeout_override: true }\n"
    "}\n")


def test_timeout_reject_fails_the_request(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity("m", QUEUE_TIMEOUT)})
    srv = start_server(repo)
    x = np.ones((1, 2), dtype=np.float32)
    t0 = time.monotonic()
    r = infer(srv, "m", x, params={"timeout": 100000})  # 0.1 s, below the default
    elapsed = time.monotonic() - t0
    assert r.status_code == 503, r.text
    assert r.json() == {"error": "Request timeout expired"}
    assert 0.09 < elapsed < 1.5
    t0 = time.monotonic()
    r = infer(srv, "m", x)  # the default 2 s, before the 3 s delay ends
    assert r.status_code == 503
    assert 1.9 < time.monotonic() - t0 < 2.9
    s = one_stats(srv, "m")
    assert s["inference_stats"]["fail"]["count"] == 2
    assert s["inference_stats"]["success"]["count"] == 0
    assert s["execution_count"] == 0
    values = samples(metrics_text(srv))
    assert model_value(values, "nv_inference_request_failure", "m", reason="REJECTED") == 2
    assert model_value(values, "nv_inference_request_failure", "m", reason="OTHER") == 0


def test_timeout_delay_still_runs(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity("m", (
        "dynamic_batching {\n"
        "  max_queue_delay_microseconds: 300000\n"
        "  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 }\n"
        "}\n"))})
    srv = start_server(repo)
    x = np.ones((1, 2), dtype=np.float32)
    np.testing.assert_array_equal(output_of(infer(srv, "m", x)), x)
    assert one_stats(srv, "m")["inference_stats"]["fail"]["count"] == 0


def test_higher_priority_runs_first(start_server, tmp_path):
    repo = repo_with(tmp_path, {"m": identity(
        "m", delay_param(300) +
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n",
        max_batch_size=1)})
    srv = start_server(repo)
    x = np.ones((1, 2), dtype=np.float32)
    done = []
    lock = threading.Lock()

    def send(tag, priority):
        r = infer(srv, "m", x, params={"priority": priority} if priority else None)
        assert r.status_code == 200, r.text
        with lock:
            done.append(tag)

    # Each request is sent once the one before is in the server: the
    # blocker running (received, nothing queued), then each other queued.
    harness.log_verbose(srv, 1)
    threads = []
    for tag, priority in (("blocker", 0),  # occupies the only instance for 0.3 s
                          ("low1", 2),
                          ("low2", 0),     # 0 = the default level (2)
                          ("high", 1)):
        threads.append(threading.Thread(target=send, args=(tag, priority)))
        threads[-1].start()
        if tag == "blocker":
            harness.wait_received(srv, "POST", "/v2/models/m/infer")
            harness.wait_pending(srv, "m", 0)
        else:
            harness.wait_pending(srv, "m", len(threads) - 1)
    for t in threads:
        t.join()
    assert done == ["blocker", "high", "low1", "low2"]


# ---- shutdown ---------------------------------------------------------------------------


def test_sigterm_runs_queued_requests(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["onnx_zero_1_float32_queue"])
    srv = start_server(repo)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "r", infer(srv, "onnx_zero_1_float32_queue", x)))
    t0 = time.monotonic()
    t.start()
    harness.wait_pending(srv, "onnx_zero_1_float32_queue", 1)
    assert srv.stop() == 0
    t.join()
    # Queued, waiting for a batch of 8 for up to 1 s: shutdown runs it now.
    np.testing.assert_array_equal(output_of(result["r"]), x)
    assert time.monotonic() - t0 < 0.9
    assert srv.clean_exit_problems() == []


# ---- the statistics extension ----------------------------------------------------------


def test_statistics_json_shape_and_order(qa_server):
    r = requests.get(qa_server.url + "/v2/models/stats")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert r.text == compact(body)
    names = [m["name"] for m in body["model_stats"]]
    assert names == sorted(names) and "simple" in names
    assert "onnx_zero_1_float32_queue" not in names  # not in this repository

    r = requests.post(qa_server.url + "/v2/models/identity_uint32/infer", data=json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "UINT32", "shape": [1, 3],
                     "data": [1, 2, 3]}]}))
    assert r.status_code == 200
    (m,) = stats(qa_server, "identity_uint32")
    assert list(m) == ["name", "version", "last_inference", "inference_count",
                       "execution_count", "inference_stats", "response_stats",
                       "batch_stats", "memory_usage"]
    assert m["name"] == "identity_uint32" and m["version"] == "1"
    assert list(m["inference_stats"]) == ["success", "fail", "queue", "compute_input",
                                          "compute_infer", "compute_output", "cache_hit",
                                          "cache_miss"]
    for d in m["inference_stats"].values():
        assert list(d) == ["count", "ns"]
    st = m["inference_stats"]
    assert st["success"]["count"] >= 1
    assert st["queue"]["count"] == st["success"]["count"]
    assert st["compute_infer"]["count"] == st["success"]["count"]
    assert st["success"]["ns"] >= st["compute_infer"]["ns"] > 0
    assert st["cache_hit"] == {"count": 0, "ns": 0}
    assert m["response_stats"] == {} and m["memory_usage"] == []
    b = m["batch_stats"][0]
    assert list(b) == ["batch_size", "compute_input", "compute_infer", "compute_output"]
    assert b["batch_size"] == 1
    now_ms = time.time() * 1000
    assert now_ms - 60_000 < m["last_inference"] <= now_ms + 1000
    (by_version,) = stats(qa_server, "identity_uint32", 1)
    assert by_version["name"] == "identity_uint32" and by_version["version"] == "1"


def test_statistics_errors(qa_server):
    def get(path, method="GET"):
        return requests.request(method, qa_server.url + path, timeout=10)

    r = get("/v2/models/nope/stats")
    assert (r.status_code, r.text) == (400, '{"error":"requested model \'nope\' is not available"}')
    r = get("/v2/models/simple/versions/7/stats")
    assert (r.status_code, r.text) == (
        400, '{"error":"requested model version is not available for model \'simple\'"}')
    assert get("/v2/models/simple/versions/abc/stats").status_code == 404
    assert get("/v2/models/simple/stats/").status_code == 404
    for path in ("/v2/models/stats", "/v2/models/simple/stats"):
        r = get(path, "POST")
        assert (r.status_code, r.text) == (405, '{"error":"Method Not Allowed"}')


def test_statistics_of_unloaded_model(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple", "onnx_zero_1_float32"])
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=*"])
    assert [m["name"] for m in stats(srv)] == ["onnx_zero_1_float32", "simple"]
    r = requests.post(srv.url + "/v2/repository/models/simple/unload")
    assert r.status_code == 200
    assert [m["name"] for m in stats(srv)] == ["onnx_zero_1_float32"]
    r = requests.get(srv.url + "/v2/models/simple/stats")
    assert (r.status_code, r.json()) == (400, {"error": "requested model 'simple' is not available"})


def test_server_metadata_lists_statistics(qa_server):
    ext = requests.get(qa_server.url + "/v2").json()["extensions"]
    assert "statistics" in ext
    assert ext.index("statistics") == ext.index("parameters") + 1


# ---- Prometheus metrics ------------------------------------------------------------------


def test_metrics_match_statistics(start_server, tmp_path):
    repo = repo_with(tmp_path, {
        "batched": identity("batched", delay_param(50) +
                            "dynamic_batching { max_queue_delay_microseconds: 50000 }\n"),
        "other": identity("other"),
    })
    srv = start_server(repo)
    xs = [np.full((1, 2), i, dtype=np.float32) for i in range(10)]
    run_concurrently(lambda x: output_of(infer(srv, "batched", x)), xs)
    bad = requests.post(f"{srv.url}/v2/models/other/infer", data=json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                     "data": [1, 2]}], "outputs": [{"name": "NOPE"}]}))
    assert bad.status_code == 400  # refused before queuing: not a failure

    text = metrics_text(srv)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in [("nv_inference_request_success", "counter"),
                       ("nv_inference_request_failure", "counter"),
                       ("nv_inference_count", "counter"),
                       ("nv_inference_exec_count", "counter"),
                       ("nv_inference_request_duration_us", "counter"),
                       ("nv_inference_queue_duration_us", "counter"),
                       ("nv_inference_compute_input_duration_us", "counter"),
                       ("nv_inference_compute_infer_duration_us", "counter"),
                       ("nv_inference_compute_output_duration_us", "counter"),
                       ("nv_inference_pending_request_count", "gauge"),
                       ("nv_pinned_memory_pool_total_bytes", "gauge"),
                       ("nv_pinned_memory_pool_used_bytes", "gauge"),
                       ("osprey_pinned_memory_pageable_fallbacks", "counter"),
                       ("nv_cpu_utilization", "gauge"),
                       ("nv_cpu_memory_total_bytes", "gauge"),
                       ("nv_cpu_memory_used_bytes", "gauge")]:
        assert name in families, name
        assert families[name].type == kind, name
    assert "# HELP nv_inference_request_success Number of successful inference requests, " \
           "all batch sizes\n" in text

    values = samples(text)
    for model in ("batched", "other"):
        s = one_stats(srv, model)
        st = s["inference_stats"]
        v = lambda n, **kw: model_value(values, n, model, **kw)  # noqa: E731
        assert v("nv_inference_request_success") == st["success"]["count"]
        assert sum(v("nv_inference_request_failure", reason=r)
                   for r in ("REJECTED", "CANCELED", "BACKEND", "OTHER")) == st["fail"]["count"]
        assert v("nv_inference_count") == s["inference_count"]
        assert v("nv_inference_exec_count") == s["execution_count"]
        assert v("nv_inference_pending_request_count") == 0
        # µs counters add each request's ns // 1000, so they trail ns / 1000 by < 1 µs each.
        n = st["success"]["count"]
        for metric, key in [("nv_inference_request_duration_us", "success"),
                            ("nv_inference_queue_duration_us", "queue"),
                            ("nv_inference_compute_input_duration_us", "compute_input"),
                            ("nv_inference_compute_infer_duration_us", "compute_infer"),
                            ("nv_inference_compute_output_duration_us", "compute_output")]:
            assert st[key]["ns"] / 1000 - n <= v(metric) <= st[key]["ns"] / 1000, metric
    assert model_value(values, "nv_inference_count", "batched") == 10
    assert model_value(values, "nv_inference_exec_count", "batched") < 10
    assert 0.0 <= values[("nv_cpu_utilization", frozenset())] <= 1.0
    assert values[("nv_cpu_memory_total_bytes", frozenset())] > 0


def test_metrics_path_rules(start_server, tmp_path):
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]))
    base = srv.metrics_url
    r = requests.get(base + "/metrics/")
    assert r.status_code == 200 and "nv_inference_count" in r.text
    r = requests.get(base + "/other")
    assert (r.status_code, r.content) == (200, b"")
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert requests.get(base + "/metrics/x").content == b""
    for method in ("POST", "PUT", "DELETE"):
        r = requests.request(method, base + "/metrics")
        assert (r.status_code, r.text) == (405, '{"error":"Method Not Allowed"}')


def test_metrics_can_be_turned_off(start_server, tmp_path):
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]),
                       ["--allow-metrics=false"])
    assert "Metrics Service" not in srv.log()


def test_bad_metrics_flag_values_refuse_to_start(tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    for flag in ("--metrics-port=-1", "--metrics-port=70000", "--allow-metrics=maybe"):
        srv = harness.OspreyServer(repo, [flag], workdir=tmp_path / flag.strip("-"))
        assert srv.run_to_exit() != 0, flag
        assert "invalid value" in srv.log(), flag


def test_gpu_metrics_through_nvml(start_server, tmp_path, monkeypatch):
    """NVML is found with dlopen at run time: a look-alike library with two
    fake GPUs (tests/integration/fake_nvml) stands in for the driver's."""
    lib_dir = os.path.join(os.path.dirname(harness.osprey_bin()), "tests", "fake_nvml")
    if not os.path.exists(os.path.join(lib_dir, "libnvidia-ml.so.1")):
        pytest.skip("fake NVML not built (cmake --build build --target fake_nvml)")
    monkeypatch.setenv("LD_LIBRARY_PATH", lib_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]))
    text = metrics_text(srv)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    gpu = lambda name, i: {s.labels["gpu_uuid"]: s.value  # noqa: E731
                           for s in families[name].samples}[f"GPU-fake-{i}"]
    assert gpu("nv_gpu_utilization", 0) == 0.25
    assert gpu("nv_gpu_utilization", 1) == 0.75
    assert gpu("nv_gpu_memory_total_bytes", 0) == 80 * 2 ** 30
    assert gpu("nv_gpu_memory_used_bytes", 1) == 2 * 2 ** 30
    assert gpu("nv_gpu_power_usage", 1) == 101.0
    assert gpu("nv_gpu_power_limit", 0) == 700.0
    assert families["nv_energy_consumption"].type == "counter"
    assert gpu("nv_energy_consumption", 0) == 2.0  # joules since the server started
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                 "nv_gpu_power_usage", "nv_gpu_power_limit"):
        assert families[name].type == "gauge", name

    # --allow-gpu-metrics=false leaves them out; without the library they are absent.
    srv2 = start_server(harness.make_repo(tmp_path / "repo2", ["simple"]),
                        ["--allow-gpu-metrics=false", "--allow-cpu-metrics=false"])
    text = metrics_text(srv2)
    assert "nv_gpu_" not in text and "nv_cpu_" not in text
    assert "nv_inference_count" in text


def test_gpu_metrics_absent_without_nvml(start_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # nothing to find there
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]))
    text = metrics_text(srv)
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real NVML is installed")
    assert "nv_gpu_" not in text and "nv_energy_consumption" not in text
    assert "nv_cpu_utilization" in text
