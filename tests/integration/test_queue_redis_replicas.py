"""Two Osprey replicas on one Redis (docs/queue-redis.md): a put through
one is watched and fetched through the other, a commit through one frees
the window of a watch on the other, the built-in workers of a model
service run each input item on exactly one replica, and the item a replica
held when it was killed (kill -9, mid-inference) is claimed and run by the
other."""

import json
import re
import time

import pytest
import requests

import harness
import queue_util as qu
from queue_util import RawQueue


@pytest.fixture
def redis(request):
    if not qu.redis_store_available():
        pytest.skip("this build has no Redis queue store")
    return request.getfixturevalue("redis_server")


def replicas(start_server, tmp_path, redis, repo_models=None, extra=(),
             redis_url=None):
    out = []
    for name in ("a", "b"):
        if callable(repo_models):
            repo = repo_models(tmp_path / f"repo_{name}")
        elif repo_models:
            repo = harness.make_repo(tmp_path / f"repo_{name}", repo_models)
        else:
            (tmp_path / name).mkdir(exist_ok=True)
            repo = qu.empty_repo(tmp_path / name)
        args = qu.queue_args("redis", redis)
        if redis_url:
            args = [a for a in args if not a.startswith("--queue-store=")]
            args.append(f"--queue-store={redis_url}")
        out.append(start_server(repo, list(extra) + args))
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
    first = [w.next() for _ in range(2)]
    assert [f["index"] for f in first] == [1, 2]
    assert w.next(timeout=0.5) is None  # the window of 2
    assert qa.commit([1]).status_code == 200  # through the other replica
    third = w.next()
    assert third is not None and third["index"] == 3
    assert qb.search(2).json()["IsPending"] is True
    w.drop()
    # A get through B sees what A stored, a long poll on B sees a put on A.
    assert [f["index"] for f in qb.get(index=0, length=5)] == [2, 3]
    sink_a = RawQueue(a.url + "/api/predict/svc/sink")
    sink_b = RawQueue(b.url + "/api/predict/svc/sink")
    import threading
    poll_s = 3 * harness.timeout_scale()
    t0 = time.monotonic()
    threading.Timer(0.5, lambda: sink_a.put(b"late")).start()
    got = sink_b.get(timeout=f"{poll_s:g}s")
    took = time.monotonic() - t0
    assert [f["data"] for f in got] == [b"late"]
    assert 0.5 <= took < poll_s - 0.5 * harness.timeout_scale(), took


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
    # Once every input is committed (gone) nothing can run one again, and a
    # worker stores a result before it commits: a duplicate would be there.
    qu.wait_for("20 sink results and every input committed",
                lambda: sink.length() >= 20 and inputs[0].length() == 0, 20)
    items = sink.get(index=0, length=100)
    assert sorted(f["tags"]["requestId"] for f in items) == sorted(rids)
    assert all(f["tags"]["status"] == "200" for f in items)
    assert inputs[0].length() == 0


