"""The queue scenario list (PAI-EAS reference §6, steps 1-33) through the
real eas-prediction SDK (QueueClient), run by test_queue_sdk.py in a child
interpreter whose path starts with the SDK's own folder (.venv/eas-sdk,
with the protobuf 3.20.3 it pins). Prints "step N ok" per step; any failed
check raises, so the exit status says whether the whole list passed.

usage: queue_sdk_scenario.py HOST:PORT TOKEN MAX_PAYLOAD MAX_LENGTH

OSPREY_TIMEOUT_SCALE (set by test_queue_sdk.py from harness.timeout_scale())
stretches every wait for something that must happen; waits that check that
nothing happens stay short (a loaded machine only makes them weaker).
"""

import os
import queue
import sys
import threading
import time

import eas_prediction
from eas_prediction import QueueClient
from eas_prediction.exception import PredictException
import websocket

EP, TOKEN = sys.argv[1], sys.argv[2]
MAX_PAYLOAD, MAX_LENGTH = int(sys.argv[3]), int(sys.argv[4])
SCALE = float(os.environ.get("OSPREY_TIMEOUT_SCALE") or 1)


def ok(step):
    print(f"step {step} ok", flush=True)


def client(name="svc", token=TOKEN, uid=None, gid="eas", endpoint=EP):
    c = QueueClient(endpoint, name)
    c.set_token(token)
    c.init(uid=uid, gid=gid)
    return c


class Frames:
    """A watcher's frames with a timeout. Watcher.run() blocks in recv()
    and reconnects when its socket is closed under it, so frames are
    pulled one at a time, on demand, by a helper thread; close() while no
    pull is pending leaves the generator parked at its yield, as the SDK's
    own tests leave it (iterate, break, close)."""

    def __init__(self, watcher):
        self.watcher = watcher
        self.gen = watcher.run()
        self.want = threading.Semaphore(0)
        self.q = queue.Queue()
        self.pending = False
        self.closed = False
        self.error = None
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        while True:
            self.want.acquire()
            if self.closed:
                return
            try:
                self.q.put(next(self.gen))
            except Exception as e:  # noqa: BLE001 - reported to the test
                self.error = e
                self.q.put(None)
                return

    def next(self, timeout=5 * SCALE):
        if not self.pending:
            self.pending = True
            self.want.release()
        try:
            df = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        self.pending = False
        return df

    def close(self):
        # Watcher.run() reconnects whenever its socket fails, closed or
        # not: a pull still pending here would come back as a live consumer
        # of the same gid.uid that takes an item and never commits it (seen
        # under load as step 31's frame going to step 29's consumer). Its
        # reconnects go to a closed port instead.
        self.watcher.url = "ws://127.0.0.1:1/"
        self.closed = True
        self.want.release()
        self.watcher.close()


def length(c):
    return int(c.attributes()["stream.length"])


