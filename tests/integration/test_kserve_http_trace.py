"""Triton's trace extension over HTTP (protocol reference §4 and the
qa/L0_trace notes of §7): the settings walk-through of
qa/L0_trace/trace_endpoint_test.py with tritonclient.http, the exact error
messages, and the trace files the server writes (records, stamps, indexed
files, counts, tensor captures, valid JSON after SIGTERM), plus Osprey's
--trace-file-directory for setting trace_file over the API."""

import json
import pathlib
import signal

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

INITIAL = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "global_unittest.log",
    "trace_mode": "triton",
}

# Every stage a successful HTTP inference stamps, in file order.
STAGES = [
    "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START",
    "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE", "REQUEST_END", "HTTP_SEND_START", "HTTP_SEND_END",
]

CLEAR = {"trace_level": None, "trace_rate": None, "trace_count": None,
         "log_frequency": None}


# ---- helpers -------------------------------------------------------------------


def qa_trace_args(trace_file="global_unittest.log", level="TIMESTAMPS", rate="1"):
    """The flags L0_trace starts Triton with."""
    return [f"--trace-config=triton,file={trace_file}",
            f"--trace-config=level={level}", f"--trace-config=rate={rate}"]


def simple_infer(client, request_id="", a=None, b=None):
    a = np.arange(16, dtype=np.int32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), dtype=np.int32) if b is None else b
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs, request_id=request_id)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    return result


def run_simple(srv, n, **kw):
    with httpclient.InferenceServerClient(srv.hostport) as c:
        for i in range(n):
            simple_infer(c, **kw)


def load_trace_file(path):
    """The records of a trace file, which must be valid JSON."""
    text = pathlib.Path(path).read_text()
    records = json.loads(text)
    assert isinstance(records, list)
    assert " " not in text  # compact records
    return records


def group(records):
    """{trace id: [records in file order]}"""
    traces = {}
    for r in records:
        traces.setdefault(r["id"], []).append(r)
    return traces


def stamps(trace):
    return [(r["timestamps"][0]["name"], r["timestamps"][0]["ns"])
            for r in trace if "timestamps" in r]


def check_complete_trace(trace, request_id=None):
    """Every stage once, in order, with non-decreasing times, and the model
    record right before REQUEST_START."""
    st = stamps(trace)
    assert [name for name, _ in st] == STAGES
    times = [ns for _, ns in st]
    assert times == sorted(times), st
    assert all(ns > 0 for ns in times)
    models = [r for r in trace if "model_name" in r]
    assert len(models) == 1
    m = models[0]
    assert m["model_name"] == "simple"
    assert m["model_version"] == 1
    if request_id:
        assert m["request_id"] == request_id
    else:
        assert "request_id" not in m
    at = trace.index(m)
    assert trace[at + 1]["timestamps"][0]["name"] == "REQUEST_START"


def check_simple_tensors(trace, a, b):
    """The trace of one `simple` request with inputs a, b captured every
    tensor at every stage (TENSORS level)."""
    got = {(r["activity"], r["tensor"]["name"]): r["tensor"]["data"]
           for r in trace if "activity" in r}
    flat = lambda x: ",".join(str(v) for v in x.flatten())  # noqa: E731
    assert got == {
        ("TENSOR_QUEUE_INPUT", "INPUT0"): flat(a),
        ("TENSOR_QUEUE_INPUT", "INPUT1"): flat(b),
        ("TENSOR_BACKEND_INPUT", "INPUT0"): flat(a),
        ("TENSOR_BACKEND_INPUT", "INPUT1"): flat(b),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"): flat(a + b),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"): flat(a - b),
    }


def stop_clean(srv):
    assert srv.stop() == 0, srv.log_tail()
    assert srv.clean_exit_problems() == []