def test_item_of_a_killed_replica_is_claimed_by_the_other(start_server,
                                                          tmp_path, redis):
    """Each replica's worker (window 1) holds one of two slow items; one
    replica is killed with SIGKILL mid-inference. Its item stays pending in
    Redis under the dead consumer until claim_idle_ms passes, then the
    surviving replica's worker claims it, runs it and stores its result:
    one sink result per input, none lost and none twice."""
    url = f"{redis.url}?claim_idle_ms=500"
    a, b = replicas(start_server, tmp_path, redis, repo_models=qu.slow_repo,
                    extra=["--queue-worker-window=1",
                           "--queue-consumer-grace-ms=500"],
                    redis_url=url)
    qa = RawQueue(a.url + "/api/predict/slow")
    qb = RawQueue(b.url + "/api/predict/slow")
    sink = RawQueue(b.url + "/api/predict/slow/sink")
    rids = {}
    for i in (1, 2):
        r = qa.put(qu.slow_request(f"r{i}"))
        assert r.status_code == 200 and r.text == str(i)
        rids[i] = r.headers["X-Eas-Queueservice-Request-Id"]

    # Window 1 per worker: two pending items are one on each replica.
    def holders():
        got = {i: qb.search(i).json() for i in (1, 2)}
        if all(g.get("IsPending") for g in got.values()):
            return {i: g["ConsumerId"] for i, g in got.items()}
        return None
    held = qu.wait_for("both items pending", holders, 10)
    assert held[1] != held[2], held
    pid_of = {s.pid: s for s in (a, b)}
    owner = [s for pid, s in pid_of.items() if held[1].endswith(f":{pid}")]
    assert len(owner) == 1, (held, list(pid_of))
    victim = owner[0]
    survivor = b if victim is a else a
    assert sink.length() == 0  # item 1 is mid-inference on the victim
    victim.kill()
    victim.returncode = -9  # expected: not a crash

    q = RawQueue(survivor.url + "/api/predict/slow")
    sink = RawQueue(survivor.url + "/api/predict/slow/sink")
    # The survivor claims item 1 once it has been idle for claim_idle_ms,
    # after running its own item 2.
    # Once both inputs are committed (gone) nothing can run one again, and a
    # worker stores a result before it commits: a duplicate would be there.
    qu.wait_for("both sink results and both inputs committed",
                lambda: sink.length() >= 2 and q.length() == 0,
                3 * qu.SLOW_MS / 1000 + 10)
    items = sink.get(index=0, length=10)
    assert sorted(f["tags"]["requestId"] for f in items) == sorted(rids.values())
    assert all(f["tags"]["status"] == "200" for f in items), items
    assert q.length() == 0
    # The survivor ran both: its own and the one it claimed (a redelivery).
    metrics = requests.get(survivor.metrics_url + "/metrics").text
    assert 'osprey_queue_worker_items{service="slow"} 2\n' in metrics, metrics
    assert 'osprey_queue_redeliveries{queue="slow"} 1\n' in metrics, metrics


@pytest.fixture
def redis_with_password():
    if not qu.redis_store_available():
        pytest.skip("this build has no Redis queue store")
    server = qu.RedisServer(args=["--requirepass", "s3cr:t@pw"])
    yield server
    server.stop()


def test_redis_auth_from_url_file_and_environment(start_server, tmp_path,
                                                  redis_with_password, monkeypatch):
    """AUTH on every connect with the password from the URL
    (percent-encoded), --queue-store-password-file or
    $OSPREY_QUEUE_STORE_PASSWORD; never logged; a wrong one stops the
    start with a clear error."""
    secret = "s3cr:t@pw"
    hostport = f"127.0.0.1:{redis_with_password.port}"
    pw_file = tmp_path / "pw"
    pw_file.write_text(secret + "\n")
    repo = qu.empty_repo(tmp_path)
    base = ["--queue-service=svc", f"--queue-token={qu.TOKEN}"]
    ways = [
        ([f"--queue-store=redis://:s3cr%3At%40pw@{hostport}"], {}),
        ([f"--queue-store=redis://{hostport}", f"--queue-store-password-file={pw_file}"], {}),
        ([f"--queue-store=redis://{hostport}"], {"OSPREY_QUEUE_STORE_PASSWORD": secret}),
    ]
    for i, (args, env) in enumerate(ways):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        srv = start_server(repo, base + args)
        q = RawQueue(srv.url + "/api/predict/svc")
        r = q.put(f"item-{i}".encode())
        assert r.status_code == 200, r.text
        assert q.get(index=int(r.text))[0]["data"] == f"item-{i}".encode()
        assert srv.stop() == 0
        assert secret not in srv.log() and "s3cr%3At%40pw" not in srv.log()
        monkeypatch.delenv("OSPREY_QUEUE_STORE_PASSWORD", raising=False)
    bad = harness.OspreyServer(repo, base + [f"--queue-store=redis://:wrong@{hostport}"],
                               workdir=tmp_path / "bad")
    assert bad.run_to_exit() != 0
    assert "refused the password: WRONGPASS" in bad.log(), bad.log_tail()
    assert "wrong" not in bad.log().replace("refused the password", "")
