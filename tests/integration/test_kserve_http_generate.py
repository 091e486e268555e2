"""POST /v2/models/{m}[/versions/{v}]/generate and /generate_stream, Triton's
generate extension, on the QA models whose inputs fit it: `simple` (two
INT32 [16] inputs, lists) and `simple_identity` (BYTES, strings).

Mirrors Triton's qa/L0_http/generate_endpoint_test.py where its mock_llm
cases carry over to these models (test_generate, test_request_id,
test_generate_stream, test_missing_inputs, test_invalid_input_types,
test_duplicate_inputs, test_complex_schema, test_parameters), plus the
generate case of qa/L0_http/http_input_size_limit_test.py
(test_json_dtype_size_expansion_exceeds_limit_error) at a small limit.
The decoupled-model cases (many or zero responses, streaming timing) do not
apply: Osprey's backends answer once."""

import json

import pytest
import requests

import harness

SEQ = list(range(16))
ONES = [1] * 16
SUM = [x + 1 for x in SEQ]
DIFF = [x - 1 for x in SEQ]
SSE = "text/event-stream; charset=utf-8"


def url(srv, model, route, version=None):
    v = f"/versions/{version}" if version is not None else ""
    return f"{srv.url}/v2/models/{model}{v}/{route}"


def post(srv, model, body, route="generate", **kw):
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(url(srv, model, route), data=data, timeout=30, **kw)


def sse_events(r):
    """The `data:` payloads of a server-sent event stream, checking that
    every event is `data: ...` ended by a blank line."""
    text = r.text
    assert text.endswith("\n\n"), text
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: "), block
        events.append(json.loads(block[len("data: "):]))
    return events


def expect_failure(srv, model, body, msg, status=None):
    for route in ("generate", "generate_stream"):
        r = post(srv, model, body, route)
        assert r.headers["Content-Type"] == "application/json", (route, r.headers)
        assert not r.ok, (route, r.text)
        if status is not None:
            assert r.status_code == status, (route, r.text)
        assert msg in r.json()["error"], (route, r.text)


def test_generate(qa_server):
    r = post(qa_server, "simple", {"INPUT0": SEQ, "INPUT1": ONES})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    # Triton orders the members by name (a std::map): outputs first here.
    assert r.text == json.dumps({"OUTPUT0": SUM, "OUTPUT1": DIFF, "model_name": "simple",
                                 "model_version": "1"}, separators=(",", ":"))