def post(srv, path, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(srv.url + path, data=data, timeout=30, **kw)


# ---- the settings API (trace_endpoint_test.py) -----------------------------------------------


@pytest.fixture(scope="module")
def trace_server(tmp_path_factory):
    repo = harness.make_repo(tmp_path_factory.mktemp("trace_repo"),
                             ["simple", "onnx_zero_1_float32"])
    # A model in the repository that is never loaded.
    harness.write_model(repo, "never_loaded",
                        harness.identity_config("never_loaded", "TYPE_FP32", [-1]))
    srv = harness.OspreyServer(
        repo, ["--model-control-mode=explicit", "--load-model=simple",
               "--load-model=onnx_zero_1_float32"] + qa_trace_args(),
        workdir=tmp_path_factory.mktemp("trace_srv")).start()
    yield srv
    stop_clean(srv)


@pytest.fixture
def tclient(trace_server):
    """tritonclient.http, with trace_endpoint_test.py's tearDown."""
    with httpclient.InferenceServerClient(trace_server.hostport) as c:
        yield c
        c.update_trace_settings(model_name="simple", settings=CLEAR)
        c.update_trace_settings(model_name=None, settings=CLEAR)


def test_http_get_settings(tclient):
    # qa/L0_trace/trace_endpoint_test.py TraceEndpointTest.test_http_get_settings
    assert tclient.get_trace_settings(model_name="simple") == INITIAL
    assert tclient.get_trace_settings() == INITIAL
    with pytest.raises(InferenceServerException) as e:
        tclient.get_trace_settings(model_name="does-not-exist")
    assert "Request for unknown model : does-not-exist" in e.value.message()
    assert e.value.status() == "400"


def test_http_update_settings(tclient):
    # qa/L0_trace/trace_endpoint_test.py TraceEndpointTest.test_http_update_settings
    # (levels asked in the other order too; see test_upstream_sequences_verbatim)
    with pytest.raises(InferenceServerException) as e:
        tclient.update_trace_settings(model_name="simple",
                                      settings={"trace_file": "model.log"})
    assert e.value.message() == ("trace file location can not be updated "
                                 "through network protocol")
    assert e.value.status() == "501"
    assert tclient.get_trace_settings(model_name="simple") == INITIAL

    expected = dict(INITIAL, trace_level=["TIMESTAMPS", "TENSORS"])
    # Whatever the order asked, TIMESTAMPS comes first.
    assert tclient.update_trace_settings(
        settings={"trace_level": ["TENSORS", "TIMESTAMPS"]}) == expected
    assert tclient.get_trace_settings(model_name="simple") == expected
    with pytest.raises(InferenceServerException) as e:
        tclient.update_trace_settings(model_name="does-not-exist",
                                      settings={"trace_rate": "2"})
    assert "Request for unknown model : does-not-exist" in e.value.message()


def test_http_clear_settings(tclient):
    # qa/L0_trace/trace_endpoint_test.py TraceEndpointTest.test_http_clear_settings,
    # with the model's view checked at every step
    tclient.update_trace_settings(model_name="simple",
                                  settings={"trace_rate": "12", "log_frequency": "34"})
    tclient.update_trace_settings(settings={"trace_rate": "56", "trace_count": "78",
                                            "trace_level": ["OFF"]})
    assert tclient.get_trace_settings(model_name="simple") == dict(
        INITIAL, trace_level=["OFF"], trace_rate="12", trace_count="78",
        log_frequency="34")

    expected_global = dict(INITIAL, trace_level=["OFF"])
    assert tclient.update_trace_settings(
        settings={"trace_rate": None, "trace_count": None}) == expected_global
    assert tclient.get_trace_settings(model_name="simple") == dict(
        INITIAL, trace_level=["OFF"], trace_rate="12", log_frequency="34")
    assert tclient.update_trace_settings(
        model_name="simple", settings={"trace_rate": None, "trace_level": None}
    ) == dict(INITIAL, trace_level=["OFF"], log_frequency="34")
    # Everything of its own cleared: the model follows global again.
    tclient.update_trace_settings(model_name="simple",
                                  settings={"log_frequency": None})
    tclient.update_trace_settings(settings={"trace_rate": "3"})
    assert tclient.get_trace_settings(model_name="simple") == dict(
        INITIAL, trace_level=["OFF"], trace_rate="3")


def check_server_initial_state(client):
    """trace_endpoint_test.py's check_server_initial_state."""
    assert client.get_trace_settings(model_name="simple") == INITIAL
    assert client.get_trace_settings() == INITIAL


def test_upstream_sequences_verbatim(tclient):
    """qa/L0_trace/trace_endpoint_test.py's three HTTP cases in their own
    order of calls and with their own expected values, each from the
    initial state its tearDown restores."""
    # test_http_get_settings
    check_server_initial_state(tclient)
    # test_http_update_settings
    check_server_initial_state(tclient)
    with pytest.raises(InferenceServerException,
                       match="trace file location can not be updated through "
                             "network protocol"):
        tclient.update_trace_settings(model_name="simple",
                                      settings={"trace_file": "model.log"})
    assert tclient.get_trace_settings(model_name="simple") == INITIAL
    both = dict(INITIAL, trace_level=["TIMESTAMPS", "TENSORS"])
    assert tclient.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS", "TENSORS"]}) == both
    assert tclient.get_trace_settings(model_name="simple") == both
    with pytest.raises(InferenceServerException,
                       match="Request for unknown model : does-not-exist"):
        tclient.update_trace_settings(model_name="does-not-exist",
                                      settings={"trace_file": "model.log"})
    for clear_model in ("simple", None):  # tearDown
        tclient.update_trace_settings(model_name=clear_model, settings=CLEAR)
    # test_http_clear_settings
    check_server_initial_state(tclient)
    tclient.update_trace_settings(model_name="simple",
                                  settings={"trace_rate": "12", "log_frequency": "34"})
    tclient.update_trace_settings(settings={"trace_rate": "56", "trace_count": "78",
                                            "trace_level": ["OFF"]})
    expected_global = dict(INITIAL, trace_level=["OFF"])
    assert tclient.update_trace_settings(
        settings={"trace_rate": None, "trace_count": None}) == expected_global
    assert tclient.get_trace_settings(model_name="simple") == dict(
        INITIAL, trace_level=["OFF"], trace_rate="12", log_frequency="34")
    assert tclient.update_trace_settings(
        model_name="simple", settings={"trace_rate": None, "trace_level": None}
    ) == dict(INITIAL, trace_level=["OFF"], log_frequency="34")
    assert tclient.get_trace_settings() == expected_global


def test_http_model_settings_track_global(tclient):
    """The first model POST copies nothing: unspecified fields follow every
    later global update."""
    assert tclient.update_trace_settings(
        model_name="simple", settings={"log_frequency": "2"}) == dict(
            INITIAL, log_frequency="2")
    tclient.update_trace_settings(settings={"trace_rate": "7", "trace_count": "9"})
    assert tclient.get_trace_settings(model_name="simple") == dict(
        INITIAL, log_frequency="2", trace_rate="7", trace_count="9")
    assert tclient.get_trace_settings() == dict(INITIAL, trace_rate="7",
                                               trace_count="9")


@pytest.mark.parametrize("body,status,message", [
    (b"", 500, "failed to parse the request JSON buffer: The document is empty. at 0"),
    ({"trace_rate": 5}, 500, "attempt to access JSON non-string as string"),
    ({"trace_count": None, "log_frequency": 1}, 500,
     "attempt to access JSON non-string as string"),
    ({"trace_level": "TIMESTAMPS"}, 500, "attempt to access JSON non-array as array"),
    ({"trace_level": ["TIMESTAMPS", 3]}, 500,
     "attempt to access JSON non-string as string"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400,
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["TIMESTAMPS", "OFF"]}, 400,
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": "10000000000"}, 400,
     "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], "
     "got: 10000000000"),
    ({"trace_count": "10000000000"}, 400,
     "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], "
     "got: 10000000000"),
    ({"trace_count": "x"}, 400, "Unable to parse 'trace_count', got: x"),
    ({"trace_count": "-2"}, 400,
     "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"log_frequency": "10000000000"}, 400,
     "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], "
     "got: 10000000000"),
    ({"log_frequency": ""}, 400, "Unable to parse 'log_frequency', got: "),
    ({"trace_rate": "0"}, 400,
     "Attempting to set invalid trace setting :sample rate must be non-zero"),
    ({"trace_count": "0"}, 400, "Attempting to set invalid trace setting :"),
    ({"trace_file": None}, 501,
     "trace file location can not be updated through network protocol"),
    # trace_file is checked first, whatever else is wrong
    ({"trace_rate": "abc", "trace_file": "x.log"}, 501,
     "trace file location can not be updated through network protocol"),
])
@pytest.mark.parametrize("path", ["/v2/trace/setting", "/v2/models/simple/trace/setting"])
def test_update_errors(trace_server, tclient, path, body, status, message):
    r = post(trace_server, path, body)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.text == json.dumps({"error": message}, separators=(",", ":"))
    # nothing changed
    assert tclient.get_trace_settings(model_name="simple") == INITIAL
    assert tclient.get_trace_settings() == INITIAL


