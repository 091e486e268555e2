"""Decoupled models (model_transaction_policy { decoupled: true }) end to
end: python models written as Triton's repeat and square examples send 0..n
responses and a final flag; tritonclient's gRPC stream and HTTP
/generate_stream get every response, non-streaming calls get Triton's
errors, a BLS model iterates exec(decoupled=True), and a client that closes
its stream mid-way cancels the request while the server goes on serving.
"""

import json
import queue
import shutil
import sys

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness
from test_python_backend import MODELS, python_flags, wait_for

SERVED = ["py_repeat", "py_square", "py_bls_square", "py_handoff", "simple"]


def ensemble_step(model, inputs, outputs):
    return ("    { model_name: \"%s\" model_version: -1\n" % model +
            "".join("      input_map { key: \"%s\" value: \"%s\" }\n" % kv
                    for kv in inputs.items()) +
            "".join("      output_map { key: \"%s\" value: \"%s\" }\n" % kv
                    for kv in outputs.items()) + "    }")


def ensemble_config(name, inputs, outputs, steps):
    def tensors(specs):
        return ",\n".join("  { name: \"%s\" data_type: TYPE_INT32 dims: [ %s ] }"
                          % (n, d) for n, d in specs)
    return ("name: \"%s\"\nplatform: \"ensemble\"\nmax_batch_size: 0\n" % name +
            "input [\n%s\n]\noutput [\n%s\n]\n" % (tensors(inputs), tensors(outputs)) +
            "ensemble_scheduling { step [\n%s\n] }\n" % ",\n".join(steps))


# py_square's responses each go through an identity step: one ensemble
# response per response of the decoupled step.
ENSEMBLES = {
    "ident_i32": harness.identity_config("ident_i32", "TYPE_INT32", [-1], max_batch_size=0),
    "ident2_i32": harness.identity_config("ident2_i32", "TYPE_INT32", [-1], n=2,
                                          max_batch_size=0),
    "ens_square": ensemble_config("ens_square", [("N", "1")], [("Y", "-1")], [
        ensemble_step("py_square", {"IN": "N"}, {"OUT": "sq"}),
        ensemble_step("ident_i32", {"INPUT0": "sq"}, {"OUTPUT0": "Y"})]),
    # A step reading the ensemble's input and a decoupled step's output:
    # their iterations never meet, and Triton refuses it.
    "ens_mixed": ensemble_config("ens_mixed", [("N", "1")], [("A", "-1"), ("B", "-1")], [
        ensemble_step("py_square", {"IN": "N"}, {"OUT": "sq"}),
        ensemble_step("ident2_i32", {"INPUT0": "N", "INPUT1": "sq"},
                      {"OUTPUT0": "A", "OUTPUT1": "B"})]),
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoupled-repo")
    for name in SERVED[:-1]:
        shutil.copytree(MODELS / name, repo / name)
    shutil.copytree(MODELS.parent.parent.parent / "models" / "simple", repo / "simple")
    for name, config in ENSEMBLES.items():
        harness.write_model(repo, name, config)
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit"] +
        [f"--load-model={m}" for m in SERVED + ["ens_square"]] + python_flags(),
        workdir=tmp_path_factory.mktemp("decoupled-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def grpc_input(name, array, dtype):
    i = grpcclient.InferInput(name, list(array.shape), dtype)
    i.set_data_from_numpy(array)
    return i


class Stream:
    """A tritonclient gRPC stream whose callback results land in a queue."""

    def __init__(self, srv):
        self.client = grpcclient.InferenceServerClient(srv.grpc_url)
        self.results = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, model, inputs, **kwargs):
        self.client.async_stream_infer(model, inputs, **kwargs)

    def next(self):
        return self.results.get(timeout=30 * harness.timeout_scale())

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def repeat_inputs(values, delay_ms=0):
    return [grpc_input("IN", np.array(values, np.int32), "INT32"),
            grpc_input("DELAY_MS", np.array([delay_ms], np.int32), "INT32")]


def square_input(n, make=grpc_input):
    return [make("IN", np.array([n], np.int32), "INT32")]


def final_flag(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def test_repeat_streams_every_response_then_an_empty_final_one(srv):
    stream = Stream(srv)
    try:
        stream.send("py_repeat", repeat_inputs([4, 7, 9]), request_id="r1",
                    enable_empty_final_response=True)
        got = []
        for _ in range(3):
            result, error = stream.next()
            assert error is None
            assert not final_flag(result)
            assert result.get_response().id == "r1"
            got.append((int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0])))
        assert got == [(4, 0), (7, 1), (9, 2)]
        result, error = stream.next()  # the final flag alone, as an empty response
        assert error is None and final_flag(result)
        response = result.get_response()
        assert (response.id, response.model_name, len(response.outputs)) == ("r1", "py_repeat", 0)
    finally:
        stream.close()