inq, sink = client(), client("svc/sink")
# 1
a = inq.attributes()
assert a["stream.length"] == "0" and "stream.lastEntry" not in a, a
assert all(isinstance(v, str) for v in a.values())
ok(1)
# 2, 3
puts = [inq.put(str(i).encode()) for i in range(10)]
idx = [p[0] for p in puts]
rids = [p[1] for p in puts]
assert idx == [str(i) for i in range(1, 11)], idx
assert len(set(rids)) == 10
ok(2)
ok(3)
# 4
a = inq.attributes()
assert a["stream.length"] == "10"
assert a["stream.firstEntry"] == idx[0] and a["stream.lastEntry"] == idx[9]
ok(4)
# 5, 6
got = inq.get(index=int(idx[3]), length=2, timeout="0s", auto_delete=False)
assert [df.index for df in got] == [4, 5] and got[0].data == b"3"
assert length(inq) == 10
ok(5)
ok(6)
# 7, 8
got = inq.get(request_id=rids[7], timeout="0s")
assert len(got) == 1 and got[0].data == b"7"
assert got[0].tags["requestId"] == rids[7]
assert length(inq) == 9
ok(7)
ok(8)
# 9
t0 = time.monotonic()
assert list(sink.get(timeout="0s")) == []
assert time.monotonic() - t0 < 1 * SCALE
ok(9)
# 10: the long poll is answered by the put 0.5 s in, not by its own end
# (3 s, or longer on a slow machine: the client's read timeout follows)
poll_s = 3 * SCALE
slow = client("svc/sink")
slow.set_timeout(int((poll_s + 5 * SCALE) * 1000))
t0 = time.monotonic()
threading.Timer(0.5, lambda: sink.put(b"late")).start()
got = slow.get(timeout=f"{poll_s:g}s")
took = time.monotonic() - t0
assert [df.data for df in got] == [b"late"], got
assert 0.5 <= took < poll_s - 0.5 * SCALE, took
ok(10)
# 11
assert inq.delete([int(idx[0]), int(idx[1])]) in ("OK", b"OK")
assert length(inq) == 7
ok(11)
# 12-15
w = Frames(inq.watch(0, 5, auto_commit=False))
frames = [w.next() for _ in range(5)]
assert [f.data for f in frames] == [b"2", b"3", b"4", b"5", b"6"], frames
assert w.next(timeout=1) is None
ok(12)
ok(13)
inq.commit(frames[0].index)
f = w.next()
assert f is not None and f.data == b"8"
ok(14)
inq.commit([x.index for x in frames[1:]] + [f.index])
w.close()
assert length(inq) == 1
ok(15)
# 16
inq.put(b"normal")
inq.put(b"urgent", tags={"_priority_": "1"})
got = inq.get(length=10, timeout="0s", auto_delete=False)
assert got[0].data == b"urgent"
ok(16)
# 17
inq.truncate(int(inq.attributes()["stream.lastEntry"]) + 1)
assert length(inq) == 0
ok(17)
# 18: a worker outside Osprey (simulated by a get) answers through the sink
_, rid = inq.put(b"[{}]")
job = inq.get(timeout="1s")[0]
sink.put(b"result of " + job.data, tags={"requestId": job.tags["requestId"]})
got = sink.get(request_id=rid, timeout="1s")
assert got and got[0].data == b"result of [{}]" and got[0].tags["requestId"] == rid
ok(18)
# 19
for i in range(10):
    sink.put(str(i).encode())
w = Frames(sink.watch(0, 5, auto_commit=True))
assert all(w.next() is not None for _ in range(10))
w.close()
deadline = time.monotonic() + 5 * SCALE
while length(sink) != 0 and time.monotonic() < deadline:
    time.sleep(0.05)
assert length(sink) == 0
ok(19)
# 20
sink.put(b"x", tags={"foo": "x"})
sink.put(b"y", tags={"foo": "y"})
w = Frames(client("svc/sink").watch(0, 5, auto_commit=True, tags={"foo": "y"}))
f = w.next()
assert f.data == b"y" and w.next(timeout=0.5) is None
w.close()
sink.truncate(10**9)
ok(20)
# 21
try:
    client(token="wrong").put(b"x")
    raise AssertionError("a wrong token was accepted")
except PredictException as e:
    assert e.code == 401, e
assert length(inq) == 0
ok(21)
# 22
try:
    inq.put(b"x" * (MAX_PAYLOAD + 1))
    raise AssertionError("an oversized put was accepted")
except PredictException as e:
    assert e.code == 413, e
assert length(inq) == 0
ok(22)
# 23
for i in range(MAX_LENGTH):
    inq.put(b"i")
try:
    inq.put(b"one more")
    raise AssertionError("a put to a full queue was accepted")
except PredictException as e:
    assert e.code == 429, e