def test_update_quirks(trace_server, tclient):
    # {} or an object without known keys just returns the settings
    for body in ({}, {"unknown": 1}, {"trace_level": []},
                 {"trace_level": ["BOGUS"]}):
        r = post(trace_server, "/v2/trace/setting", body)
        assert r.status_code == 200, (body, r.text)
        assert r.json() == INITIAL
    # std::stoi: leading spaces, trailing junk, and a negative rate wraps
    r = post(trace_server, "/v2/trace/setting",
             {"trace_rate": " 12abc", "log_frequency": "+3"})
    assert r.json() == dict(INITIAL, trace_rate="12", log_frequency="3")
    r = post(trace_server, "/v2/trace/setting", {"trace_rate": "-5"})
    assert r.json()["trace_rate"] == "4294967291"
    # compact output, Content-Type on success
    assert r.headers["Content-Type"] == "application/json"
    assert " " not in r.text
    # level OFF makes an otherwise invalid setting acceptable
    r = post(trace_server, "/v2/trace/setting",
             {"trace_level": ["OFF"], "trace_rate": "0"})
    assert r.status_code == 200, r.text
    assert r.json() == dict(INITIAL, trace_level=["OFF"], trace_rate="0",
                            log_frequency="3")


def test_routes_and_methods(trace_server, tclient):
    base = trace_server.url
    for path in ("/v2/trace/setting", "/v2/models/simple/trace/setting"):
        r = requests.put(base + path, data="{}", timeout=10)
        assert r.status_code == 405
        assert r.text == '{"error":"Method Not Allowed"}'
        assert r.headers["Content-Type"] == "application/json"
        r = requests.get(base + path, timeout=10)
        assert r.status_code == 200
        assert r.headers["Content-Type"] == "application/json"
        assert r.text == json.dumps(INITIAL, separators=(",", ":"))
    for path in ("/v2/models/simple/versions/1/trace/setting", "/v2/trace/setting/",
                 "/v2/trace", "/v2/models/simple/trace"):
        r = requests.get(base + path, timeout=10)
        assert r.status_code == 404, path
        assert r.text == '{"error":"Not Found"}'
    assert "trace" in requests.get(base + "/v2", timeout=10).json()["extensions"]