def test_square_final_flag_rides_on_the_last_response_and_zero_responses(srv):
    stream = Stream(srv)
    try:
        # 0 responses and no empty final response asked for: nothing comes
        # back for the first request; the second answers in order.
        stream.send("py_square", square_input(0), request_id="zero")
        stream.send("py_square", square_input(3), request_id="three")
        flags = []
        for _ in range(3):
            result, error = stream.next()
            assert error is None
            assert result.get_response().id == "three"
            assert int(result.as_numpy("OUT")[0]) == 3
            flags.append(final_flag(result))
        assert flags == [False, False, True]
        stream.send("py_square", square_input(0), request_id="zero-empty",
                    enable_empty_final_response=True)
        result, error = stream.next()
        assert error is None and final_flag(result)
        assert result.get_response().id == "zero-empty"
        assert stream.results.empty()
    finally:
        stream.close()


def test_error_response_is_in_band_and_the_stream_goes_on(srv):
    stream = Stream(srv)
    try:
        stream.send("py_square", square_input(-1), request_id="bad")
        result, error = stream.next()
        assert result is None
        assert "negative count -1" in error.message()
        stream.send("py_square", square_input(1), request_id="good")
        result, error = stream.next()
        assert error is None and int(result.as_numpy("OUT")[0]) == 1
    finally:
        stream.close()


def test_execute_must_return_none_and_sending_after_final_fails(srv):
    stream = Stream(srv)
    try:
        stream.send("py_square", square_input(-2))
        result, error = stream.next()
        assert result is None
        assert ("Python model 'py_square_0_0' is using the decoupled mode and the "
                "execute function must return None.") in error.message()
        stream.send("py_square", square_input(1000))
        result, error = stream.next()
        assert error is None and final_flag(result)
    finally:
        stream.close()
    wait_for(lambda: "py_square: Unable to send response. Response sender has been "
             "closed." in srv.log(), "the send-after-final error in the log")


def test_non_streaming_calls_get_tritons_errors(srv):
    http = httpclient.InferenceServerClient(srv.hostport)
    i = httpclient.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([2], np.int32))
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_square", [i])
    assert e.value.message() == ("HTTP end point doesn't support models with decoupled "
                                 "transaction policy")
    with pytest.raises(InferenceServerException) as e:
        grpcclient.InferenceServerClient(srv.grpc_url).infer("py_square", square_input(2))
    assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in \
        e.value.message()
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    # TF Serving's predict refuses it with the core's reason.
    r = requests.post(f"{srv.url}/v1/models/py_square:predict",
                      json={"inputs": {"IN": [2]}}, timeout=10)
    assert r.status_code >= 400
    assert "decoupled" in r.text


