"""The queue service under crashes and hostile clients: kill -9 under load
and a restart on the same --queue-dir (every acknowledged operation is
there, indexes continue); malformed query values, unknown reserved keys,
bad protobuf bodies, oversized WebSocket frames, a flood of connections and
clients vanishing mid-watch (clear errors or clean drops, and the server
keeps serving)."""

import socket
import threading
import time

import pytest
import requests

import harness
import queue_util as qu
from queue_util import RawQueue


def test_kill_9_under_load_keeps_every_acknowledged_operation(start_server, tmp_path):
    qdir = tmp_path / "qdir"
    args = ["--queue-service=svc", f"--queue-dir={qdir}", "--queue-max-length=100000"]
    server = start_server(qu.empty_repo(tmp_path), args)
    base = server.url + "/api/predict/svc"
    acked_puts, acked_deletes, tried_deletes = {}, set(), set()
    stop = threading.Event()

    def putter(n):
        q = RawQueue(base, token="")
        i = 0
        while not stop.is_set():
            data = f"{n}-{i}".encode()
            try:
                r = q.put(data, timeout=5)
            except requests.RequestException:
                return
            if r.status_code == 200:
                acked_puts[int(r.text)] = data
            i += 1

    def deleter():
        q = RawQueue(base, token="")
        while not stop.is_set():
            done = [i for i in list(acked_puts)[:-5] if i % 3 == 0 and i not in acked_deletes]
            for i in done[:5]:
                tried_deletes.add(i)
                try:
                    r = q.delete([i], timeout=5) if i % 2 else q.commit([i], timeout=5)
                except requests.RequestException:
                    return
                if r.status_code == 200:
                    acked_deletes.add(i)
            time.sleep(0.01)

    threads = [threading.Thread(target=putter, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=deleter))
    for t in threads:
        t.start()
    # Killed once there is enough acknowledged work to judge, mid-flight.
    harness.wait_for(lambda: len(acked_puts) > 200 and len(acked_deletes) > 10,
                     "acknowledged puts and deletes under load", 60)
    server.kill()  # SIGKILL mid-flight
    server.returncode = -9  # expected: not a crash
    stop.set()
    for t in threads:
        t.join()
    assert len(acked_puts) > 50

    server = start_server(qu.empty_repo(tmp_path), args)
    q = RawQueue(server.url + "/api/predict/svc", token="")
    stored = {}
    index = 1
    while True:
        got = q.get(index=index, length=256)
        if not got:
            break
        for f in got:
            stored[f["index"]] = f["data"]
        index = got[-1]["index"] + 1
    for i, data in acked_puts.items():
        if i in acked_deletes:
            assert i not in stored, f"deleted item {i} came back"
        elif i not in tried_deletes:  # a delete in flight may have happened
            assert stored.get(i) == data, f"acknowledged item {i} lost"
    # nothing half there: every stored item is whole and was put
    for i, data in stored.items():
        assert data.split(b"-")[0] in (b"0", b"1", b"2", b"3")
    new = int(q.put(b"after").text)
    assert new > max(acked_puts), "indexes must continue after a restart"


@pytest.fixture
def svc(start_server, tmp_path):
    server = start_server(qu.empty_repo(tmp_path), ["--queue-service=svc"] + qu.queue_args("embedded"))
    return server, RawQueue(server.url + "/api/predict/svc")


