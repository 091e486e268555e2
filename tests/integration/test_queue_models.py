"""Model services of the queue (docs/queue.md): every loaded model is a
queue service whose built-in worker runs each item as a KServe v2 JSON
inference request and stores the response in the sink under the item's
request id; failures become {"error": ...} items tagged with the HTTP
status. Models loaded and unloaded in explicit mode gain and lose their
service. On both stores."""

import json
import re
import time

import pytest
import requests

import harness
import queue_util as qu
from queue_util import RawQueue


def simple_request(a, b, rid="req-1", binary=False):
    body = {"id": rid, "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": b}]}
    if binary:
        body["parameters"] = {"binary_data_output": True}
    return json.dumps(body).encode()


def sink_result(sink, request_id, timeout=10):
    deadline = time.monotonic() + timeout * harness.timeout_scale()
    while time.monotonic() < deadline:
        got = sink.get(request_id=request_id, timeout="2s", auto_delete=False)
        if got:
            return got[0]
    raise AssertionError(f"no sink item for request id {request_id}")


@pytest.fixture
def model_server(start_server, tmp_path, queue_store, request):
    redis = request.getfixturevalue("redis_server") if queue_store == "redis" else None
    repo = harness.make_repo(tmp_path / "repo", ["simple", "identity_delay"])
    return start_server(repo, ["--model-control-mode=explicit", "--load-model=simple"]
                        + qu.queue_args(queue_store, redis,
                                        extra=["--queue-max-payload-bytes=65536"]))


def test_inference_through_the_sink(model_server):
    inq = RawQueue(model_server.url + "/api/predict/simple")
    sink = RawQueue(model_server.url + "/api/predict/simple/sink")
    a, b = list(range(16)), [1] * 16
    r = inq.put(simple_request(a, b, rid="my-id"))
    assert r.status_code == 200
    rid = r.headers["X-Eas-Queueservice-Request-Id"]
    item = sink_result(sink, rid)
    assert item["tags"]["requestId"] == rid and item["tags"]["status"] == "200"
    out = json.loads(item["data"])
    assert out["id"] == "my-id" and out["model_name"] == "simple"
    outputs = {o["name"]: o["data"] for o in out["outputs"]}
    assert outputs["OUTPUT0"] == [x + 1 for x in a]
    assert outputs["OUTPUT1"] == [x - 1 for x in a]
    # the input item is committed once the result is stored
    deadline = time.monotonic() + 5 * harness.timeout_scale()
    while inq.length() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inq.length() == 0

    # binary outputs: the HTTP body, with the JSON header's length as a tag
    rid = inq.put(simple_request(a, b, binary=True)).headers["X-Eas-Queueservice-Request-Id"]
    item = sink_result(sink, rid)
    hlen = int(item["tags"]["Inference-Header-Content-Length"])
    header = json.loads(item["data"][:hlen])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert len(item["data"]) == hlen + 128

    # a high-priority item, and many at once: every one gets its result
    rids = [inq.put(simple_request(a, b, rid=str(i)),
                    tags={"_priority_": str(i % 2)}).headers["X-Eas-Queueservice-Request-Id"]
            for i in range(30)]
    for rid in rids:
        assert sink_result(sink, rid)["tags"]["status"] == "200"

    # statistics and metrics count the queued requests and their wait
    stats = requests.get(model_server.url + "/v2/models/simple/stats").json()
    assert stats["model_stats"][0]["inference_count"] >= 32
    text = requests.get(model_server.metrics_url + "/metrics").text
    assert re.search(r'osprey_queue_worker_items\{service="simple"\} (\d+)', text)
    m = re.search(r'osprey_queue_wait_count\{service="simple"\} (\d+)', text)
    assert m and int(m.group(1)) >= 32
    assert 'osprey_queue_puts{queue="simple/sink"}' in text
    assert re.search(r'osprey_queue_consumers\{queue="simple"\} 1', text)


def test_failures_become_error_items(model_server):
    inq = RawQueue(model_server.url + "/api/predict/simple")
    sink = RawQueue(model_server.url + "/api/predict/simple/sink")
    cases = [
        (b"this is not JSON", "400"),
        (b"", "400"),
        (json.dumps({"inputs": [{"name": "NOPE", "datatype": "INT32",
                                 "shape": [1], "data": [1]}]}).encode(), "400"),
    ]
    for body, status in cases:
        rid = inq.put(body).headers["X-Eas-Queueservice-Request-Id"]
        item = sink_result(sink, rid)
        assert item["tags"]["status"] == status, item
        err = json.loads(item["data"])
        assert set(err) == {"error"} and err["error"], err
    text = requests.get(model_server.metrics_url + "/metrics").text
    m = re.search(r'osprey_queue_worker_failures\{service="simple"\} (\d+)', text)
    assert m and int(m.group(1)) == 3


