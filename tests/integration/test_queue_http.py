"""The queue service's scenario list (PAI-EAS reference §6, steps 1-33)
through raw HTTP and WebSocket: requests and websocket-client with the
hand-written protobuf codec of queue_util, on both stores. The same list
runs through the real SDK in test_queue_sdk.py."""

import threading
import time

import pytest
import requests

import harness
import queue_util as qu
from queue_util import RawQueue


@pytest.fixture
def svc_server(start_server, tmp_path, queue_store, request):
    redis = request.getfixturevalue("redis_server") if queue_store == "redis" else None
    return start_server(qu.empty_repo(tmp_path),
                        ["--queue-service=svc"] + qu.queue_args(queue_store, redis))


def clients(server, path="/api/predict/svc"):
    return RawQueue(server.url + path), RawQueue(server.url + path + "/sink")


def test_scenario_steps_1_to_23(svc_server):
    inq, sink = clients(svc_server)
    # 1: a new queue
    a = inq.attributes()
    assert a["stream.length"] == "0" and "stream.lastEntry" not in a
    assert all(isinstance(v, str) for v in a.values())
    assert a["meta.maxPayloadBytes"] == str(qu.MAX_PAYLOAD)
    # 2, 3: ten puts, decimal indexes 1..10, unique request ids
    idx, rids = [], []
    for i in range(10):
        r = inq.put(str(i).encode())
        assert r.status_code == 200
        assert r.text == str(i + 1)
        idx.append(int(r.text))
        rids.append(r.headers["X-Eas-Queueservice-Request-Id"])
    assert len(set(rids)) == 10
    # 4
    a = inq.attributes()
    assert a["stream.length"] == "10"
    assert a["stream.firstEntry"] == str(idx[0]) and a["stream.lastEntry"] == str(idx[9])
    # 5, 6: a non-deleting get
    got = inq.get(index=idx[3], length=2)
    assert [f["index"] for f in got] == [idx[3], idx[4]]
    assert got[0]["data"] == b"3"
    assert inq.length() == 10
    # 7, 8: by request id, deleting (the SDK's default)
    got = inq.get(request_id=rids[7], auto_delete=True)
    assert len(got) == 1 and got[0]["data"] == b"7"
    assert got[0]["tags"]["requestId"] == rids[7]
    assert inq.length() == 9
    # 9: an empty queue answers at once
    t0 = time.monotonic()
    assert sink.get(timeout="0s") == []
    assert time.monotonic() - t0 < 1 * harness.timeout_scale()
    # 10: a long poll answered by the put 0.5 s in, not by its own end (3 s,
    # longer on a slow machine)
    poll_s = 3 * harness.timeout_scale()
    t0 = time.monotonic()
    threading.Timer(0.5, lambda: sink.put(b"late")).start()
    got = sink.get(timeout=f"{poll_s:g}s", auto_delete=True)
    took = time.monotonic() - t0
    assert [f["data"] for f in got] == [b"late"]
    assert 0.5 <= took < poll_s - 0.5 * harness.timeout_scale(), took
    # 11: delete
    r = inq.delete([idx[0], idx[1]])
    assert r.status_code == 200 and r.text == "OK"
    assert inq.length() == 7
    # 12-15: a watch with window 5 and manual commits
    w = inq.watch(0, 5)
    frames = [w.next() for _ in range(5)]
    assert [f["data"] for f in frames] == [b"2", b"3", b"4", b"5", b"6"]
    assert w.next(timeout=1) is None  # 13: window full
    assert inq.commit([frames[0]["index"]]).text == "OK"
    f = w.next()  # 14: the next one, pushed by the commit
    assert f["data"] == b"8"
    assert inq.commit([x["index"] for x in frames[1:]] + [f["index"]]).status_code == 200
    w.drop()
    assert inq.length() == 1  # 15
    # 16: priority first
    inq.put(b"normal")
    inq.put(b"urgent", tags={"_priority_": "1"})
    got = inq.get(length=10)
    assert got[0]["data"] == b"urgent"
    # 17: truncate
    last = int(inq.attributes()["stream.lastEntry"])
    assert inq.truncate(last + 1).status_code == 200
    assert inq.length() == 0
    # 18: a result in the sink under the request id (an outside worker)
    rid = inq.put(b"[{}]").headers["X-Eas-Queueservice-Request-Id"]
    job = inq.get(auto_delete=True)[0]
    sink.put(b"result", tags={"requestId": job["tags"]["requestId"]})
    got = sink.get(request_id=rid, timeout="1s")
    assert got and got[0]["data"] == b"result"
    sink.truncate(10**9)
    # 19: auto commit removes what it sends
    for i in range(10):
        sink.put(str(i).encode())
    w = sink.watch(0, 5, auto_commit=True)
    assert len([w.next() for _ in range(10)]) == 10
    w.drop()
    deadline = time.monotonic() + 5 * harness.timeout_scale()
    while sink.length() != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.length() == 0
    # 20: tag filters
    sink.put(b"x", tags={"foo": "x"})
    sink.put(b"y", tags={"foo": "y"})
    w = sink.watch(0, 5, auto_commit=True, tags={"foo": "y"})
    f = w.next()
    assert f["data"] == b"y" and f["tags"]["foo"] == "y"
    assert w.next(timeout=0.5) is None
    w.drop()
    sink.truncate(10**9)
    # 21: a wrong token stores nothing
    bad = RawQueue(inq.base, token="wrong")
    assert bad.put(b"x").status_code == 401
    assert RawQueue(inq.base, token="Bearer " + qu.TOKEN).put(b"x").status_code == 401
    assert requests.post(inq.base, data=b"x").status_code == 401
    assert inq.length() == 0
    # 22: too large (the limit is inclusive)
    assert inq.put(b"x" * (qu.MAX_PAYLOAD + 1)).status_code == 413
    assert inq.length() == 0
    assert inq.put(b"x" * qu.MAX_PAYLOAD).status_code == 200
    inq.truncate(10**9)
    # 23: full
    for i in range(qu.MAX_LENGTH):
        assert inq.put(b"i").status_code == 200
    r = inq.put(b"one more")
    assert r.status_code == 429 and "full" in r.text
    assert inq.length() == qu.MAX_LENGTH