assert length(inq) == MAX_LENGTH
inq.truncate(10**9)
ok(23)
# 24
inq.set_content_type("application/json")
index, rid = inq.put(b"{}")
assert inq.get(request_id=rid, timeout="0s")[0].data == b"{}"
ok(24)
# 25
inq.put(b"a")
second, _ = inq.put(b"b")
s = inq.search(int(second))
assert s["IsPending"] is False and s["WaitCount"] == 1, s
assert inq.search(10**6) == {}
inq.truncate(10**9)
ok(25)
# 26
try:
    next(client(token="nope").watch(0, 1).run())
    raise AssertionError("a watch with a bad token was accepted")
except websocket.WebSocketBadStatusException as e:
    assert e.status_code == 401
ok(26)
# 27
for i in range(4):
    inq.put(f"d{i}".encode())
w = Frames(inq.watch(0, 2))
got = sorted(w.next().index for _ in range(2))
w.watcher.queue.watch_sock.abort()  # the socket dies; run() reconnects
again = sorted(w.next(timeout=10 * SCALE).index for _ in range(2))
assert again == got, (again, got)
inq.commit(again)
inq.commit(again)
ok(27)
# 28: the SDK pings every 2 s; the watch stays up and only binary frames come
pings = []
sdk_ping = websocket.WebSocket.ping


def counting_ping(self, payload=""):
    pings.append(payload)
    return sdk_ping(self, payload)


websocket.WebSocket.ping = counting_ping  # the SDK's ping thread calls it
deadline = time.monotonic() + 10 * SCALE
while len(pings) < 2:  # two of the SDK's pings went out on this watch
    assert time.monotonic() < deadline, "the SDK sent no pings"
    time.sleep(0.05)
websocket.WebSocket.ping = sdk_ping
inq.put(b"after pings")
f = w.next()
assert f is not None and f.data in (b"d2", b"d3", b"after pings"), f
assert w.error is None
w.close()
inq.truncate(10**9)
ok(28)
# 29
ca, cb = client(uid="a"), client(uid="b")
wa, wb = Frames(ca.watch(0, 1)), Frames(cb.watch(0, 1))
for i in range(6):
    inq.put(f"g{i}".encode())
seen = {}
deadline = time.monotonic() + 10 * SCALE
while len(seen) < 6 and time.monotonic() < deadline:
    for who, c, w in (("a", ca, wa), ("b", cb, wb)):
        f = w.next(timeout=0.2)
        if f is not None:
            seen[f.index] = who
            c.commit(f.index)
assert len(seen) == 6 and set(seen.values()) == {"a", "b"}, seen
wa.close()
wb.close()
ok(29)
# 30
inq.put(b"fan")
w1 = Frames(client(gid="g1").watch(0, 5))
w2 = Frames(client(gid="g2").watch(0, 5))
assert w1.next().data == b"fan" and w2.next().data == b"fan"
w1.close()
w2.close()
inq.truncate(10**9)
ok(30)
# 31
inq.put(b"payload", tags={"k": "v"})
w = Frames(client().watch(0, 5, index_only=True))
f = w.next()
assert f.data == b"" and f.index > 0 and f.tags["k"] == "v"
w.close()
inq.truncate(10**9)
ok(31)
# 32: the default get (timeout 5s) against the default client timeout
# (5 s): the server answers first, so the SDK neither retries (a retry
# would take another 5 s) nor raises 502
t0 = time.monotonic()
assert list(sink.get()) == []
assert time.monotonic() - t0 < 9
ok(32)
# 33: / and /sink; the api paths map to the same queues
root = client("", endpoint=EP)
root.init(custom_url=f"http://{EP}")
root_sink = client("", endpoint=EP)
root_sink.init(custom_url=f"http://{EP}/sink")
sink.put(b"both ways")
assert root_sink.get(timeout="0s", auto_delete=False)[0].data == b"both ways"
assert root.attributes()["meta.name"] == "svc"
ok(33)
print("all steps ok", flush=True)
