"""Two Osprey replicas on one Redis (docs/queue-redis.md): a put through
one is watched and fetched through the other, a commit through one frees
the window of a watch on the other, and the built-in workers of a model
service run each input item on exactly one replica."""

import json
import time

import pytest

import harness
import queue_util as qu
from queue_util import RawQueue


@pytest.fixture
def redis(request):
    if not qu.redis_store_available():
        pytest.skip("this build has no Redis queue store")
    return request.getfixturevalue("redis_server")


def replicas(start_server, tmp_path, redis, repo_models=None, extra=()):
    out = []
    for name in ("a", "b"):
        if repo_models:
            repo = harness.make_repo(tmp_path / f"repo_{name}", repo_models)
        else:
            (tmp_path / name).mkdir(exist_ok=True)
            repo = qu.empty_repo(tmp_path / name)
        out.append(start_server(repo, list(extra) + qu.queue_args("redis", redis)))
    return out


def test_put_on_one_replica_watch_and_get_on_the_other(start_server, tmp_path,
                                                         redis):
    a, b = replicas(start_server, tmp_path, redis, extra=["--queue-service=svc"])
    qa = RawQueue(a.url + "/api/predict/svc")
    qb = RawQueue(b.url + "/api/predict/svc")
    w = qb.watch(index=0, window=2)
    for i in range(3):
        r = qa.put(f"x{i}".encode())
        assert r.status_code == 200 and r.text == str(i + 1)
    first = [w.next(timeout=5 * harness.timeout_scale()) for _ in range(2)]
    assert [f["index"] for f in first] == [1, 2]
    assert w.next(timeout=0.5) is None  # the window of 2
    assert qa.commit([1]).status_code == 200  # through the other replica
    third = w.next(timeout=5 * harness.timeout_scale())
    assert third is not None and third["index"] == 3
    assert qb.search(2).json()["IsPending"] is True
    w.drop()
    # A get through B sees what A stored, a long poll on B sees a put on A.
    assert [f["index"] for f in qb.get(index=0, length=5)] == [2, 3]
    sink_a = RawQueue(a.url + "/api/predict/svc/sink")
    sink_b = RawQueue(b.url + "/api/predict/svc/sink")
    import threading
    threading.Timer(0.5, lambda: sink_a.put(b"late")).start()
    t0 = time.monotonic()
    got = sink_b.get(timeout="3s")
    assert [f["data"] for f in got] == [b"late"]
    assert time.monotonic() - t0 < 2.5 * harness.timeout_scale()


def simple_request(rid):
    return json.dumps({"id": rid, "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [2] * 16},
    ]}).encode()


def test_each_input_item_runs_on_exactly_one_replica(start_server, tmp_path,
                                                     redis):
    a, b = replicas(start_server, tmp_path, redis, repo_models=["simple"],
                    extra=["--model-control-mode=explicit", "--load-model=simple",
                           "--queue-max-payload-bytes=65536"])
    inputs = [RawQueue(s.url + "/api/predict/simple") for s in (a, b)]
    sink = RawQueue(a.url + "/api/predict/simple/sink")
    rids = []
    for i in range(20):
        r = inputs[i % 2].put(simple_request(f"r{i}"))
        assert r.status_code == 200
        rids.append(r.headers["X-Eas-Queueservice-Request-Id"])
    deadline = time.monotonic() + 20 * harness.timeout_scale()
    while time.monotonic() < deadline and sink.length() < 20:
        time.sleep(0.1)
    time.sleep(0.5)  # a duplicate would show up now
    items = sink.get(index=0, length=100)
    assert sorted(f["tags"]["requestId"] for f in items) == sorted(rids)
    assert all(f["tags"]["status"] == "200" for f in items)
    assert inputs[0].length() == 0