def test_generate_stream_sends_one_event_per_response(srv):
    url = f"{srv.url}/v2/models/py_square/generate_stream"
    r = requests.post(url, json={"IN": 3}, timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    events = [json.loads(line[len("data: "):]) for line in r.text.split("\n\n") if line]
    assert [e["OUT"] for e in events] == [3, 3, 3]
    assert all(e["model_name"] == "py_square" for e in events)
    r = requests.post(url, json={"IN": 0}, timeout=30)
    assert (r.status_code, r.text) == (200, "")
    r = requests.post(url, json={"IN": -1}, timeout=30)
    assert r.status_code == 500  # TritonError's default code: INTERNAL
    assert json.loads(r.text[len("data: "):])["error"].endswith("negative count -1")


def test_generate_needs_exactly_one_response(srv):
    url = f"{srv.url}/v2/models/py_square/generate"
    r = requests.post(url, json={"IN": 1}, timeout=30)
    assert r.status_code == 200 and r.json()["OUT"] == 1
    for n in (0, 2):
        r = requests.post(url, json={"IN": n}, timeout=30)
        assert r.status_code == 400
        assert r.json()["error"] == (
            "generate expects model to produce exactly 1 response, use generate stream "
            "for model that generates various number of responses")


def test_bls_iterates_a_decoupled_model(srv):
    http = httpclient.InferenceServerClient(srv.hostport)
    for n, count in ((4, 4), (0, 0), (1, 1)):
        i = httpclient.InferInput("IN", [1], "INT32")
        i.set_data_from_numpy(np.array([n], np.int32))
        result = http.infer("py_bls_square", [i])
        assert int(result.as_numpy("COUNT")[0]) == count
        assert int(result.as_numpy("SUM")[0]) == n * count
    i = httpclient.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([-1], np.int32))
    with pytest.raises(InferenceServerException) as e:
        http.infer("py_bls_square", [i])
    assert "negative count -1" in e.value.message()


def test_closing_the_stream_cancels_the_request_and_the_server_serves_on(srv):
    stream = Stream(srv)
    stream.send("py_repeat", repeat_inputs(list(range(1000)), delay_ms=5))
    result, error = stream.next()
    assert error is None and int(result.as_numpy("OUT")[0]) == 0
    stream.close(cancel=True)
    wait_for(lambda: "py_repeat: cancelled after" in srv.log(), "the model to see is_cancelled")
    # Both instances serve new streams afterwards.
    for _ in range(2):
        again = Stream(srv)
        try:
            again.send("py_repeat", repeat_inputs([5, 6]), enable_empty_final_response=True)
            values = [int(again.next()[0].as_numpy("OUT")[0]) for _ in range(2)]
            assert values == [5, 6]
            assert final_flag(again.next()[0])
        finally:
            again.close()


def handoff_inputs(pair, key, rounds=1):
    return [grpc_input(n, np.array([v], np.int32), "INT32")
            for n, v in (("PAIR", pair), ("KEY", key), ("ROUNDS", rounds))]


def test_an_instance_takes_the_next_request_while_earlier_ones_still_send(srv):
    # One instance: request 0's thread waits for request 1's execute, as
    # Triton's python backend allows (execute returned None, the sender
    # goes on). Before, the instance waited for request 0's final flag.
    stream = Stream(srv)
    try:
        stream.send("py_handoff", handoff_inputs(1, 0), request_id="first")
        stream.send("py_handoff", handoff_inputs(1, 1), request_id="second")
        got = []
        for _ in range(2):
            result, error = stream.next()
            assert error is None, error
            got.append((result.get_response().id, int(result.as_numpy("OUT")[0])))
        assert got == [("first", 0), ("second", 1)]
    finally:
        stream.close()


def test_streams_of_one_instance_interleave_their_responses(srv):
    a, b = Stream(srv), Stream(srv)
    try:
        a.send("py_handoff", handoff_inputs(2, 0, rounds=4))
        b.send("py_handoff", handoff_inputs(2, 1, rounds=4))
        # Each response of one stream waits for the other's previous one.
        for stream, values in ((a, [0, 2, 4, 6]), (b, [1, 3, 5, 7])):
            got = []
            for _ in values:
                result, error = stream.next()
                assert error is None, error
                got.append(int(result.as_numpy("OUT")[0]))
            assert got == values
    finally:
        a.close()
        b.close()


