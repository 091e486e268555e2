"""The sequence batcher (sequence_batching): correlation ids from every
KServe frontend, control inputs, implicit state, both strategies, the idle
limit and Triton's error texts, driven by tritonclient."""

import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import sequence_models


@pytest.fixture(scope="module")
def seq_server(tmp_path_factory):
    import harness
    repo = sequence_models.write_repo(tmp_path_factory.mktemp("seq_repo"))
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                  workdir=tmp_path_factory.mktemp("seq_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def http_step(client, model, seq_id, value, start=False, end=False,
              dtype=np.int32, batching=True, outputs=None):
    data = np.array([[value]] if batching else [value], dtype=dtype)
    inp = httpclient.InferInput("INPUT", list(data.shape),
                                "INT32" if dtype == np.int32 else "FP32")
    inp.set_data_from_numpy(data)
    outs = [httpclient.InferRequestedOutput(n) for n in (outputs or ["OUTPUT"])]
    return client.infer(model, [inp], outputs=outs, sequence_id=seq_id,
                        sequence_start=start, sequence_end=end)


def grpc_input(value):
    return sequence_models.accumulator_input(grpcclient, value)


def out(result, name="OUTPUT"):
    return result.as_numpy(name).reshape(-1)[0]


def test_running_sum_resets_on_start_http(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    assert out(http_step(c, "seq_oldest", 11, 5, start=True)) == 5
    assert out(http_step(c, "seq_oldest", 11, 7)) == 12
    assert out(http_step(c, "seq_oldest", 11, 1, end=True)) == 13
    # the same id starts afresh
    assert out(http_step(c, "seq_oldest", 11, 3, start=True)) == 3
    assert out(http_step(c, "seq_oldest", 11, 3, end=True)) == 6


def test_control_inputs_as_the_model_sees_them(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    names = ["OUTPUT", "START_OUT", "END_OUT", "READY_OUT", "CORRID_OUT"]
    first = http_step(c, "seq_oldest", 12345678901, 1, start=True, outputs=names)
    middle = http_step(c, "seq_oldest", 12345678901, 1, outputs=names)
    last = http_step(c, "seq_oldest", 12345678901, 1, end=True, outputs=names)
    assert [out(first, n) for n in names[1:]] == [1, 0.0, True, 12345678901]
    assert [out(middle, n) for n in names[1:]] == [0, 0.0, True, 12345678901]
    assert [out(last, n) for n in names[1:]] == [0, 1.0, True, 12345678901]
    assert first.as_numpy("END_OUT").dtype == np.float32
    assert first.as_numpy("CORRID_OUT").dtype == np.uint64


def test_string_correlation_ids(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    r = http_step(c, "seq_direct", "alpha", 2, start=True, outputs=["OUTPUT", "CORRID_OUT"])
    assert out(r) == 2 and out(r, "CORRID_OUT") == b"alpha"
    assert out(http_step(c, "seq_direct", "beta", 10, start=True)) == 10
    assert out(http_step(c, "seq_direct", "alpha", 2, end=True)) == 4
    assert out(http_step(c, "seq_direct", "beta", 10, end=True)) == 20


def test_numeric_ids_on_a_string_corrid_and_back(seq_server):
    """A uint64 id on a TYPE_STRING CORRID arrives as its decimal text; a
    string id on a numeric CORRID is refused."""
    c = httpclient.InferenceServerClient(seq_server.hostport)
    r = http_step(c, "seq_direct", 77, 1, start=True, end=True,
                  outputs=["CORRID_OUT"])
    assert out(r, "CORRID_OUT") == b"77"
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "seq_oldest", "alpha", 1, start=True)
    assert "is a string but its CORRID control input is TYPE_UINT64" in e.value.message()


@pytest.mark.parametrize("model", ["seq_oldest", "seq_direct"])
def test_interleaved_sequences(seq_server, model):
    """Many sequences at once, each a thread of dependent steps: each sees
    only its own sum, whichever batches the steps shared."""
    c_ids = [f"s{i}" for i in range(12)] if model == "seq_direct" else list(range(100, 112))
    errors = []

    def run(cid, k):
        try:
            c = httpclient.InferenceServerClient(seq_server.hostport)
            total = 0
            for step in range(20):
                total += k + step
                got = out(http_step(c, model, cid, k + step, start=step == 0,
                                    end=step == 19))
                if got != total:
                    errors.append((cid, step, got, total))
        except Exception as e:  # reported below
            errors.append((cid, repr(e)))

    threads = [threading.Thread(target=run, args=(cid, k + 1)) for k, cid in enumerate(c_ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_state_across_1000_steps_nonbatching(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    total = 0.0
    for step in range(1000):
        total += 0.5
        r = http_step(c, "seq_nobatch", 99, 0.5, start=step == 0, end=step == 999,
                      dtype=np.float32, batching=False)
        assert out(r) == total
    assert total == 500.0


def test_initial_state_from_file(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    assert out(http_step(c, "seq_file", 5, 1, start=True)) == 101
    assert out(http_step(c, "seq_file", 5, 2, end=True)) == 103


def test_error_texts(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("seq_oldest", [inp])
    assert e.value.status() == "400"
    assert e.value.message() == ("inference request to model 'seq_oldest' must specify "
                                 "a non-zero or non-empty correlation ID")
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "seq_oldest", 424242, 1)
    assert e.value.status() == "400"
    assert e.value.message() == (
        "inference request for sequence 424242 to model 'seq_oldest' must specify the "
        "START flag on the first request of the sequence")
    # after END the sequence is gone
    http_step(c, "seq_oldest", 424243, 1, start=True, end=True)
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "seq_oldest", 424243, 1)
    assert "must specify the START flag" in e.value.message()
    # a request of batch size 2
    big = httpclient.InferInput("INPUT", [2, 1], "INT32")
    big.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("seq_oldest", [big], sequence_id=5, sequence_start=True)
    assert e.value.message() == ("inference request to model 'seq_oldest' must specify "
                                 "batch-size 1 due to requirements of sequence batcher")


def test_start_on_a_live_sequence_restarts_it(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    http_step(c, "seq_oldest", 31, 10, start=True)
    assert out(http_step(c, "seq_oldest", 31, 1, start=True)) == 1
    assert out(http_step(c, "seq_oldest", 31, 1, end=True)) == 2


def test_idle_sequence_is_released(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    http_step(c, "seq_idle", 8, 1, start=True)
    # max_sequence_idle_microseconds is 200 ms: wait until it has passed
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(InferenceServerException) as e:
        http_step(c, "seq_idle", 8, 1)
    assert e.value.message() == (
        "inference request for sequence 8 to model 'seq_idle' must specify the "
        "START flag on the first request of the sequence")
    # a sequence that keeps sending within the limit lives on
    http_step(c, "seq_idle", 9, 1, start=True)
    for i in range(5):
        assert out(http_step(c, "seq_idle", 9, 1)) == i + 2


def test_grpc_and_grpc_streaming(seq_server):
    c = grpcclient.InferenceServerClient(seq_server.grpc_url)
    r = c.infer("seq_oldest", [grpc_input(4)], sequence_id=501, sequence_start=True)
    assert out(r) == 4
    r = c.infer("seq_oldest", [grpc_input(4)], sequence_id=501, sequence_end=True)
    assert out(r) == 8

    results, done = [], threading.Event()

    def callback(result, error):
        results.append(error if error else out(result))
        if len(results) == 8:
            done.set()

    c.start_stream(callback=callback)
    # two sequences interleaved on one stream, one with a string id
    for step in range(4):
        for cid in (601, "six-o-two"):
            c.async_stream_infer("seq_direct" if isinstance(cid, str) else "seq_oldest",
                                 [grpc_input(step + 1)], sequence_id=cid,
                                 sequence_start=step == 0, sequence_end=step == 3)
    assert done.wait(30)
    c.stop_stream()
    assert sorted(results) == sorted([1, 1, 3, 3, 6, 6, 10, 10])


def test_grpc_stream_error_for_unstarted_sequence(seq_server):
    c = grpcclient.InferenceServerClient(seq_server.grpc_url)
    got, done = [], threading.Event()
    c.start_stream(callback=lambda result, error: (got.append(error), done.set()))
    c.async_stream_infer("seq_oldest", [grpc_input(1)], sequence_id=777)
    assert done.wait(30)
    c.stop_stream()
    assert "must specify the START flag" in str(got[0])


def test_config_shows_sequence_batching(seq_server):
    c = httpclient.InferenceServerClient(seq_server.hostport)
    cfg = c.get_model_config("seq_oldest")
    sb = cfg["sequence_batching"]
    assert sb["oldest"] == {"max_candidate_sequences": 64, "preferred_batch_size": [4],
                            "max_queue_delay_microseconds": 2000,
                            "preserve_ordering": False}
    assert sb["max_sequence_idle_microseconds"] == 5000000
    start = sb["control_input"][0]
    assert start == {"name": "START", "control": [{
        "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1],
        "fp32_false_true": [], "bool_false_true": [], "data_type": "TYPE_INVALID"}]}
    assert sb["control_input"][3]["control"][0]["data_type"] == "TYPE_UINT64"
    assert sb["state"][0]["input_name"] == "INPUT_STATE"
    assert sb["state"][0]["dims"] == [1]


def test_grpc_config_shows_sequence_batching(seq_server):
    c = grpcclient.InferenceServerClient(seq_server.grpc_url)
    sb = c.get_model_config("seq_oldest", as_json=True)["config"]["sequence_batching"]
    assert sb["oldest"]["preferred_batch_size"] == [4]
    assert sb["max_sequence_idle_microseconds"] == "5000000"
    # protobuf's JSON leaves out enum values that are the default (START)
    kinds = [ci["control"][0].get("kind", "CONTROL_SEQUENCE_START")
             for ci in sb["control_input"]]
    assert kinds == ["CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END",
                     "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID"]
    assert sb["control_input"][1]["control"][0]["fp32_false_true"] == [0, 1]
    assert sb["control_input"][2]["control"][0]["bool_false_true"] == [False, True]
    assert sb["control_input"][3]["control"][0]["data_type"] == "TYPE_UINT64"
    assert sb["state"][0]["initial_state"][0]["zero_data"] is True
    direct = c.get_model_config("seq_file", as_json=True)["config"]["sequence_batching"]
    assert direct["direct"] == {}
    assert direct["state"][0]["initial_state"][0]["data_file"] == "hundred"


def test_unload_with_sequences_in_flight(start_server, tmp_path):
    """Requests queued behind their sequence's step when the model unloads
    all get an answer (a sum or an error), and the server exits cleanly."""
    import harness
    repo = tmp_path / "repo"
    harness.write_model(repo, "seq_slow", sequence_models.accumulator_config(
        "seq_slow", sequence_models.DIRECT, corrid=None, extra=(
            'parameters [ { key: "execute_delay_us" value: { string_value: "20000" } } ]\n')))
    server = start_server(repo, ["--model-control-mode=explicit", "--load-model=seq_slow"])
    c = httpclient.InferenceServerClient(server.hostport, concurrency=32)
    pending = []
    for cid in range(1, 9):
        for step in range(4):
            inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[1]], dtype=np.int32))
            pending.append(c.async_infer("seq_slow", [inp], sequence_id=cid,
                                         sequence_start=step == 0))
    # wait until the model has run something, so that steps are in flight
    deadline = time.monotonic() + 30
    while (c.get_inference_statistics("seq_slow")["model_stats"][0]["execution_count"] == 0
           and time.monotonic() < deadline):
        time.sleep(0.01)
    c.unload_model("seq_slow")
    answered = 0
    for p in pending:
        try:
            assert out(p.get_result()) in (1, 2, 3, 4)
        except InferenceServerException:
            pass
        answered += 1
    assert answered == 32
    c.close()


def test_full_sequence_table_refuses_new_sequences(seq_server):
    """4096 live sequences fill a model's table: the next START gets 503,
    and once one sequence ends a new one fits. The starts go down one gRPC
    stream, which keeps them quick."""
    g = grpcclient.InferenceServerClient(seq_server.grpc_url)
    answers, done = [], threading.Event()

    def callback(result, error):
        answers.append(error if error else out(result))
        if len(answers) == 4096:
            done.set()

    g.start_stream(callback=callback)
    one = grpcclient.InferInput("INPUT", [1], "INT32")
    one.set_data_from_numpy(np.array([1], dtype=np.int32))
    for i in range(1, 4097):
        g.async_stream_infer("seq_bounded", [one], sequence_id=i, sequence_start=True)
    assert done.wait(120)
    g.stop_stream()
    assert answers == [1] * 4096

    c = httpclient.InferenceServerClient(seq_server.hostport)
    inp = httpclient.InferInput("INPUT", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("seq_bounded", [inp], sequence_id=5000, sequence_start=True)
    assert e.value.status() == "503"
    assert e.value.message() == "the sequence table is full (4096 sequences in progress)"
    assert out(c.infer("seq_bounded", [inp], sequence_id=7, sequence_end=True)) == 2
    assert out(c.infer("seq_bounded", [inp], sequence_id=5000, sequence_start=True)) == 1


def test_queue_service_items_carry_sequences(start_server, tmp_path):
    """The queue service's worker runs each item as a KServe v2 request, so
    an item's `parameters.sequence_*` reach the sequence batcher too."""
    import json

    import queue_util as qu
    repo = sequence_models.write_repo(tmp_path / "repo")
    # one item at a time: the items' order is the sequence's order
    server = start_server(repo, ["--model-control-mode=none"] + qu.queue_args(
        "embedded", extra=["--queue-worker-window=1"]))
    inq = qu.RawQueue(server.url + "/api/predict/seq_direct")
    sink = qu.RawQueue(server.url + "/api/predict/seq_direct/sink")
    rids = []
    for step, value in enumerate((1, 2, 3)):
        body = {"parameters": {"sequence_id": "queued", "sequence_start": step == 0,
                               "sequence_end": step == 2},
                "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1],
                            "data": [value]}],
                "outputs": [{"name": "OUTPUT"}]}
        rids.append(inq.put(json.dumps(body).encode()).headers["X-Eas-Queueservice-Request-Id"])
    sums = []
    for rid in rids:
        deadline = time.monotonic() + 30
        got = []
        while not got and time.monotonic() < deadline:
            got = sink.get(request_id=rid, timeout="2s", auto_delete=False)
        assert got, f"no sink item for {rid}"
        sums.append(json.loads(got[0]["data"])["outputs"][0]["data"][0])
    assert sums == [1, 3, 6]


def test_tfserving_predict_has_no_correlation_id(seq_server):
    """TF Serving's REST API cannot name a sequence: 400 with Triton's text."""
    import requests
    r = requests.post(seq_server.url + "/v1/models/seq_direct:predict",
                      json={"instances": [[1]]})
    assert r.status_code == 400
    assert r.json() == {"error": "inference request to model 'seq_direct' must specify "
                                 "a non-zero or non-empty correlation ID"}