def test_generate_with_version(qa_server):
    r = requests.post(url(qa_server, "simple", "generate", version=1),
                      json={"INPUT0": SEQ, "INPUT1": ONES}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT0"] == SUM


def test_generate_bytes_scalar_and_list(qa_server):
    text = "hello world"
    r = post(qa_server, "simple_identity", {"INPUT0": text})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["OUTPUT0"] == text  # one element: the bare value
    r = post(qa_server, "simple_identity", {"INPUT0": [text, "again"]})
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT0"] == [text, "again"]


def test_request_id(qa_server):
    r = post(qa_server, "simple_identity", {"id": "42", "INPUT0": "hello"})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "42"
    for body in ({"id": "", "INPUT0": "hello"}, {"INPUT0": "hello"}):
        r = post(qa_server, "simple_identity", body)
        assert r.status_code == 200, r.text
        assert "id" not in r.json()
    r = post(qa_server, "simple_identity", {"id": 42, "INPUT0": "hello"})
    assert not r.ok
    assert "Unable to parse 'id'" in r.json()["error"]


def test_generate_stream(qa_server):
    r = post(qa_server, "simple", {"INPUT0": SEQ, "INPUT1": ONES}, "generate_stream",
             headers={"Accept": "text/event-stream"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == SSE
    events = sse_events(r)
    assert events == [{"OUTPUT0": SUM, "OUTPUT1": DIFF, "model_name": "simple",
                       "model_version": "1"}]


def test_missing_inputs(qa_server):
    for body in ({}, {"abc": 123}):
        expect_failure(qa_server, "simple", body, "expected 2 inputs but got 0 inputs", 400)
    for body in ({"INPUT0": SEQ}, {"INPUT0": SEQ, "other": "param"}):
        expect_failure(qa_server, "simple", body, "expected 2 inputs but got 1 inputs", 400)


def test_invalid_input_types(qa_server):
    expect_failure(qa_server, "simple_identity", {"INPUT0": 123},
                   "attempt to access JSON non-string as string")
    expect_failure(qa_server, "simple", {"INPUT0": ["a"] * 16, "INPUT1": ONES},
                   "Unable to parse 'data'")
    expect_failure(qa_server, "simple", {"INPUT0": SEQ[:15], "INPUT1": ONES},
                   "The schema can not convert input 'INPUT0' to tensor with proper shape",
                   400)


def test_duplicate_inputs(qa_server):
    # Raw JSON text: a Python dict cannot repeat a key.
    body = json.dumps({"INPUT0": SEQ, "INPUT1": ONES})[:-1] + ', "INPUT0": ' + json.dumps(SEQ) + "}"
    expect_failure(qa_server, "simple", body, "input 'INPUT0' already exists in request", 400)


def test_complex_schema(qa_server):
    body = {"INPUT0": SEQ, "INPUT1": ONES,
            "PARAMS": {"PARAM_0": 0, "PARAM_1": True, "PARAM_2": 123.123}}
    expect_failure(qa_server, "simple", body, "parameter 'PARAMS' has invalid type", 400)
    expect_failure(qa_server, "simple_identity", {"INPUT0": {"USER": "hello"}},
                   "attempt to access JSON non-string as string")


def test_parameters(qa_server):
    # Scalars that are not inputs, at the top or under "parameters", are
    # request parameters.
    body = {"INPUT0": SEQ, "INPUT1": ONES, "flag": True, "n": 3, "x": 1.5, "s": "t",
            "parameters": {"REPETITION": 3}}
    r = post(qa_server, "simple", body)
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT0"] == SUM
    # An input may also come under "parameters".
    r = post(qa_server, "simple", {"INPUT0": SEQ, "parameters": {"INPUT1": ONES}})
    assert r.status_code == 200, r.text
    assert r.json()["OUTPUT1"] == DIFF
    expect_failure(qa_server, "simple", {"INPUT0": SEQ, "INPUT1": ONES, "parameters": 1},
                   "Expected JSON object for keyword: 'parameters'")
    expect_failure(qa_server, "simple",
                   {"INPUT0": SEQ, "INPUT1": ONES, "parameters": {"nested": {"twice": 1}}},
                   "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
                   400)


def test_not_json(qa_server):
    expect_failure(qa_server, "simple", "", "The document is empty.")
    expect_failure(qa_server, "simple", "{", "failed to parse the request JSON buffer")


def test_unknown_model_and_method(qa_server):
    r = post(qa_server, "no_such_model", {})
    assert r.status_code == 404, r.text
    r = requests.get(url(qa_server, "simple", "generate"), timeout=10)
    assert r.status_code == 405
    assert r.json() == {"error": "Method Not Allowed"}
    # The version must be digits to match the route at all.
    r = requests.post(f"{qa_server.url}/v2/models/simple/versions/x/generate", json={},
                      timeout=10)
    assert r.status_code == 404


def test_compressed_body_is_refused(qa_server):
    import gzip
    r = requests.post(url(qa_server, "simple", "generate"),
                      data=gzip.compress(json.dumps({"INPUT0": SEQ}).encode()),
                      headers={"Content-Encoding": "gzip"}, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "Unsupported content-encoding, only 'identity' is supported."}


def test_size_limits(start_server, tmp_path):
    """http_input_size_limit_test.py's generate case, at a 1 MiB limit: the
    JSON body is refused before routing matters, and an input whose
    expanded size passes the limit is refused by name."""
    limit = 1 << 20
    repo = harness.make_repo(tmp_path / "repo", ["simple", "simple_identity"])
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=*",
                              f"--http-max-input-size={limit}"])
    big = "A" * (limit + 16)
    for route in ("generate", "generate_stream"):
        r = post(srv, "simple_identity", {"INPUT0": big}, route)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert "request JSON size of " in err, err
        assert " bytes exceeds the maximum allowed input size of " in err, err
        assert "Use --http-max-input-size to increase the limit." in err, err
    # Under the body limit, over it once expanded: 4 bytes per INT32.
    n = limit // 4 + 16
    body = '{"INPUT0":[' + ",".join(["1"] * n) + "]}"
    assert len(body) <= limit
    r = post(srv, "simple", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == (
        f"request size of 0 bytes with input 'INPUT0' of size {4 * n} bytes exceeds the "
        f"maximum allowed input size of {limit}. Use --http-max-input-size to increase "
        "the limit.")


def test_restricted_inference_covers_generate(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=simple",
                              "--http-restricted-api=inference:infer-key=v"])
    for route in ("generate", "generate_stream"):
        r = post(srv, "simple", {"INPUT0": SEQ, "INPUT1": ONES}, route)
        assert r.status_code == 403, r.text
        assert r.json() == {"error": "This API is restricted, expecting header 'infer-key'"}
        r = post(srv, "simple", {"INPUT0": SEQ, "INPUT1": ONES}, route,
                 headers={"infer-key": "v"})
        assert r.status_code == 200, r.text