def test_malformed_queries_get_clear_errors(svc):
    server, q = svc
    s, base = q.s, q.base
    cases = [
        ("GET", {"_timeout_": "5 parsecs"}, "_timeout_"),
        ("GET", {"_timeout_": "2h"}, "_timeout_"),
        ("GET", {"_length_": "-1"}, "_length_"),
        ("GET", {"_length_": "0"}, "_length_"),
        ("GET", {"_length_": "100000"}, "_length_"),
        ("GET", {"_index_": "abc"}, "_index_"),
        ("GET", {"_auto_delete_": "maybe"}, "_auto_delete_"),
        ("GET", {"_search_": "true"}, "_index_"),
        ("GET", {"_bogus_": "1"}, "_bogus_"),
        ("POST", {"_priority_": "high"}, "_priority_"),
        ("DELETE", {"_indexes_": "1,,2"}, "_indexes_"),
        ("DELETE", {"_indexes_": "0"}, "_indexes_"),
        ("DELETE", {"_trunc_": "true"}, "_index_"),
        ("DELETE", {}, "_indexes_"),
        ("PUT", {}, "_indexes_"),
        ("PUT", {"_indexes_": "1", "_negative_": "true"}, "_code_"),
        ("POST", {"": "x"}, "tag"),
        ("POST", {"k" * 200: "v"}, "tag"),
    ]
    for method, params, word in cases:
        r = s.request(method, base, params=params, data=b"x" if method in ("POST", "PUT") else None)
        assert r.status_code == 400, (method, params, r.status_code, r.text)
        assert word in r.text, (params, r.text)
    r = s.put(base, params={"_indexes_": "1", "_negative_": "true"},
              data="_code_=lower&_reason_=x")
    assert r.status_code == 400
    r = s.request("PATCH", base)
    assert r.status_code == 400
    r = s.get(base, params={"_watch_": "true"})
    assert r.status_code == 501
    many = {f"t{i}": "v" for i in range(40)}
    assert q.put(b"x", tags=many).status_code == 400
    # a protobuf body that is not a DataFrameProto is just data
    r = q.put(b"\x0a\xff\xff\xff\xff\x0f", headers={"Content-Type": qu.PROTOBUF})
    assert r.status_code == 200
    assert q.get(index=int(r.text))[0]["data"] == b"\x0a\xff\xff\xff\xff\x0f"
    assert q.length() == 1


