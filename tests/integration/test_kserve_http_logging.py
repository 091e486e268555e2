"""Triton's logging extension, GET/POST /v2/logging (protocol reference §1,
qa/L0_logging's HTTP settings sequence), and that the settings change what
the server writes."""

import json
import re
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

# Triton's record formats (qa/L0_logging/log_format_test.py's default
# pattern, and the ISO8601 one a running Triton 2.51 writes).
DEFAULT_RECORD = re.compile(
    r"(?P<level>[EWI])(?P<month>\d{2})(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2}\.\d{6}) "
    r"(?P<pid>\d+) (?P<file>[\w\.]+):(?P<line>\d+)\] (?P<message>.*)$")
ISO8601_RECORD = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (?P<level>[EWI]) (?P<pid>\d+) "
    r"(?P<file>[\w\.]+):(?P<line>\d+)\] (?P<message>.*)$")

INITIAL = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
           "log_verbose_level": 0, "log_format": "default"}


@pytest.fixture
def server(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    return start_server(repo, ["--model-control-mode=explicit", "--load-model=*"])


def post(srv, body):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return requests.post(srv.url + "/v2/logging", data=data, timeout=10)


def test_initial_settings_and_extension(server):
    r = requests.get(server.url + "/v2/logging", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    assert r.text == json.dumps(INITIAL, separators=(",", ":"))
    assert "logging" in requests.get(server.url + "/v2", timeout=10).json()["extensions"]
    client = httpclient.InferenceServerClient(server.hostport)
    assert client.get_log_settings() == INITIAL


def test_update_sequence_like_l0_logging(server):
    client = httpclient.InferenceServerClient(server.hostport)
    r = post(server, dict(INITIAL, log_file="log_file.log"))
    assert r.status_code == 501
    assert r.json() == {"error": "log file location can not be updated through network protocol"}
    steps = [{"log_info": False}, {"log_warning": False}, {"log_error": False},
             {"log_verbose_level": 1}, {"log_format": "ISO8601"},
             {"log_info": True, "log_warning": True, "log_error": True,
              "log_verbose_level": 0, "log_format": "default"}]
    want = dict(INITIAL)
    for step in steps:
        want.update(step)
        assert client.update_log_settings(step) == want
        assert client.get_log_settings() == want


@pytest.mark.parametrize("body,status,message", [
    ({"log_format": "json"}, 503, "invalid argument for --log_format, got: json"),
    ({"log_info": "yes"}, 500, "attempt to access JSON non-boolean as boolean"),
    ({"log_verbose_level": -1}, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("", 500, "failed to parse the request JSON buffer: The document is empty. at 0"),
])
def test_bad_updates(server, body, status, message):
    r = post(server, body)
    assert r.status_code == status
    assert r.json() == {"error": message}


def test_a_failed_update_keeps_what_came_before_it(server):
    r = post(server, {"log_warning": False, "log_format": "bad"})
    assert r.status_code == 503
    settings = requests.get(server.url + "/v2/logging", timeout=10).json()
    assert settings["log_warning"] is False and settings["log_format"] == "default"


def test_nulls_change_nothing(server):
    r = post(server, {k: None for k in INITIAL})
    assert r.status_code == 200 and r.json() == INITIAL


def test_settings_change_the_log(server):
    client = httpclient.InferenceServerClient(server.hostport)
    client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    requests.get(server.url + "/v2/health/ready", timeout=10)
    harness.wait_for(lambda: "HTTP request: GET /v2/health/ready" in server.log(),
                     "the verbose line of the request")
    lines = server.log().splitlines()
    verbose = [l for l in lines if "HTTP request: GET /v2/health/ready" in l]
    assert verbose and ISO8601_RECORD.match(verbose[-1])
    assert ISO8601_RECORD.match(verbose[-1]).group("level") == "I"  # verbose reads I
    client.update_log_settings({"log_info": False, "log_verbose_level": 0})
    client.unload_model("simple")
    client.load_model("simple")
    # What the unload and load had to say is in the log once a marker logged
    # after them is (records are written in order): the error line of a
    # failed load (errors stay on).
    requests.post(server.url + "/v2/repository/models/no_such_model/load", timeout=10)
    harness.wait_for(lambda: "no_such_model" in server.log()[len("\n".join(lines)):],
                     "the marker's log line")
    after = [l for l in server.log().splitlines()[len(lines):] if "no_such_model" not in l]
    assert not [l for l in after if ISO8601_RECORD.match(l).group("level") == "I"
                and "/v2/logging" not in l], after
    # (the POST that turned verbose off was logged before it took effect)
    assert not [l for l in after if "HTTP request:" in l and "/v2/logging" not in l]


def test_command_line_flags(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    srv = start_server(repo, ["--log-warning=false", "--log-format=ISO8601",
                              "--log-verbose=2"])
    settings = requests.get(srv.url + "/v2/logging", timeout=10).json()
    assert settings == dict(INITIAL, log_warning=False, log_format="ISO8601",
                            log_verbose_level=2)
    started = [l for l in srv.log().splitlines() if "Started HTTPService" in l]
    assert ISO8601_RECORD.match(started[0]).group("level") == "I"


def test_records_as_triton_writes_them(start_server, tmp_path, monkeypatch):
    """Every record of a start and a stop parses as Triton's: level
    letter, UTC time, pid, file:line, and the message a JSON string
    (qa/L0_logging/log_format_test.py's checks; test_log.cc checks the
    escapes); every record on stderr, as a running Triton 2.51 writes."""
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    (repo / "simple" / "01").mkdir()  # a version folder Triton warns about
    srv = start_server(repo, ["--log-verbose=1"])
    assert srv.stop() == 0
    lines = srv.stderr().splitlines()
    assert lines and srv.stdout() == "Signal (15) received.\n"
    for line in lines:
        m = DEFAULT_RECORD.match(line)
        assert m, line
        assert int(m.group("pid")) == srv.proc.pid and m.group("file").endswith(".c")
        json.loads(m.group("message"))  # a JSON string: quotes escaped
    messages = [json.loads(DEFAULT_RECORD.match(l).group("message")) for l in lines]
    assert "ignore version directory '01' which contains leading zeros in its " \
        "directory name" in messages
    tail = messages[messages.index("Waiting for in-flight requests to complete."):]
    assert "All models are stopped, unloading models" in tail

    # unescaped when the environment says so, as Triton
    monkeypatch.setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "false")
    srv = start_server(repo, ["--log-format=ISO8601"])
    started = [l for l in srv.stderr().splitlines() if "Started HTTPService" in l]
    assert ISO8601_RECORD.match(started[0]).group("message").startswith(
        "Started HTTPService at ")


def test_long_option_prefixes_as_getopt_long(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    srv = start_server(repo, ["--log-warn=false", "--log-verb=1"])
    settings = requests.get(srv.url + "/v2/logging", timeout=10).json()
    assert settings["log_warning"] is False and settings["log_verbose_level"] == 1
    bad = harness.OspreyServer(repo, ["--log=1"], workdir=tmp_path / "bad")
    assert bad.run_to_exit() != 0
    assert "option '--log' is ambiguous; possibilities: '--log-verbose'" in bad.stderr()


@pytest.mark.parametrize("escape", ["1", "0"])
def test_failed_inference_is_logged_and_cannot_inject_records(
        start_server, tmp_path, monkeypatch, escape):
    """A request refused before it ran is logged (verbose) as Triton logs
    it, '[request id: <id>] Infer failed: <message>', over HTTP and gRPC.
    Escaped (the default), an input name carrying a newline and a forged
    record stays inside one record; unescaped, the forged record stands on
    its own line, as qa/L0_logging/log_format_test.py's injection cases
    expect of Triton."""
    monkeypatch.setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", escape)
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    srv = start_server(repo, ["--log-verbose=1"])
    forged = 'I0205 18:34:18.707423 1 file.cc:123] THIS ENTRY WAS INJECTED'
    x = np.zeros((1, 3), dtype=np.float32)
    http_in = httpclient.InferInput(f"\n{forged}\n{forged}", [1, 3], "FP32")
    http_in.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException):
        httpclient.InferenceServerClient(srv.hostport).infer(
            "simple", [http_in], request_id="r-http")
    grpc_in = grpcclient.InferInput("bad", [1, 3], "FP32")
    grpc_in.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException):
        grpcclient.InferenceServerClient(srv.grpc_url).infer(
            "simple", [grpc_in], request_id="r-grpc")
    harness.wait_for(lambda: "[request id: r-grpc] Infer failed: " in srv.log(),
                     what="the gRPC failure's log line")
    assert "[request id: r-http] Infer failed: " in srv.log()
    records = [l for l in srv.log().splitlines() if DEFAULT_RECORD.match(l)]
    assert (forged in records) == (escape == "0")