def test_unavailable_models(trace_server, tclient):
    # in the repository but never loaded: not known to the core
    r = requests.get(trace_server.url + "/v2/models/never_loaded/trace/setting",
                     timeout=10)
    assert r.status_code != 200
    assert r.json()["error"] == "Request for unknown model : never_loaded"
    # unloaded: the core's error
    tclient.unload_model("onnx_zero_1_float32")
    try:
        for method in (requests.get, requests.post):
            r = method(trace_server.url + "/v2/models/onnx_zero_1_float32/trace/setting",
                       data="{}", timeout=10)
            assert r.status_code == 404, r.text
            assert r.json()["error"] == ("Request for unknown model: "
                                         "'onnx_zero_1_float32' has no available "
                                         "versions")
    finally:
        tclient.load_model("onnx_zero_1_float32")
    assert tclient.get_trace_settings(model_name="onnx_zero_1_float32") == INITIAL


# ---- trace files -----------------------------------------------------------------


@pytest.fixture
def simple_repo(tmp_path):
    return harness.make_repo(tmp_path / "repo", ["simple"])


def test_rate_1_traces_every_request(start_server, simple_repo, tmp_path):
    log = tmp_path / "rate1.log"
    srv = start_server(simple_repo, qa_trace_args(str(log)))
    with httpclient.InferenceServerClient(srv.hostport) as c:
        for i in range(10):
            simple_infer(c, request_id=f"req-{i}" if i % 2 else "")
    stop_clean(srv)
    traces = group(load_trace_file(log))
    assert len(traces) == 10
    ids = sorted(traces)
    assert ids == list(range(ids[0], ids[0] + 10))  # global, increasing
    for n, tid in enumerate(ids):
        check_complete_trace(traces[tid], f"req-{n}" if n % 2 else None)