def test_hostile_websocket_clients(svc):
    server, q = svc
    import websocket
    # a client frame over the limit: the server closes (1009), others go on
    w = q.watch(0, 1)
    w.ws.send_binary(b"x" * 200000)
    w.ws.settimeout(5)
    try:
        opcode, data = w.ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE
        assert int.from_bytes(data[:2], "big") == 1009
    except (websocket.WebSocketConnectionClosedException, ConnectionError):
        pass
    # bytes that are no WebSocket at all
    with socket.create_connection((server.host, server.port)) as s:
        key = "dGhlIHNhbXBsZSBub25jZQ=="
        s.sendall((f"GET /api/predict/svc?_watch_=true HTTP/1.1\r\nHost: x\r\n"
                   f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Authorization: {qu.TOKEN}\r\n\r\n").encode())
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 101")
        assert b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
        s.sendall(b"\x82\x05hello" + bytes(range(256)))  # unmasked, garbage
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
    # a bad handshake
    r = q.s.get(q.base, params={"_watch_": "true"},
                headers={"Upgrade": "websocket", "Connection": "Upgrade",
                         "Sec-WebSocket-Key": "short", "Sec-WebSocket-Version": "13"})
    assert r.status_code == 400
    # clients vanishing mid-watch, many at once, with items in flight
    for i in range(20):
        q.put(f"v{i}".encode())
    for i in range(20):
        w = RawQueue(q.base, uid=f"v{i}").watch(0, 3)
        w.next()
        w.drop()
    # a flood of connections that send nothing or half a request
    socks = []
    for i in range(200):
        try:
            s = socket.create_connection((server.host, server.port), timeout=2)
            s.sendall(b"GET /api/predict/svc?_attrs_=true HTTP/1.1\r\nHost")
            socks.append(s)
        except OSError:
            break
    assert q.length() == 20  # nothing lost: every item is still there
    for s in socks:
        s.close()
    # and the server keeps serving
    assert q.put(b"still here").status_code == 200
    w = RawQueue(q.base, uid="last").watch(0, 30)
    assert w.next() is not None
    w.drop()
    assert requests.get(server.url + "/v2/health/ready").status_code == 200


def test_servers_on_other_ports_share_a_working_directory(tmp_path):
    """The default embedded store is keyed by the HTTP port: two servers
    started from one working directory both start, each with its own
    store; an explicit --queue-dir stays one server's at a time."""
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    work = tmp_path / "work"
    servers = []
    try:
        for _ in range(2):
            port = qu.free_port()
            srv = harness.OspreyServer(repo, [f"--http-port={port}"], workdir=work)
            servers.append(srv.start())
            assert (work / f"osprey-queue-{port}" / "LOCK").exists()
            r = requests.post(f"{srv.url}/api/predict/simple", data=b"x", timeout=10)
            assert r.status_code == 200, r.text
        shared = ["--queue-dir=" + str(tmp_path / "one")]
        first = harness.OspreyServer(repo, shared, workdir=tmp_path / "a")
        servers.append(first.start())
        second = harness.OspreyServer(repo, shared, workdir=tmp_path / "b")
        assert second.run_to_exit() != 0
        assert "is locked" in second.stderr()
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.log_tail()


def test_a_damaged_record_mid_log_loses_only_itself(start_server, tmp_path):
    """A record damaged in the middle of the embedded store's log: the
    server starts, every intact item after it is there, the damaged
    bytes are moved aside and osprey_queue_store_lost_records counts it."""
    store = tmp_path / "store"
    args = ["--queue-service=svc", f"--queue-dir={store}"] + qu.queue_args("embedded")
    srv = start_server(qu.empty_repo(tmp_path), args)
    q = RawQueue(srv.url + "/api/predict/svc")
    for i in range(5):
        assert q.put(f"payload-{i}".encode()).status_code == 200
    assert srv.stop() == 0
    log = store / "queue.log"
    data = bytearray(log.read_bytes())
    at = data.index(b"payload-2")
    data[at] ^= 0x5A
    log.write_bytes(bytes(data))
    srv = start_server(qu.empty_repo(tmp_path), args)
    q = RawQueue(srv.url + "/api/predict/svc")
    items = q.get(length=10)
    assert [(f["index"], f["data"]) for f in items] == [
        (i + 1, f"payload-{i}".encode()) for i in (0, 1, 3, 4)]
    assert (store / "queue.log.damaged").exists()
    metrics = requests.get(srv.metrics_url + "/metrics", timeout=10).text
    assert "\nosprey_queue_store_lost_records 1\n" in metrics
    assert q.put(b"next").text == "6"


def test_a_full_disk_refuses_puts_with_507_and_the_store_recovers(start_server, tmp_path):
    """A put that finds no room on the disk is answered 507 and leaves no
    trace; what was acknowledged stays, and once space returns the same
    process takes puts again. The disk fills by a file size limit set on the
    running server (prlimit: writes past it fail with EFBIG, as ENOSPC on a
    full disk), so no root and no small file system are needed."""
    import resource
    store = tmp_path / "store"
    args = ["--queue-service=svc", f"--queue-dir={store}", "--queue-fsync=none"]
    srv = start_server(qu.empty_repo(tmp_path), args)
    q = RawQueue(srv.url + "/api/predict/svc", token="")
    item = [bytes([65 + i]) * 65536 for i in range(5)]
    for i in (0, 1):
        assert q.put(item[i]).status_code == 200
    log = store / "queue.log"
    records_end = log.stat().st_size  # --queue-fsync=none: no zeros ahead
    # The limit applies to every file the server writes: its own log files
    # must stay below it for the test to mean what it says.
    for out in ("stdout.log", "stderr.log"):
        assert (srv.workdir / out).stat().st_size < records_end // 2
    soft, hard = resource.prlimit(srv.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(srv.pid, resource.RLIMIT_FSIZE, (records_end + 100000, hard))
    try:
        assert q.put(item[2]).status_code == 200  # room for one more
        r = q.put(item[3])
        assert r.status_code == 507, r.text
        assert r.text.startswith("insufficient storage: the queue store's disk is full")
        assert str(store) not in r.text
        assert q.length() == 3
    finally:
        resource.prlimit(srv.pid, resource.RLIMIT_FSIZE, (soft, hard))
    r = q.put(item[4])
    assert r.status_code == 200, r.text
    assert "changes are refused until space returns" in srv.stderr()
    assert srv.stop() == 0
    srv = start_server(qu.empty_repo(tmp_path), args)
    q = RawQueue(srv.url + "/api/predict/svc", token="")
    got = q.get(length=10)
    assert [f["data"] for f in got] == [item[0], item[1], item[2], item[4]]
