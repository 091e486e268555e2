"""Triton's logging extension, GET/POST /v2/logging (protocol reference §1,
qa/L0_logging's HTTP settings sequence), and that the settings change what
the server writes."""

import json
import re
import time

import pytest
import requests
import tritonclient.http as httpclient

import harness

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
    time.sleep(0.2)
    lines = server.log().splitlines()
    verbose = [l for l in lines if "HTTP request: GET /v2/health/ready" in l]
    assert verbose and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ V\] ", verbose[-1])
    client.update_log_settings({"log_info": False, "log_verbose_level": 0})
    client.unload_model("simple")
    client.load_model("simple")
    time.sleep(0.2)
    after = server.log().splitlines()[len(lines):]
    assert not any(" I] " in l for l in after), after
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
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I\] ", started[0])