def test_trace_level_switched_on_at_runtime(start_server, simple_repo, tmp_path):
    """L0_trace: start with level OFF, then POST TIMESTAMPS."""
    log = tmp_path / "switch.log"
    srv = start_server(simple_repo, qa_trace_args(str(log), level="OFF"))
    run_simple(srv, 3)
    r = post(srv, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})
    assert r.status_code == 200, r.text
    run_simple(srv, 20)
    stop_clean(srv)
    traces = group(load_trace_file(log))
    assert len(traces) == 20
    for t in traces.values():
        check_complete_trace(t)


def test_rate_and_log_frequency_rotation(start_server, simple_repo, tmp_path):
    """L0_trace: rate 6 with a model log_frequency of 2 gives <file>.0 with 2
    traces (written at once) and <file>.1 with the last one (at shutdown)."""
    log = tmp_path / "global_trace.log"
    srv = start_server(simple_repo, qa_trace_args(str(log), rate="6"))
    r = post(srv, "/v2/models/simple/trace/setting", {"log_frequency": "2"})
    assert r.json() == dict(INITIAL, trace_rate="6", log_frequency="2",
                            trace_file=str(log))
    run_simple(srv, 18)
    stop_clean(srv)
    zero = group(load_trace_file(f"{log}.0"))
    one = group(load_trace_file(f"{log}.1"))
    assert len(zero) == 2 and len(one) == 1
    for t in list(zero.values()) + list(one.values()):
        check_complete_trace(t)
    assert not log.exists()
    assert not pathlib.Path(f"{log}.2").exists()


def test_trace_count(start_server, simple_repo, tmp_path):
    """L0_trace: trace_count 5 gives <file>.0 holding 5 traces, and GET shows
    the count going down to 0."""
    log = tmp_path / "global_count.log"
    srv = start_server(simple_repo, qa_trace_args(str(log)))
    r = post(srv, "/v2/trace/setting", {"trace_count": "5"})
    assert r.json()["trace_count"] == "5"
    run_simple(srv, 2)
    assert requests.get(srv.url + "/v2/trace/setting").json()["trace_count"] == "3"
    run_simple(srv, 18)
    assert requests.get(srv.url + "/v2/trace/setting").json()["trace_count"] == "0"
    # Sampling stopped: an update keeping count 0 is invalid, as in Triton.
    r = post(srv, "/v2/trace/setting", {"trace_rate": "2"})
    assert r.status_code == 400
    assert r.json()["error"] == "Attempting to set invalid trace setting :"
    stop_clean(srv)
    traces = group(load_trace_file(f"{log}.0"))
    assert len(traces) == 5
    for t in traces.values():
        check_complete_trace(t)
    assert not log.exists()


