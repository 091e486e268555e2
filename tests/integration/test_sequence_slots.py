"""The sequence batcher's batch slots (Triton's sequence slots), watched
through the accumulator's BATCH_INDEX / BATCH_SIZE / INSTANCE /
NOT_READY_ROWS outputs: a sequence keeps its slot and instance, `direct`
batches fill empty slots with READY=false rows, sequences beyond the slots
wait in a backlog, minimum_slot_utilization, max_candidate_sequences."""

import concurrent.futures
import queue

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import sequence_models

FACTS = ["OUTPUT"] + sequence_models.BATCH_FACTS


@pytest.fixture(scope="module")
def slot_server(tmp_path_factory):
    import harness
    repo = sequence_models.write_slot_repo(tmp_path_factory.mktemp("slot_repo"))
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                  workdir=tmp_path_factory.mktemp("slot_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def http_inputs(value):
    return [sequence_models.accumulator_input(httpclient, value)]


def facts(result):
    return {n: int(result.as_numpy(n).reshape(-1)[0]) for n in FACTS}


def step(client, model, seq, value, start=False, end=False):
    outs = [httpclient.InferRequestedOutput(n) for n in FACTS]
    return facts(client.infer(model, http_inputs(value), outputs=outs, sequence_id=seq,
                              sequence_start=start, sequence_end=end))


def async_step(client, model, seq, value, start=False, end=False):
    outs = [httpclient.InferRequestedOutput(n) for n in FACTS]
    return client.async_infer(model, http_inputs(value), outputs=outs, sequence_id=seq,
                              sequence_start=start, sequence_end=end)


def wait_all(handles):
    return [facts(h.get_result(timeout=30)) for h in handles]


def test_sequences_keep_their_slot_and_instance_http(slot_server):
    """2 instances x 2 slots: slots go lowest row first, then lowest
    instance; every later step runs there, alone at its row, with the rows
    below it filled by READY=false requests."""
    c = httpclient.InferenceServerClient(slot_server.hostport, concurrency=4)
    where = {}
    for seq in (101, 102, 103, 104):
        f = step(c, "slots_direct", seq, seq - 100, start=True)
        where[seq] = (f["INSTANCE"], f["BATCH_INDEX"])
    assert where == {101: (0, 0), 102: (1, 0), 103: (0, 1), 104: (1, 1)}
    sums = {seq: seq - 100 for seq in where}
    for rnd in range(3):
        for seq in (103, 101, 104, 102):  # interleaved
            f = step(c, "slots_direct", seq, 10, end=rnd == 2)
            sums[seq] += 10
            assert f["OUTPUT"] == sums[seq]
            assert (f["INSTANCE"], f["BATCH_INDEX"]) == where[seq]
            # a lone request at row r: a batch of r+1 rows, r of them fillers
            assert f["BATCH_SIZE"] == where[seq][1] + 1
            assert f["NOT_READY_ROWS"] == where[seq][1]
    # concurrent steps of the two sequences of one instance share a batch
    # or run apart, but always at their own rows
    for seq in (105, 106, 107, 108):
        step(c, "slots_direct", seq, 1, start=True)
    handles = [async_step(c, "slots_direct", seq, 1, end=True) for seq in (105, 106, 107, 108)]
    got = wait_all(handles)
    assert [(f["INSTANCE"], f["BATCH_INDEX"]) for f in got] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert all(f["OUTPUT"] == 2 for f in got)
    for f in got:  # row 1 runs in a batch of 2, with row 0 or a filler
        assert f["BATCH_SIZE"] == 2 if f["BATCH_INDEX"] == 1 else f["BATCH_SIZE"] in (1, 2)
        assert f["NOT_READY_ROWS"] in (0, 1) and f["NOT_READY_ROWS"] < f["BATCH_SIZE"]
    c.close()


def test_sequences_keep_their_slot_and_instance_grpc(slot_server):
    g = grpcclient.InferenceServerClient(slot_server.grpc_url)

    def grpc_step(seq, value, start=False, end=False):
        inp = sequence_models.accumulator_input(grpcclient, value)
        outs = [grpcclient.InferRequestedOutput(n) for n in FACTS]
        return facts(g.infer("slots_direct", [inp], outputs=outs, sequence_id=seq,
                             sequence_start=start, sequence_end=end))

    a = grpc_step(201, 1, start=True)
    b = grpc_step(202, 2, start=True)
    cc = grpc_step(203, 3, start=True)
    assert [(f["INSTANCE"], f["BATCH_INDEX"]) for f in (a, b, cc)] == [(0, 0), (1, 0), (0, 1)]
    for i in range(4):
        f = grpc_step(203, 1, end=i == 3)
        assert (f["INSTANCE"], f["BATCH_INDEX"], f["BATCH_SIZE"], f["NOT_READY_ROWS"]) == \
            (0, 1, 2, 1)
        assert f["OUTPUT"] == 4 + i
        f = grpc_step(201, 1, end=i == 3)
        assert (f["INSTANCE"], f["BATCH_INDEX"], f["BATCH_SIZE"]) == (0, 0, 1)
        assert f["OUTPUT"] == 2 + i
    assert grpc_step(202, 5, end=True)["OUTPUT"] == 7
    g.close()


def test_more_sequences_than_slots_wait_in_the_backlog(slot_server):
    """One slot: a second sequence's START waits until the first ends, then
    takes the slot; many concurrent sequences all complete, in turn."""
    c = httpclient.InferenceServerClient(slot_server.hostport, concurrency=16)
    assert step(c, "slots_one", 1, 5, start=True)["OUTPUT"] == 5
    waiting = async_step(c, "slots_one", 2, 7, start=True)
    assert step(c, "slots_one", 1, 5)["OUTPUT"] == 10
    assert step(c, "slots_one", 1, 5, end=True)["OUTPUT"] == 15
    f = facts(waiting.get_result(timeout=30))
    assert (f["OUTPUT"], f["INSTANCE"], f["BATCH_INDEX"]) == (7, 0, 0)
    assert step(c, "slots_one", 2, 1, end=True)["OUTPUT"] == 8

    c.close()

    # 12 sequences of 3 steps each, all at once: each on a connection of
    # its own that sends its next step as soon as the previous one is
    # answered (a shared pool of connections could hold a sequence's next
    # step back, behind requests waiting for the slot, past the 300 ms
    # after which the slot's idle sequence is released).
    def run_sequence(seq):
        own = httpclient.InferenceServerClient(slot_server.hostport)
        try:
            return [step(own, "slots_one", seq, seq, start=True),
                    step(own, "slots_one", seq, 1),
                    step(own, "slots_one", seq, 1, end=True)]
        finally:
            own.close()

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        runs = list(pool.map(run_sequence, range(10, 22)))
    for seq, got in zip(range(10, 22), runs):
        assert [f["OUTPUT"] for f in got] == [seq, seq + 1, seq + 2]
        assert all(f["BATCH_SIZE"] == 1 for f in got)


def test_idle_slot_holder_is_released_for_the_backlog(slot_server):
    """A sequence that never ends holds the only slot until it has been
    idle for max_sequence_idle_microseconds (300 ms); the waiting sequence
    then runs, and the released one needs START again."""
    c = httpclient.InferenceServerClient(slot_server.hostport, concurrency=4)
    assert step(c, "slots_one", 31, 1, start=True)["OUTPUT"] == 1
    waiting = async_step(c, "slots_one", 32, 4, start=True, end=True)
    assert facts(waiting.get_result(timeout=30))["OUTPUT"] == 4
    with pytest.raises(Exception) as e:
        step(c, "slots_one", 31, 1)
    assert "must specify the START flag" in str(e.value)
    c.close()


def test_minimum_slot_utilization(slot_server):
    """A batch of 4 slots with utilization 0.5 and a 30 s delay: a lone
    request waits; the second ready one makes 2/4 and both run together
    (well before the delay: the waits below give up after 20 s)."""
    g = grpcclient.InferenceServerClient(slot_server.grpc_url)
    answers = queue.Queue()

    def send(seq, value, start=False, end=False):
        inp = sequence_models.accumulator_input(grpcclient, value)
        outs = [grpcclient.InferRequestedOutput(n) for n in FACTS]
        g.async_infer("slots_util", [inp],
                      lambda result, error: answers.put((seq, result, error)),
                      outputs=outs, sequence_id=seq, sequence_start=start,
                      sequence_end=end)

    def collect(n):
        got = {}
        for _ in range(n):
            seq, result, error = answers.get(timeout=20)
            assert error is None, error
            got[seq] = facts(result)
        return got

    send(41, 1, start=True)
    assert answers.empty()  # 1/4 ready: it waits (for 30 s at most)
    send(42, 1, start=True)
    got = collect(2)
    assert [got[s]["BATCH_SIZE"] for s in (41, 42)] == [2, 2]
    assert sorted(got[s]["BATCH_INDEX"] for s in (41, 42)) == [0, 1]
    row = {s: got[s]["BATCH_INDEX"] for s in (41, 42)}

    send(41, 2, end=True)
    assert answers.empty()
    send(42, 3, end=True)
    got = collect(2)
    assert (got[41]["OUTPUT"], got[42]["OUTPUT"]) == (3, 4)
    for s in (41, 42):
        assert (got[s]["BATCH_SIZE"], got[s]["NOT_READY_ROWS"]) == (2, 0)
        assert got[s]["BATCH_INDEX"] == row[s]
    g.close()


def test_queue_delay_runs_a_batch_below_the_utilization(slot_server):
    c = httpclient.InferenceServerClient(slot_server.hostport)
    f = step(c, "slots_delay", 51, 6, start=True, end=True)
    assert (f["OUTPUT"], f["BATCH_SIZE"], f["NOT_READY_ROWS"]) == (6, 1, 0)
    c.close()


def test_max_candidate_sequences(slot_server):
    """oldest with max_candidate_sequences 1: one sequence at a time is a
    candidate for batching; the next one's START waits for its END."""
    c = httpclient.InferenceServerClient(slot_server.hostport, concurrency=4)
    assert step(c, "slots_oldest", 61, 1, start=True)["OUTPUT"] == 1
    waiting = async_step(c, "slots_oldest", 62, 10, start=True)
    assert step(c, "slots_oldest", 61, 1)["OUTPUT"] == 2
    assert step(c, "slots_oldest", 61, 1, end=True)["OUTPUT"] == 3
    f = facts(waiting.get_result(timeout=30))
    assert (f["OUTPUT"], f["BATCH_SIZE"]) == (10, 1)
    assert step(c, "slots_oldest", 62, 1, end=True)["OUTPUT"] == 11
    c.close()


def test_unload_fails_sequences_waiting_for_a_slot(start_server, tmp_path):
    """Sequences in the backlog when their model unloads get an error (the
    slot's holder never ends), and the server exits cleanly."""
    import harness
    from tritonclient.utils import InferenceServerException
    repo = tmp_path / "repo"
    harness.write_model(repo, "slots_held", sequence_models.accumulator_config(
        "slots_held", sequence_models.DIRECT, max_batch_size=1, batch_facts=True,
        idle_us=600000000))
    server = start_server(repo, ["--model-control-mode=explicit", "--load-model=slots_held"])
    c = httpclient.InferenceServerClient(server.hostport, concurrency=8)
    assert step(c, "slots_held", 1, 1, start=True)["OUTPUT"] == 1
    waiting = [async_step(c, "slots_held", seq, 1, start=True) for seq in (2, 3, 4)]
    c.unload_model("slots_held")
    for w in waiting:
        with pytest.raises(InferenceServerException) as e:
            w.get_result(timeout=30)
        assert "is not at ready state" in e.value.message()
    c.close()