def test_scenario_steps_24_to_33(svc_server):
    inq, sink = clients(svc_server)
    # 24: a Content-Type changes nothing
    inq.s.headers["Content-Type"] = "application/json"
    r = inq.put(b"{}")
    assert r.status_code == 200
    first = int(r.text)
    assert inq.get()[0]["data"] == b"{}"
    # 25: search
    inq.put(b"second")
    s = inq.search(first + 1).json()
    assert s["IsPending"] is False and s["WaitCount"] == 1
    assert inq.search(10**6).json() == {}
    # 26: a watch handshake with a bad token
    import websocket
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        RawQueue(inq.base, token="nope").watch()
    assert e.value.status_code == 401
    inq.truncate(10**9)
    # 27: a dropped consumer gets its uncommitted items back
    for i in range(4):
        inq.put(f"d{i}".encode())
    w = inq.watch(0, 2)
    got = [w.next()["index"] for _ in range(2)]
    s = inq.search(got[0]).json()
    assert s["IsPending"] is True and s["ConsumerId"] == "eas.raw-uid"
    w.drop()
    w = inq.watch(0, 2)
    again = sorted(w.next()["index"] for _ in range(2))
    assert again == sorted(got)
    assert inq.commit(again).status_code == 200
    assert inq.commit(again).status_code == 200  # idempotent
    # 28: pongs, no text or close frames
    assert w.ping(b"ping") == b"ping"
    f = w.next()
    assert f is not None  # the next items come as binary frames
    w.drop()
    inq.truncate(10**9)
    # 29: one group, two consumers: split, none lost
    a, b = RawQueue(inq.base, uid="a"), RawQueue(inq.base, uid="b")
    wa, wb = a.watch(0, 1), b.watch(0, 1)
    for i in range(6):
        inq.put(f"g{i}".encode())
    seen = {}
    deadline = time.monotonic() + 10 * harness.timeout_scale()
    while len(seen) < 6 and time.monotonic() < deadline:
        for who, (client, w) in {"a": (a, wa), "b": (b, wb)}.items():
            f = w.next(timeout=0.2)
            if f:
                seen[f["index"]] = who
                client.commit([f["index"]])
    assert len(seen) == 6 and set(seen.values()) == {"a", "b"}
    wa.drop()
    wb.drop()
    # 30: two groups each see everything
    inq.put(b"fan")
    g1 = RawQueue(inq.base, uid="x", gid="g1").watch(0, 5)
    g2 = RawQueue(inq.base, uid="y", gid="g2").watch(0, 5)
    assert g1.next()["data"] == b"fan" and g2.next()["data"] == b"fan"
    g1.drop()
    g2.drop()
    inq.truncate(10**9)
    # 31: index only
    inq.put(b"payload", tags={"k": "v"})
    w = RawQueue(inq.base, uid="io").watch(0, 5, index_only=True)
    f = w.next()
    assert f["data"] == b"" and f["index"] > 0 and f["tags"]["k"] == "v"
    w.drop()
    inq.truncate(10**9)
    # 32: a long poll with the SDK's defaults is answered before the SDK's
    # 5 s read timeout (a client with that read timeout gets its reply)
    r = sink.s.get(sink.base, params={"_timeout_": "5s", "_length_": 1},
                   headers={"Accept": qu.PROTOBUF}, timeout=5)
    assert r.status_code == 200 and r.content == b""
    # 33: routing
    r = inq.s.post(inq.base, params={"_eos_": "true"})
    assert r.status_code == 200 and inq.length() == 0
    assert inq.attributes().get("meta.state") == "End"
    r = inq.s.put(inq.base, params={"_indexes_": "1", "_negative_": "true"},
                  data="_code_=Shutdown&_reason_=bye",
                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200
    root, root_sink = clients(svc_server, path="")
    r = sink.put(b"via api path")
    assert root_sink.get()[0]["data"] == b"via api path"
    assert RawQueue(svc_server.url + "/").attributes()["meta.name"] == "svc"


def test_dotted_names_and_unknown_services(start_server, tmp_path, queue_store, request):
    redis = request.getfixturevalue("redis_server") if queue_store == "redis" else None
    server = start_server(qu.empty_repo(tmp_path),
                          ["--queue-service=test_group.qservice",
                           "--queue-service=other"] + qu.queue_args(queue_store, redis))
    q = RawQueue(server.url + "/api/predict/test_group.qservice")
    assert q.put(b"x").text == "1"
    assert q.get()[0]["data"] == b"x"
    assert RawQueue(server.url + "/api/predict/nope").put(b"x").status_code == 404
    assert RawQueue(server.url + "/api/predict/nope/sink").put(b"x").status_code == 404
    # two services: / is no queue
    assert requests.post(server.url + "/", data=b"x").status_code == 404