def test_tensors_capture_values(start_server, simple_repo, tmp_path):
    log = tmp_path / "tensors.log"
    srv = start_server(simple_repo, qa_trace_args(str(log)) +
                       ["--trace-config=level=TENSORS"])
    assert requests.get(srv.url + "/v2/trace/setting").json()["trace_level"] == [
        "TIMESTAMPS", "TENSORS"]
    a = np.arange(100, 116, dtype=np.int32).reshape(1, 16)
    b = np.arange(16, dtype=np.int32).reshape(1, 16) * -3
    with httpclient.InferenceServerClient(srv.hostport) as c:
        simple_infer(c, request_id="t1", a=a, b=b)
    stop_clean(srv)
    traces = group(load_trace_file(log))
    assert len(traces) == 1
    trace = next(iter(traces.values()))
    check_complete_trace(trace, "t1")

    def joined(x):
        return ",".join(str(v) for v in x.flatten())

    tensors = [(r["activity"], r["tensor"]) for r in trace if "activity" in r]
    expected = [
        ("TENSOR_QUEUE_INPUT", "INPUT0", joined(a)),
        ("TENSOR_QUEUE_INPUT", "INPUT1", joined(b)),
        ("TENSOR_BACKEND_INPUT", "INPUT0", joined(a)),
        ("TENSOR_BACKEND_INPUT", "INPUT1", joined(b)),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0", joined(a + b)),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1", joined(a - b)),
    ]
    assert [(act, t["name"], t["data"]) for act, t in tensors] == expected
    for _, t in tensors:
        assert t["shape"] == "1,16"
        assert t["dtype"] == "INT32"
    # each kind right after the stage it belongs to
    names = [r["timestamps"][0]["name"] if "timestamps" in r else r.get("activity", "model")
             for r in trace]
    assert names.index("TENSOR_QUEUE_INPUT") == names.index("QUEUE_START") + 1
    assert names.index("TENSOR_BACKEND_INPUT") == names.index("COMPUTE_START") + 1
    assert names.index("TENSOR_BACKEND_OUTPUT") == names.index("COMPUTE_OUTPUT_START") + 1


def test_sigint_also_closes_the_file(start_server, simple_repo, tmp_path):
    log = tmp_path / "int.log"
    srv = start_server(simple_repo, qa_trace_args(str(log)))
    run_simple(srv, 3)
    assert srv.stop(sig=signal.SIGINT) == 0
    assert len(group(load_trace_file(log))) == 3


# ---- trace_file through the API: --trace-file-directory ----------------------------------------


def test_trace_file_directory(start_server, simple_repo, tmp_path):
    tdir = tmp_path / "traces"
    tdir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tdir / "escape.log").symlink_to(outside / "x.log")
    (tdir / "sub").mkdir()
    startup = tmp_path / "startup.log"
    srv = start_server(simple_repo, qa_trace_args(str(startup)) +
                       [f"--trace-file-directory={tdir}"])

    for name, why in [("../x", "no '/'"), ("/etc/x", "no '/'"), ("a/b", "no '/'"),
                      ("..", "not '.' or '..'"), ("", "a file name is required"),
                      ("escape.log", "symbolic link"),
                      ("sub", "not a regular file")]:
        r = post(srv, "/v2/trace/setting", {"trace_file": name})
        assert r.status_code == 400, (name, r.text)
        msg = r.json()["error"]
        assert msg.startswith(f"Unable to set 'trace_file' to '{name}': "), msg
        assert why in msg, msg
    r = post(srv, "/v2/trace/setting", {"trace_file": 5})
    assert r.status_code == 500
    r = post(srv, "/v2/models/simple/trace/setting", {"trace_file": "m.log"})
    assert r.status_code == 400
    assert "global setting" in r.json()["error"]
    # a model has no file of its own: clearing it there changes nothing
    r = post(srv, "/v2/models/simple/trace/setting", {"trace_file": None})
    assert r.status_code == 200, r.text
    assert r.json()["trace_file"] == str(startup)
    assert requests.get(srv.url + "/v2/trace/setting").json()["trace_file"] == str(startup)

    r = post(srv, "/v2/trace/setting", {"trace_file": "api.log", "log_frequency": "1"})
    assert r.status_code == 200, r.text
    assert r.json() == dict(INITIAL, trace_file="api.log", log_frequency="1")
    assert requests.get(srv.url + "/v2/models/simple/trace/setting").json()[
        "trace_file"] == "api.log"
    run_simple(srv, 2, request_id="first")
    # Setting trace_file restarts the index at 0.
    r = post(srv, "/v2/trace/setting", {"trace_file": "api.log"})
    assert r.status_code == 200, r.text
    run_simple(srv, 1, request_id="second")
    # A clear goes back to the startup file.
    r = post(srv, "/v2/trace/setting", {"trace_file": None, "log_frequency": None})
    assert r.json()["trace_file"] == str(startup)
    run_simple(srv, 1, request_id="third")
    stop_clean(srv)

    zero = load_trace_file(tdir / "api.log.0")
    one = load_trace_file(tdir / "api.log.1")
    assert [r["request_id"] for r in zero if "model_name" in r] == ["second"]
    assert [r["request_id"] for r in one if "model_name" in r] == ["first"]
    assert not (tdir / "api.log").exists()
    assert not (tdir / "api.log.2").exists()
    third = load_trace_file(startup)
    assert [r["request_id"] for r in third if "model_name" in r] == ["third"]
    assert list(outside.iterdir()) == []  # nothing written through the link
    assert sorted(p.name for p in tdir.iterdir()) == [
        "api.log.0", "api.log.1", "escape.log", "sub"]