def test_a_stub_that_dies_ends_every_open_request_of_its_instance(srv):
    stream = Stream(srv)
    try:
        # The first stays open, waiting for a KEY 1 of pair 3 that never
        # comes; the second kills the stub (one stream: in that order).
        stream.send("py_handoff", handoff_inputs(3, 0), request_id="waiting")
        stream.send("py_handoff", handoff_inputs(3, 9), request_id="killer")
        for _ in range(2):
            _, error = stream.next()
            assert error is not None
            assert "Stub process 'py_handoff_0_0' is not healthy." in str(error)
        # A fresh stub serves the next pair.
        again = Stream(srv)
        try:
            again.send("py_handoff", handoff_inputs(4, 0))
            again.send("py_handoff", handoff_inputs(4, 1))
            assert sorted(int(again.next()[0].as_numpy("OUT")[0]) for _ in range(2)) == [0, 1]
        finally:
            again.close()
    finally:
        stream.close()


def test_statistics_count_each_request_once_at_its_final_flag(srv):
    def stats():
        r = requests.get(f"{srv.url}/v2/models/py_square/stats", timeout=10).json()
        return r["model_stats"][0]["inference_stats"]
    before = stats()
    stream = Stream(srv)
    try:
        stream.send("py_square", square_input(2))
        stream.send("py_square", square_input(-1))
        for _ in range(3):
            stream.next()
    finally:
        stream.close()
    wait_for(lambda: stats()["success"]["count"] == before["success"]["count"] + 1 and
             stats()["fail"]["count"] == before["fail"]["count"] + 1, "statistics")


def test_response_statistics_per_response_index_over_http_and_grpc(tmp_path):
    # A server of its own: the counts below are exact.
    shutil.copytree(MODELS / "py_square", tmp_path / "repo" / "py_square")
    server = harness.OspreyServer(tmp_path / "repo", python_flags(),
                                  workdir=tmp_path / "srv").start()
    try:
        stream = Stream(server)
        try:
            for n in (2, 0, -1):  # two responses; the flag alone; an error
                stream.send("py_square", square_input(n),
                            enable_empty_final_response=True)
            for _ in range(4):
                stream.next()
        finally:
            stream.close()
        r = requests.get(f"{server.url}/v2/models/py_square/stats", timeout=10)
        responses = r.json()["model_stats"][0]["response_stats"]
        assert list(responses) == ["0", "1"]
        assert list(responses["0"]) == ["compute_infer", "compute_output", "success",
                                        "fail", "empty_response", "cancel"]
        counts = {k: {s: v[s]["count"] for s in v} for k, v in responses.items()}
        assert counts == {
            "0": {"compute_infer": 2, "compute_output": 2, "success": 1, "fail": 1,
                  "empty_response": 1, "cancel": 0},
            "1": {"compute_infer": 1, "compute_output": 1, "success": 1, "fail": 0,
                  "empty_response": 0, "cancel": 0}}
        grpc = grpcclient.InferenceServerClient(server.grpc_url).get_inference_statistics(
            "py_square", as_json=True)
        got = grpc["model_stats"][0]["response_stats"]
        assert {k: int(v["success"]["count"]) for k, v in got.items()} == {"0": 1, "1": 1}
    finally:
        server.stop()
    assert not server.clean_exit_problems()


