"""The requests of a batch in Triton's python backend on Osprey: execute()
gets one pb_utils.InferenceRequest per request the dynamic batcher put in
the batch, each with its own tensors (its rows), request_id(),
correlation_id(), parameters() and requested_output_names(), and each
returned response answers its own request: its own output shapes, or an
error for that request alone. An exception, or a wrong number of
responses, fails every request of the batch with Triton's words. Driven
with tritonclient over HTTP and gRPC (tests/integration/python_models/
py_requests holds requests until 8 rows are queued: 4 requests).
"""

import json
import pathlib
import queue
import shutil
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

MODELS = pathlib.Path(__file__).parent / "python_models"
BATCH = 4  # requests per batch: 8 rows, the model's preferred_batch_size
OUTPUTS = ["OUT", "RANGE", "COUNT", "ID", "PARAMS", "CORR", "WANTED"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("py-req-repo")
    shutil.copytree(MODELS / "py_requests", repo / "py_requests")
    server = harness.OspreyServer(
        repo, ["--model-control-mode=explicit", "--load-model=py_requests",
               f"--backend-config=python,python-executable={sys.executable}"],
        workdir=tmp_path_factory.mktemp("py-req-srv")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def send_batch(srv, protocol, requests):
    """Sends the requests (dicts: rows, mode, and optional id, parameters,
    sequence_id, outputs) concurrently, so that the dynamic batcher puts
    them in one batch; returns per request (result, None) or (None,
    InferenceServerException), in order."""
    mod = httpclient if protocol == "http" else grpcclient
    def build(spec):
        rows = np.array(spec["rows"], dtype=np.int32)
        inputs = [mod.InferInput("IN", list(rows.shape), "INT32"),
                  mod.InferInput("MODE", [rows.shape[0], 1], "INT32")]
        inputs[0].set_data_from_numpy(rows)
        inputs[1].set_data_from_numpy(np.full((rows.shape[0], 1), spec.get("mode", 0),
                                              dtype=np.int32))
        outputs = [mod.InferRequestedOutput(n) for n in spec.get("outputs", [])] or None
        return dict(model_name="py_requests", inputs=inputs, outputs=outputs,
                    request_id=spec.get("id", ""), sequence_id=spec.get("sequence_id", 0),
                    parameters=spec.get("parameters"))
    if protocol == "http":
        client = httpclient.InferenceServerClient(srv.hostport, concurrency=len(requests))
        pending = [client.async_infer(**build(s)) for s in requests]
        answers = []
        for p in pending:
            try:
                answers.append((p.get_result(timeout=60), None))
            except InferenceServerException as e:
                answers.append((None, e))
        client.close()
        return answers
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    done = [queue.Queue() for _ in requests]
    for spec, q in zip(requests, done):
        client.async_infer(callback=lambda result, error, q=q: q.put((result, error)),
                           **build(spec))
    answers = [q.get(timeout=60) for q in done]
    client.close()
    return answers


def text(result, name):
    return result.as_numpy(name)[0][0].decode()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_request_of_a_batch_keeps_its_own_tensors_and_metadata(srv, protocol):
    # 1 + 3 + 2 + 2 rows: each request sees only its own.
    row_counts = [1, 3, 2, 2]
    specs = [{"rows": [[i + 1, 10 * i + k] for k in range(n)], "id": f"req-{i}",
              "parameters": {"n": i, "s": f"v{i}", "flag": i % 2 == 0, "x": i + 0.5}}
             for i, n in enumerate(row_counts)]
    answers = send_batch(srv, protocol, specs)
    for i, ((result, error), spec) in enumerate(zip(answers, specs)):
        assert error is None, error
        rows = np.array(spec["rows"], dtype=np.int32)
        assert result.as_numpy("COUNT").tolist() == [[BATCH]], \
            "the dynamic batcher sent the requests in one batch"
        assert result.as_numpy("OUT").tolist() == rows.tolist()
        # Its own output shape: RANGE has IN[0][0] elements.
        assert result.as_numpy("RANGE").tolist() == [list(range(rows[0][0]))]
        assert text(result, "ID") == f"req-{i}"
        assert json.loads(text(result, "PARAMS")) == spec["parameters"]
        assert text(result, "CORR") == "int:0"
        assert text(result, "WANTED") == ",".join(sorted(OUTPUTS))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_correlation_ids_and_requested_outputs_per_request(srv, protocol):
    specs = [{"rows": [[1, 0]] * 2, "sequence_id": 42},
             {"rows": [[2, 0]] * 2, "sequence_id": "corr-b"},
             {"rows": [[3, 0]] * 2, "outputs": ["CORR", "WANTED"]},
             {"rows": [[4, 0]] * 2, "parameters": {}}]
    answers = send_batch(srv, protocol, specs)
    assert all(error is None for _, error in answers), answers
    results = [result for result, _ in answers]
    assert [text(r, "CORR") for r in results] == ["int:42", "str:corr-b", "int:0", "int:0"]
    # sequence_id is the correlation id, not a parameter.
    assert json.loads(text(results[0], "PARAMS")) == {}
    assert text(results[2], "WANTED") == "CORR,WANTED"
    assert results[2].as_numpy("OUT") is None, "outputs it did not ask for stay out"
    assert results[3].as_numpy("COUNT").tolist() == [[BATCH]]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_error_response_fails_only_its_request(srv, protocol):
    specs = [{"rows": [[i + 1, 0]] * 2, "id": f"e{i}", "mode": 1 if i == 1 else 0}
             for i in range(BATCH)]
    answers = send_batch(srv, protocol, specs)
    for i, (result, error) in enumerate(answers):
        if i == 1:
            assert result is None
            assert error.message() == "request e1 refused"
            assert error.status() == ("400" if protocol == "http"
                                      else "StatusCode.INVALID_ARGUMENT")
        else:
            assert error is None, error
            assert result.as_numpy("COUNT").tolist() == [[BATCH]]
            assert result.as_numpy("RANGE").tolist() == [list(range(i + 1))]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_exception_fails_every_request_of_the_batch(srv, protocol):
    specs = [{"rows": [[1, 0]] * 2, "mode": 2 if i == 2 else 0} for i in range(BATCH)]
    for result, error in send_batch(srv, protocol, specs):
        assert result is None
        assert error.message().startswith(
            "Failed to process the request(s) for model 'py_requests_0_0', message: "
            "ValueError: MODE 2 fails the batch of 4\n\nAt:\n"), error.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_wrong_number_of_responses_fails_every_request(srv, protocol):
    specs = [{"rows": [[1, 0]] * 2, "mode": 3 if i == 0 else 0} for i in range(BATCH)]
    for result, error in send_batch(srv, protocol, specs):
        assert result is None
        assert error.message() == (
            "Failed to process the request(s) for model 'py_requests_0_0', message: "
            "Number of InferenceResponse objects do not match the number of "
            "InferenceRequest objects. InferenceRequest(s) size is:4, and "
            "InferenceResponse(s) size is:3\n")