def test_bad_trace_flags(tmp_path, simple_repo):
    for args, text in [
        (["--trace-config=rate=x"], "invalid rate"),
        (["--trace-config=level=MAX"], "invalid level"),
        (["--trace-config=mode=opentelemetry"], "opentelemetry"),
        (["--trace-config=colour=blue"], "unknown setting"),
        ([f"--trace-file-directory={tmp_path}/missing"], "not an accessible directory"),
    ]:
        srv = harness.OspreyServer(simple_repo, args, workdir=tmp_path / "bad")
        rc = srv.run_to_exit()
        assert rc != 0, args
        assert text in srv.log(), srv.log()


def test_batched_requests_capture_their_own_slices(start_server, tmp_path):
    """With the dynamic batcher, requests that ran in one batch carry the
    batch's compute stamps, and each one's TENSOR_BACKEND_INPUT/OUTPUT is its
    own part of the batch."""
    from concurrent.futures import ThreadPoolExecutor

    repo = tmp_path / "repo"
    ins = [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
    outs = [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]
    harness.write_model(repo, "simple", harness.model_config(
        "simple", "add_sub", ins, outs, 8,
        "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"))
    log = tmp_path / "batched.log"
    srv = start_server(repo, qa_trace_args(str(log)) +
                       ["--trace-config=level=TENSORS"])
    n = 6

    def one(i):
        a = np.full((1, 16), 100 * i, dtype=np.int32) + np.arange(16, dtype=np.int32)
        b = np.full((1, 16), i, dtype=np.int32)
        with httpclient.InferenceServerClient(srv.hostport) as c:
            simple_infer(c, request_id=f"r{i}", a=a, b=b)
        return a, b

    with ThreadPoolExecutor(n) as pool:
        sent = list(pool.map(one, range(n)))
    stop_clean(srv)
    traces = group(load_trace_file(log))
    assert len(traces) == n
    by_request = {}
    for t in traces.values():
        model = next(r for r in t if "model_name" in r)
        check_complete_trace(t, model["request_id"])
        by_request[model["request_id"]] = t
    compute = {}
    for i, (a, b) in enumerate(sent):
        t = by_request[f"r{i}"]
        check_simple_tensors(t, a, b)
        st = dict(stamps(t))
        key = tuple(st[s] for s in ("COMPUTE_START", "COMPUTE_INPUT_END",
                                    "COMPUTE_OUTPUT_START", "COMPUTE_END"))
        compute.setdefault(st["COMPUTE_START"], set()).add(key)
    # requests of one batch share all four compute stamps
    assert all(len(keys) == 1 for keys in compute.values())
