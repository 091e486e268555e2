"""--model-load-thread-count: the models of the repository load at once on
that many threads (Triton's default 4), with the same outcome as one at a
time: the same states and reasons, and each model's log lines in the same
order. Slow-loading models (the identity backend's load_delay_ms) show the
loads overlap."""

import re
import time

import requests

import harness

DELAY_MS = 1000
SLOW = [f"slow_{i}" for i in range(4)]
# the repository has a model that fails to load: keep serving the others
TOLERANT = ["--exit-on-error=false", "--strict-readiness=false"]


def slow_repo(root):
    repo = harness.make_repo(root, [])
    for name in SLOW:
        harness.write_model(repo, name, harness.identity_config(
            name, "TYPE_FP32", [-1],
            extra='parameters [ { key: "load_delay_ms" '
                  f'value: {{ string_value: "{DELAY_MS}" }} }} ]\n'))
    # one that fails, and one with two versions of which one fails
    harness.write_model(repo, "broken", harness.identity_config(
        "broken", "TYPE_FP32", [-1],
        extra='parameters [ { key: "load_delay_ms" value: { string_value: "x" } } ]\n'))
    harness.write_model(repo, "two_versions", harness.identity_config(
        "two_versions", "TYPE_FP32", [-1],
        extra="version_policy: { all { } }\n"), version=1)
    (repo / "two_versions" / "2").mkdir()
    return repo


def outcome(server):
    """The repository index and each model's log lines, in their order."""
    index = requests.post(server.url + "/v2/repository/index").json()
    per_model = {}
    for line in server.log().splitlines():
        m = re.search(r"'(slow_\d|broken|two_versions)'", line)
        if m:
            text = re.sub(r"^.*?\] ", "", line)  # drop the time stamp
            per_model.setdefault(m.group(1), []).append(text)
    return index, per_model


def timed_start(start_server, repo, threads):
    t0 = time.monotonic()
    server = start_server(repo, [f"--model-load-thread-count={threads}",
                                 *TOLERANT], wait="live")
    return server, time.monotonic() - t0


def test_models_load_in_parallel_with_the_same_outcome(start_server, tmp_path):
    repo = slow_repo(tmp_path / "repo")
    parallel, t_parallel = timed_start(start_server, repo, 4)
    serial, t_serial = timed_start(start_server, repo, 1)
    # four 1-second loads: about 1 s on 4 threads, at least 4 s on one
    assert t_serial >= 4 * DELAY_MS / 1000, t_serial
    assert t_parallel < 3 * DELAY_MS / 1000, t_parallel
    assert outcome(parallel) == outcome(serial)
    index, per_model = outcome(parallel)
    states = {(e["name"], e.get("version")): e["state"] for e in index}
    for name in SLOW:
        assert states[(name, "1")] == "READY"
    assert states[("broken", "1")] == "UNAVAILABLE"
    assert states[("two_versions", "1")] == "READY"
    for name in SLOW + ["broken", "two_versions"]:
        assert per_model[name], name
    # the served models answer
    for server in (parallel, serial):
        r = requests.post(server.url + "/v2/models/slow_3/infer", json={
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
                        "data": [1.5, 2.5]}]})
        assert r.json()["outputs"][0]["data"] == [1.5, 2.5]


def test_default_is_four_threads_and_zero_means_one(start_server, tmp_path):
    repo = slow_repo(tmp_path / "repo")
    t0 = time.monotonic()
    start_server(repo, TOLERANT, wait="live")
    t_default = time.monotonic() - t0
    assert t_default < 3 * DELAY_MS / 1000, t_default
    _, t_zero = timed_start(start_server, repo, 0)
    assert t_zero >= 4 * DELAY_MS / 1000, t_zero


def test_load_model_star_and_poll_mode_load_in_parallel(start_server, tmp_path):
    repo = slow_repo(tmp_path / "repo")
    t0 = time.monotonic()
    server = start_server(repo, ["--model-control-mode=explicit", "--load-model=*",
                                 *TOLERANT], wait="live")
    assert time.monotonic() - t0 < 3 * DELAY_MS / 1000
    assert requests.get(server.url + "/v2/models/slow_0/ready").status_code == 200
    t0 = time.monotonic()
    server = start_server(repo, ["--model-control-mode=poll",
                                 "--repository-poll-secs=1", *TOLERANT], wait="live")
    assert time.monotonic() - t0 < 3 * DELAY_MS / 1000
    # a poll reloads what changed, on the load threads too
    for name in SLOW:
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(cfg.read_text() + "\n# changed\n")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server.log().count("poll: loading 'slow_") == 4 and \
                server.log().count("successfully loaded 'slow_3'") == 2:
            break
        time.sleep(0.1)
    log = server.log()
    assert log.count("successfully loaded 'slow_3'") == 2, log
    assert requests.get(server.url + "/v2/models/slow_3/ready").status_code == 200