def test_an_ensemble_with_a_decoupled_step_answers_once_per_response(srv):
    config = requests.get(f"{srv.url}/v2/models/ens_square/config", timeout=10).json()
    assert config["model_transaction_policy"] == {"decoupled": True}  # as Triton sets it
    stream = Stream(srv)
    try:
        stream.send("ens_square", [grpc_input("N", np.array([3], np.int32), "INT32")],
                    request_id="e3")
        flags = []
        for _ in range(3):
            result, error = stream.next()
            assert error is None
            assert result.get_response().model_name == "ens_square"
            assert result.as_numpy("Y").tolist() == [3]
            flags.append(final_flag(result))
        assert flags == [False, False, True]
        stream.send("ens_square", [grpc_input("N", np.array([0], np.int32), "INT32")],
                    request_id="e0", enable_empty_final_response=True)
        result, error = stream.next()
        assert error is None and final_flag(result)
        assert result.get_response().id == "e0" and not result.get_response().outputs
        stream.send("ens_square", [grpc_input("N", np.array([-1], np.int32), "INT32")])
        result, error = stream.next()
        assert result is None
        assert "in ensemble 'ens_square', " in error.message()
        assert "negative count -1" in error.message()
    finally:
        stream.close()
    r = requests.post(f"{srv.url}/v2/models/ens_square/generate_stream", json={"N": 2},
                      timeout=30)
    assert [json.loads(e[len("data: "):])["Y"] for e in r.text.split("\n\n") if e] == [2, 2]
    r = requests.post(f"{srv.url}/v2/models/ens_square/infer", json={"inputs": [
        {"name": "N", "datatype": "INT32", "shape": [1], "data": [2]}]}, timeout=30)
    assert r.status_code == 501


def test_an_ensemble_mixing_iterations_of_decoupled_steps_is_refused(srv):
    r = requests.post(f"{srv.url}/v2/repository/models/ens_mixed/load", timeout=30)
    assert r.status_code == 400
    assert r.json()["error"] == (
        "load failed for model 'ens_mixed': in ensemble ens_mixed, step of model "
        "'ident2_i32' receives inputs originated from different decoupled models\n")


def test_generate_stream_events_leave_as_they_come_and_a_closed_connection_cancels(srv):
    before = srv.log().count("py_repeat: cancelled after")
    r = requests.post(f"{srv.url}/v2/models/py_repeat/generate_stream",
                      json={"IN": list(range(1000)), "DELAY_MS": 5}, stream=True,
                      timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    lines = r.iter_lines()
    first = next(line for line in lines if line)
    assert json.loads(first[len(b"data: "):])["OUT"] == 0
    r.close()  # long before the model is done
    wait_for(lambda: srv.log().count("py_repeat: cancelled after") > before,
             "the model to see is_cancelled")
    r = requests.post(f"{srv.url}/v2/models/py_repeat/generate_stream",
                      json={"IN": [7, 8], "DELAY_MS": 0}, timeout=30)
    assert [json.loads(e[len("data: "):])["OUT"] for e in r.text.split("\n\n") if e] == [7, 8]


def test_a_client_that_never_reads_ends_its_stream_not_the_servers_memory(srv):
    import threading

    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="py_repeat", id="flood")
    for name, values, dtype in (("IN", np.arange(200000, dtype=np.int32), "INT32"),
                                ("DELAY_MS", np.array([0], np.int32), "INT32")):
        tensor = request.inputs.add(name=name, datatype=dtype)
        tensor.shape.extend(values.shape)
        request.raw_input_contents.append(values.tobytes())
    hold = threading.Event()

    def requests_then_wait():
        yield request
        hold.wait(60)  # not half-closed: the stream stays open

    before = srv.log().count("py_repeat: cancelled after")
    # Without BDP probing the client's flow-control window stays small.
    channel = grpc.insecure_channel(srv.grpc_url, options=[("grpc.http2.bdp_probe", 0)])
    try:
        responses = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
            requests_then_wait())
        # Nothing is read until the model has been told its client is
        # gone: its responses piled up past the stream's bound.
        wait_for(lambda: srv.log().count("py_repeat: cancelled after") > before,
                 "the flood to be cancelled")
        read = 0
        with pytest.raises(grpc.RpcError) as e:
            for _ in responses:
                read += 1
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert 0 < read < 200000
    finally:
        hold.set()
        channel.close()