def test_models_loaded_and_unloaded_become_services(model_server):
    url = model_server.url
    q = RawQueue(url + "/api/predict/identity_delay")
    assert q.put(b"{}").status_code == 404
    assert requests.post(url + "/v2/repository/models/identity_delay/load").status_code == 200
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                   "shape": [1, 2], "data": [1.5, 2.5]}]}).encode()
    r = q.put(body)
    assert r.status_code == 200
    item = sink_result(RawQueue(url + "/api/predict/identity_delay/sink"),
                       r.headers["X-Eas-Queueservice-Request-Id"])
    assert json.loads(item["data"])["outputs"][0]["data"] == [1.5, 2.5]
    assert requests.post(url + "/v2/repository/models/identity_delay/unload").status_code == 200
    deadline = time.monotonic() + 5 * harness.timeout_scale()
    while q.put(b"{}").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert q.put(b"{}").status_code == 404


def test_shutdown_finishes_items_in_flight(start_server, tmp_path, queue_store, request):
    """SIGTERM while the worker runs slow items: the server exits 0, and
    every item is either answered in the sink or still in the input queue
    after a restart on the same store."""
    redis = request.getfixturevalue("redis_server") if queue_store == "redis" else None
    repo = harness.make_repo(tmp_path / "repo", ["identity_delay"])
    qdir = tmp_path / "qdir"
    args = qu.queue_args(queue_store, redis, extra=[f"--queue-dir={qdir}"])
    server = start_server(repo, args)
    q = RawQueue(server.url + "/api/predict/identity_delay")
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                   "shape": [1, 1], "data": [1.0]}]}).encode()
    for _ in range(6):
        assert q.put(body).status_code == 200
    # The worker runs the first item (300 ms each) when the SIGTERM comes.
    qu.wait_for("the worker to take item 1",
                lambda: q.search(1).json().get("IsPending"), 10)
    assert server.stop() == 0
    server = start_server(repo, args)
    q = RawQueue(server.url + "/api/predict/identity_delay")
    sink = RawQueue(server.url + "/api/predict/identity_delay/sink")
    deadline = time.monotonic() + 30 * harness.timeout_scale()
    while sink.length() < 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sink.length() == 6 and q.length() == 0


def test_kill_9_mid_item_and_restart_runs_the_item(start_server, tmp_path):
    """The embedded store: the worker holds a slow item when the server is
    killed with SIGKILL (its inference half done, nothing in the sink). A
    restart on the same --queue-dir finds the item uncommitted, hands it to
    the new worker and stores exactly one result for it."""
    repo = qu.slow_repo(tmp_path / "repo")
    args = [f"--queue-dir={tmp_path / 'qdir'}",
            "--queue-consumer-grace-ms=500"]
    server = start_server(repo, args)
    q = RawQueue(server.url + "/api/predict/slow", token="")
    r = q.put(qu.slow_request("r1"))
    assert r.status_code == 200 and r.text == "1"
    rid = r.headers["X-Eas-Queueservice-Request-Id"]
    qu.wait_for("the worker to take item 1",
                lambda: q.search(1).json().get("IsPending"), 10)
    sink = RawQueue(server.url + "/api/predict/slow/sink", token="")
    assert sink.length() == 0  # the item is mid-inference
    server.kill()
    server.returncode = -9  # expected: not a crash

    server = start_server(repo, args)
    q = RawQueue(server.url + "/api/predict/slow", token="")
    sink = RawQueue(server.url + "/api/predict/slow/sink", token="")
    # Once the input is committed (gone) nothing can run it again, and the
    # worker stores a result before it commits: a duplicate would be there.
    qu.wait_for("the item's sink result and its commit",
                lambda: sink.length() >= 1 and q.length() == 0,
                3 * qu.SLOW_MS / 1000 + 10)
    items = sink.get(index=0, length=10)
    assert [f["tags"]["requestId"] for f in items] == [rid]
    assert items[0]["tags"]["status"] == "200"
    assert json.loads(items[0]["data"])["id"] == "r1"
    assert q.length() == 0
    assert int(q.put(b"{}").text) == 2  # indexes continue
