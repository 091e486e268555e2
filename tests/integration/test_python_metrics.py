"""Custom metrics of python models (pb_utils.MetricFamily, Triton's python
backend API) on Osprey's /metrics: counters, gauges and histograms made in
initialize and updated in execute, shared by a model's instances, read back
with value(), Triton's refusals, and a metric that leaves /metrics when the
model drops it (tests/integration/python_models/py_metrics)."""

import pathlib
import shutil
import sys

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness

MODELS = pathlib.Path(__file__).parent / "python_models"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("metrics-repo")
    shutil.copytree(MODELS / "py_metrics", repo / "py_metrics")
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit", "--load-model=py_metrics",
               f"--backend-config=python,python-executable={sys.executable}"],
        workdir=tmp_path_factory.mktemp("metrics-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def run(srv, op, x, protocol="http"):
    mod = httpclient if protocol == "http" else grpcclient
    inputs = [mod.InferInput("OP", [1], "BYTES"), mod.InferInput("X", [1], "FP64")]
    inputs[0].set_data_from_numpy(np.array([op.encode()], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.array([x], dtype=np.float64))
    if protocol == "http":
        client = httpclient.InferenceServerClient(srv.hostport)
    else:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
    result = client.infer("py_metrics", inputs)
    client.close()
    return float(result.as_numpy("VALUE")[0]), result.as_numpy("MESSAGE")[0].decode()


def metrics(srv):
    return requests.get(srv.metrics_url + "/metrics", timeout=10).text


def sample(srv, prefix):
    """The value of the /metrics line starting with `prefix` (None when
    missing)."""
    for line in metrics(srv).splitlines():
        if line.startswith(prefix + " "):
            return float(line[len(prefix) + 1:])
    return None


COUNTER = 'py_metrics_requests_total{kind="x",model="py_metrics"}'


def test_families_are_served_as_prometheus_cpp_writes_them(srv):
    text = metrics(srv)
    assert ("# HELP py_metrics_requests_total Requests seen\n"
            "# TYPE py_metrics_requests_total counter\n") in text
    assert "# HELP py_metrics_level Last level set\n# TYPE py_metrics_level gauge\n" in text
    assert "# TYPE py_metrics_sizes histogram\n" in text


def test_counter_is_shared_by_the_instances_and_read_back(srv):
    before = sample(srv, COUNTER)
    # Requests land on both instances; the series is one.
    total = before
    for protocol in ("http", "grpc", "http", "grpc"):
        value, message = run(srv, "count", 2.5, protocol)
        total += 2.5
        assert message == ""
        assert value == total
    assert sample(srv, COUNTER) == total


def test_gauge_sets_and_histogram_counts_its_buckets(srv):
    assert run(srv, "gauge", -4.25) == (-4.25, "")
    assert sample(srv, "py_metrics_level") == -4.25
    for x in (0.5, 5, 50, 500):
        run(srv, "observe", x)
    labels = '{model="py_metrics"'
    assert sample(srv, "py_metrics_sizes_count" + labels + "}") == 4
    assert sample(srv, "py_metrics_sizes_sum" + labels + "}") == 555.5
    assert sample(srv, "py_metrics_sizes_bucket" + labels + ',le="1"}') == 1
    assert sample(srv, "py_metrics_sizes_bucket" + labels + ',le="10"}') == 2
    assert sample(srv, "py_metrics_sizes_bucket" + labels + ',le="100"}') == 3
    assert sample(srv, "py_metrics_sizes_bucket" + labels + ',le="+Inf"}') == 4


def test_refusals_use_tritons_words(srv):
    assert run(srv, "negative", -1) == (
        -1.0, "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can "
        "only be incremented monotonically by non-negative values.")
    assert run(srv, "set_counter", 1) == (
        -1.0, "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not "
        "support Set")
    assert run(srv, "hist_value", 0) == (
        -1.0, "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not "
        "support Value")
    assert run(srv, "bad_family", 0) == (
        -1.0, "Error when creating MetricFamily: Family name already exists with "
        "different type")


def test_a_dropped_metric_leaves_metrics(srv):
    assert run(srv, "temporary", 3) == (3.0, "")
    # del in the model deleted the series: the next one starts from zero.
    assert sample(srv, 'py_metrics_requests_total{kind="temporary",model="py_metrics"}') is None
    assert run(srv, "temporary", 2) == (2.0, "")


def test_unloading_the_model_removes_its_series(srv):
    client = httpclient.InferenceServerClient(srv.hostport)
    client.unload_model("py_metrics")
    harness.wait_for(lambda: sample(srv, COUNTER) is None, "the series to go with the model")
    # Triton keeps the families listed once made.
    assert "# TYPE py_metrics_requests_total counter\n" in metrics(srv)
    client.load_model("py_metrics")
    assert sample(srv, COUNTER) == 0
    client.close()
