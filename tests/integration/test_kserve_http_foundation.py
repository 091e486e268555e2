"""Issue 2: the server starts on the example repository, every example model
answers, digits_mlp is accurate through the server, broken models are
reported without taking the server down, explicit model control works, and
model names that would escape the repository are refused."""

import json
import os
import pathlib
import shutil
import signal
import struct
import threading
import time

import numpy as np
import pytest
import requests

import harness

EXAMPLES = ["simple", "simple_identity", "identity_fp32", "digits_mlp"]


def infer(url, model, payload, **kw):
    return requests.post(f"{url}/v2/models/{model}/infer", json=payload, timeout=60, **kw)


def index(url, body=None):
    r = requests.post(f"{url}/v2/repository/index",
                      data=json.dumps(body) if body is not None else b"", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def index_by_name(url):
    out = {}
    for e in index(url):
        out.setdefault(e["name"], []).append(e)
    return out


# ---- readiness and one inference per example model ----------------------------


def test_live_and_ready(models_server):
    for path in ("/v2/health/live", "/v2/health/ready"):
        r = requests.get(models_server.url + path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        assert r.content == b""


def test_server_metadata(models_server):
    r = requests.get(models_server.url + "/v2")
    assert r.status_code == 200
    meta = r.json()
    assert isinstance(meta["name"], str) and meta["name"]
    assert isinstance(meta["version"], str) and meta["version"]
    assert "binary_tensor_data" in meta["extensions"]
    assert "model_repository" in meta["extensions"]


@pytest.mark.parametrize("model", EXAMPLES)
def test_example_model_ready(models_server, model):
    r = requests.get(f"{models_server.url}/v2/models/{model}/ready")
    assert r.status_code == 200, r.text


def test_example_models_in_index(models_server):
    entries = index_by_name(models_server.url)
    for model in EXAMPLES:
        assert model in entries, entries
        assert [e["state"] for e in entries[model]] == ["READY"], entries[model]
        assert entries[model][0]["version"] == "1"


def test_infer_simple(models_server):
    a = list(range(16))
    b = [1] * 16
    r = infer(models_server.url, "simple", {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": b}]})
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    assert out["OUTPUT0"]["data"] == [x + 1 for x in a]
    assert out["OUTPUT1"]["data"] == [x - 1 for x in a]
    assert out["OUTPUT0"]["shape"] == [1, 16]
    assert out["OUTPUT0"]["datatype"] == "INT32"


def test_infer_simple_identity(models_server):
    r = infer(models_server.url, "simple_identity", {"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 3],
         "data": ["hello", "", "wörld"]}]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == "OUTPUT0" and out["datatype"] == "BYTES"
    assert out["shape"] == [1, 3]
    assert out["data"] == ["hello", "", "wörld"]


def test_infer_identity_fp32(models_server):
    data = [[1.5, -2.25, 3.0], [0.0, 1e-3, -7.0]]
    r = infer(models_server.url, "identity_fp32", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [2, 3], "data": data}]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["shape"] == [2, 3]
    np.testing.assert_array_equal(np.array(out["data"], np.float32),
                                  np.array(data, np.float32).ravel())


def test_infer_half_plus_two(models_server):
    """TF Serving's example model over KServe v2 (dims [-1]: a vector), and
    x2 (optional) stands for 0.0 when it is not sent."""
    x = [1.0, 2.0, 80.0, -4.0]
    r = infer(models_server.url, "half_plus_two", {"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [4], "data": x}]})
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert sorted(outs) == ["y", "y2", "y3"]
    assert all(o["shape"] == [4] for o in outs.values())
    assert outs["y"]["data"] == [2.5, 3.0, 42.0, 0.0]
    assert outs["y2"]["data"] == [3.5, 4.0, 43.0, 1.0]
    assert outs["y3"]["data"] == [3.0, 3.0, 3.0, 3.0]

    r = infer(models_server.url, "half_plus_two", {
        "inputs": [{"name": "x2", "datatype": "FP32", "shape": [3], "data": [2, 4, 6]}],
        "outputs": [{"name": "y3"}]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [4.0, 5.0, 6.0]

    # y reads x, which was not sent and has no default.
    r = infer(models_server.url, "half_plus_two", {
        "inputs": [{"name": "x2", "datatype": "FP32", "shape": [1], "data": [1]}],
        "outputs": [{"name": "y"}]})
    assert r.status_code >= 400
    assert "output 'y' reads input 'x', which was not sent and has no default" \
        in r.json()["error"]


def test_infer_saved_model_half_plus_three(models_server):
    r = infer(models_server.url, "saved_model_half_plus_three", {"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0, 5.0]}]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [3.5, 4.0, 5.5]
    assert r.json()["model_version"] == "123"


def digits_io(url):
    """(input name, output name, max_batch_size) from the metadata/config
    endpoints, so the test follows whatever names the model uses."""
    meta = requests.get(f"{url}/v2/models/digits_mlp").json()
    assert len(meta["inputs"]) == 1 and len(meta["outputs"]) == 1, meta
    assert meta["inputs"][0]["datatype"] == "FP32"
    assert meta["inputs"][0]["shape"][-1] == 64
    assert meta["outputs"][0]["shape"][-1] == 10
    cfg = requests.get(f"{url}/v2/models/digits_mlp/config").json()
    return meta["inputs"][0]["name"], meta["outputs"][0]["name"], cfg["max_batch_size"]


def test_infer_digits_mlp_one(models_server):
    in_name, out_name, _ = digits_io(models_server.url)
    x = np.zeros((1, 64), np.float32)
    r = infer(models_server.url, "digits_mlp", {"inputs": [
        {"name": in_name, "datatype": "FP32", "shape": [1, 64], "data": x.ravel().tolist()}]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == out_name and out["shape"] == [1, 10]
    p = np.array(out["data"])
    assert np.all(p >= 0) and abs(p.sum() - 1.0) < 1e-4  # softmax output


def held_out_digits():
    """The split documented in models/digits_mlp/train.py."""
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(0).permutation(len(x))
    held = order[-360:]
    return x[held], y[held]


def read_safetensors(path):
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + lo:base + hi], "<f4").reshape(info["shape"])
    return out


def reference_digits(x):
    w = read_safetensors(harness.EXAMPLE_MODELS / "digits_mlp" / "1" / "model.safetensors")
    h = x
    n_layers = len([k for k in w if k.endswith(".weight")])
    for i in range(n_layers):
        h = h @ w[f"layers.{i}.weight"].T + w[f"layers.{i}.bias"]
        if i < n_layers - 1:
            h = np.maximum(h, 0.0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_digits_mlp_held_out_accuracy(models_server):
    in_name, out_name, mbs = digits_io(models_server.url)
    x, y = held_out_digits()
    batch = min(mbs, 128) if mbs > 0 else 1
    probs = []
    for start in range(0, len(x), batch):
        xb = x[start:start + batch]
        r = infer(models_server.url, "digits_mlp", {"inputs": [
            {"name": in_name, "datatype": "FP32", "shape": list(xb.shape),
             "data": xb.ravel().tolist()}]})
        assert r.status_code == 200, r.text
        out = r.json()["outputs"][0]
        assert out["shape"] == [len(xb), 10]
        probs.append(np.array(out["data"], np.float32).reshape(len(xb), 10))
    probs = np.concatenate(probs)
    accuracy = float((probs.argmax(axis=1) == y).mean())
    assert accuracy >= 0.95, f"held-out accuracy {accuracy:.4f} < 0.95"
    # And the server computes the same function as the weights file says.
    np.testing.assert_allclose(probs, reference_digits(x), rtol=1e-4, atol=1e-5)


def test_example_model_config_endpoint(models_server):
    r = requests.get(f"{models_server.url}/v2/models/simple/config")
    assert r.status_code == 200
    assert r.headers.get("Content-Type", "").startswith("application/json")
    assert ", " not in r.text and '": ' not in r.text, "JSON must be compact"
    cfg = r.json()
    assert cfg["name"] == "simple"
    assert cfg["backend"] == "add_sub"
    assert cfg["max_batch_size"] == 8
    assert [i["name"] for i in cfg["input"]] == ["INPUT0", "INPUT1"]
    assert cfg["input"][0]["data_type"] == "TYPE_INT32"
    assert cfg["input"][0]["dims"] == [16]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert cfg["output"][1]["data_type"] == "TYPE_INT32"
    # Fields perf_analyzer and the clients read, with proto names and enum strings.
    assert cfg["version_policy"] == {"latest": {"num_versions": 1}}
    assert cfg["instance_group"] and cfg["instance_group"][0]["kind"] in ("KIND_CPU", "KIND_GPU")
    assert cfg["instance_group"][0]["count"] >= 1
    cfg = requests.get(f"{models_server.url}/v2/models/digits_mlp/config").json()
    assert cfg["backend"] == "dense"
    assert cfg["parameters"]["activation"] == {"string_value": "relu"}
    assert cfg["parameters"]["output_activation"] == {"string_value": "softmax"}


# ---- broken models leave the server up -------------------------------------------


DIGITS_WEIGHTS = harness.EXAMPLE_MODELS / "digits_mlp" / "1" / "model.safetensors"


def dense_config(name, n_in, n_out):
    return harness.model_config(
        name, "dense", [("INPUT0", "TYPE_FP32", [n_in])], [("OUTPUT0", "TYPE_FP32", [n_out])],
        max_batch_size=8,
        extra=('parameters [ { key: "output_activation" value: { string_value: "softmax" } } ]\n'))


def build_broken_repo(repo):
    repo.mkdir(parents=True, exist_ok=True)
    harness.write_model(repo, "good_identity",
                        harness.identity_config("good_identity", "TYPE_FP32", [-1]))
    harness.write_model(repo, "good_simple", harness.add_sub_config("good_simple"))
    harness.write_model(repo, "good_dense", dense_config("good_dense", 64, 10),
                        files={"model.safetensors": DIGITS_WEIGHTS.read_bytes()})
    # Syntax error: the output list is never closed.
    harness.write_model(repo, "bad_syntax", (
        'name: "bad_syntax"\nbackend: "identity"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }\n'))
    # Unknown enum value.
    harness.write_model(repo, "bad_dtype", harness.identity_config(
        "bad_dtype", "TYPE_NOT_A_TYPE", [-1]))
    # name does not match the folder.
    harness.write_model(repo, "bad_name", harness.identity_config(
        "some_other_name", "TYPE_FP32", [-1]))
    # Unknown backend.
    harness.write_model(repo, "bad_backend", harness.model_config(
        "bad_backend", "no_such_backend", [("INPUT0", "TYPE_FP32", [-1])],
        [("OUTPUT0", "TYPE_FP32", [-1])]))
    # Dense model whose weights file is missing.
    harness.write_model(repo, "missing_weights", dense_config("missing_weights", 64, 10))
    # Dense model whose weights do not fit the config (64 inputs in the file).
    harness.write_model(repo, "shape_mismatch", dense_config("shape_mismatch", 32, 10),
                        files={"model.safetensors": DIGITS_WEIGHTS.read_bytes()})
    return repo


GOOD = ["good_identity", "good_simple", "good_dense"]
BROKEN = {
    # model: substrings the reason must contain (what a user needs to act on)
    "bad_syntax": ["config.pbtxt"],
    "bad_dtype": ["TYPE_NOT_A_TYPE"],
    "bad_name": [("some_other_name", "bad_name")],
    "bad_backend": ["no_such_backend"],
    "missing_weights": ["model.safetensors"],
    "shape_mismatch": ["layers.0.weight"],
}


def wait_settled(url, names, timeout=30):
    deadline = time.monotonic() + timeout * harness.timeout_scale()
    while True:
        entries = index_by_name(url)
        states = {n: [e.get("state") for e in entries.get(n, [])] for n in names}
        if all(s and not any(x in ("LOADING", "UNLOADING") for x in s) for s in states.values()):
            return entries
        assert time.monotonic() < deadline, f"models never settled: {states}"
        time.sleep(0.1)


def test_broken_models_are_unavailable_others_ready(start_server, tmp_path):
    repo = build_broken_repo(tmp_path / "repo")
    # Triton's --exit-on-error (default true) would exit at the failed loads.
    srv = start_server(repo, ["--model-control-mode=none", "--exit-on-error=false"],
                       wait="live")
    entries = wait_settled(srv.url, GOOD + list(BROKEN))
    for name in GOOD:
        assert [e["state"] for e in entries[name]] == ["READY"], entries[name]
        r = requests.get(f"{srv.url}/v2/models/{name}/ready")
        assert r.status_code == 200
    for name, needles in BROKEN.items():
        for e in entries[name]:
            assert e["state"] == "UNAVAILABLE", e
            reason = e.get("reason", "")
            assert reason, f"{name}: no reason given: {e}"
            for needle in needles:
                options = needle if isinstance(needle, tuple) else (needle,)
                assert any(o in reason for o in options), \
                    f"{name}: reason {reason!r} does not mention {' or '.join(options)!r}"
            # Files are named relative to the repository: no reply carries
            # a server file path.
            assert str(tmp_path) not in reason, reason
        r = requests.get(f"{srv.url}/v2/models/{name}/ready")
        assert r.status_code in (400, 404), (name, r.status_code, r.text)
        r = infer(srv.url, name, {"inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]})
        assert r.status_code in (404, 503), (name, r.status_code, r.text)
        assert f"Request for unknown model: '{name}'" in r.json()["error"]
    # {"ready": true} lists only the READY ones.
    ready_only = index(srv.url, {"ready": True})
    assert sorted(e["name"] for e in ready_only) == sorted(GOOD)
    # Strict readiness: the server is live but not ready while models failed.
    assert requests.get(srv.url + "/v2/health/live").status_code == 200
    assert requests.get(srv.url + "/v2/health/ready").status_code == 400
    # The good models serve.
    r = infer(srv.url, "good_simple", {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [4] * 16
    x, y = held_out_digits()
    r = infer(srv.url, "good_dense", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [8, 64], "data": x[:8].ravel().tolist()}]})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(np.array(r.json()["outputs"][0]["data"]).reshape(8, 10),
                               reference_digits(x[:8]), rtol=1e-4, atol=1e-5)


# ---- explicit model control ---------------------------------------------------


def load(url, model, body=b""):
    return requests.post(f"{url}/v2/repository/models/{model}/load", data=body, timeout=60)


def unload(url, model, body=b""):
    return requests.post(f"{url}/v2/repository/models/{model}/unload", data=body, timeout=60)


SIMPLE_REQ = {"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}
FP32_REQ = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]}


def test_explicit_load_unload(start_server, example_repo_copy):
    repo = example_repo_copy
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=simple"])
    url = srv.url

    entries = index_by_name(url)
    assert [e["state"] for e in entries["simple"]] == ["READY"]
    # Never-loaded models are listed by name only.
    assert entries["identity_fp32"] == [{"name": "identity_fp32"}]
    assert requests.get(url + "/v2/health/ready").status_code == 200
    assert infer(url, "identity_fp32", FP32_REQ).status_code == 404

    # Load at run time.
    r = load(url, "identity_fp32")
    assert r.status_code == 200, r.text
    assert r.content == b""
    r = infer(url, "identity_fp32", FP32_REQ)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [1.0, 2.0]

    # Unload (the python client always sends this body).
    r = unload(url, "simple", json.dumps({"parameters": {"unload_dependents": False}}))
    assert r.status_code == 200, r.text
    assert r.content == b""
    entries = index_by_name(url)
    assert [(e["state"], e.get("reason")) for e in entries["simple"]] == [("UNAVAILABLE", "unloaded")]
    r = infer(url, "simple", SIMPLE_REQ)
    assert r.status_code == 404, r.text
    assert "Request for unknown model: 'simple'" in r.json()["error"]
    # Unloaded models do not make the server unready.
    assert requests.get(url + "/v2/health/ready").status_code == 200

    # Load again.
    assert load(url, "simple").status_code == 200
    r = infer(url, "simple", SIMPLE_REQ)
    assert r.status_code == 200
    assert r.json()["outputs"][1]["data"] == [i - 1 for i in range(16)]

    # A model added to the repository after start-up.
    harness.write_model(repo, "late_model", harness.identity_config("late_model", "TYPE_FP32", [-1]))
    r = load(url, "late_model")
    assert r.status_code == 200, r.text
    assert infer(url, "late_model", FP32_REQ).status_code == 200

    # Load re-reads config.pbtxt: change max_batch_size and reload.
    cfg = (repo / "late_model" / "config.pbtxt").read_text().replace(
        "max_batch_size: 8", "max_batch_size: 2")
    (repo / "late_model" / "config.pbtxt").write_text(cfg)
    assert load(url, "late_model").status_code == 200
    assert requests.get(f"{url}/v2/models/late_model/config").json()["max_batch_size"] == 2

    # A reload that fails leaves the loaded version serving.
    (repo / "late_model" / "config.pbtxt").write_text(cfg + "\ninput [ {\n")
    r = load(url, "late_model")
    assert r.status_code == 400
    assert "config.pbtxt" in r.json()["error"]
    assert infer(url, "late_model", FP32_REQ).status_code == 200
    assert requests.get(f"{url}/v2/models/late_model/config").json()["max_batch_size"] == 2

    # A broken model: the load fails with a reason, the rest keep serving.
    harness.write_model(repo, "broken", "name: \"broken\"\nbackend: \"identity\"\ninput [ {\n")
    r = load(url, "broken")
    assert r.status_code >= 400
    assert r.json()["error"]
    entries = index_by_name(url)
    assert all(e["state"] == "UNAVAILABLE" and e.get("reason") for e in entries["broken"])
    assert infer(url, "simple", SIMPLE_REQ).status_code == 200

    # A model that does not exist: Triton's answer, and no server path.
    r = load(url, "no_such_model")
    assert r.status_code == 500, r.text
    assert r.json() == {"error": "failed to load 'no_such_model', failed to poll "
                                 "from model repository"}


def test_load_refused_in_none_mode(models_server):
    for action in ("load", "unload"):
        r = requests.post(f"{models_server.url}/v2/repository/models/simple/{action}")
        assert r.status_code == 503, r.text
        assert r.text == '{"error":"explicit model load / unload is not allowed if polling is enabled"}'
    assert infer(models_server.url, "simple", SIMPLE_REQ).status_code == 200


def test_sigterm_drains_in_flight_request(start_server, tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "slow", harness.identity_config(
        "slow", "TYPE_FP32", [-1],
        extra='parameters [ { key: "execute_delay_ms" value: { string_value: "1500" } } ]\n'))
    srv = start_server(repo)
    result = {}

    def send():
        try:
            result["r"] = infer(srv.url, "slow", FP32_REQ)
        except Exception as e:  # noqa: BLE001
            result["e"] = e

    harness.log_verbose(srv, 1)
    t = threading.Thread(target=send)
    t.start()
    harness.wait_received(srv, "POST", "/v2/models/slow/infer")
    srv.proc.send_signal(signal.SIGTERM)
    t.join(30 * harness.timeout_scale())
    assert "e" not in result, f"in-flight request failed: {result.get('e')}"
    assert result["r"].status_code == 200, result["r"].text
    assert result["r"].json()["outputs"][0]["data"] == [1.0, 2.0]
    rc = srv.wait_exit()  # no second signal: that may force an exit
    assert rc == 0, srv.log_tail()


# ---- names that would escape the repository ---------------------------------------


def build_escape_case(base):
    """base/config.pbtxt + base/1/ is a loadable nameless model sitting just
    above the repository (what '..' would reach); base/outside/escape is a
    loadable model reached only through the symlink repo/escape."""
    base.mkdir(parents=True, exist_ok=True)
    nameless = harness.identity_config("x", "TYPE_FP32", [-1]).replace('name: "x"\n', "")
    (base / "config.pbtxt").write_text(nameless)
    (base / "1").mkdir(exist_ok=True)
    harness.write_model(base / "outside", "escape",
                        harness.identity_config("escape", "TYPE_FP32", [-1]))
    harness.write_model(base / "outside", "stolen_version",
                        harness.identity_config("ver_escape", "TYPE_FP32", [-1]))
    repo = base / "repo"
    harness.write_model(repo, "simple", harness.add_sub_config("simple"))
    os.symlink(base / "outside" / "escape", repo / "escape")
    # A version folder that is a symlink out of its model folder.
    harness.write_model(repo, "ver_escape", harness.identity_config("ver_escape", "TYPE_FP32", [-1]))
    os.symlink(base / "outside" / "stolen_version" / "1", repo / "ver_escape" / "2")
    return repo


def raw_post(srv, path, body=b""):
    with harness.RawConnection(srv.host, srv.port) as c:
        return c.request("POST", path, {"Content-Type": "application/json"}, body)


def raw_get(srv, path):
    with harness.RawConnection(srv.host, srv.port) as c:
        return c.request("GET", path)


UNSAFE_NAMES = ["..", ".", "escape"]


def test_unsafe_model_names_refused_explicit(start_server, tmp_path):
    repo = build_escape_case(tmp_path / "case")
    srv = start_server(repo, ["--model-control-mode=explicit", "--load-model=simple"])
    for name in UNSAFE_NAMES + ["%2e%2e", "..%2F..%2Fetc", "simple%2F..%2F.."]:
        # A raw socket, so that no client library normalises the dot segments.
        r = raw_post(srv, f"/v2/repository/models/{name}/load")
        assert r.status_code >= 400, (name, r)
        assert "error" in json.loads(r.body), (name, r)
        r = raw_get(srv, f"/v2/models/{name}/ready")
        assert r.status_code != 200, (name, r)
        r = raw_post(srv, f"/v2/models/{name}/infer", json.dumps(FP32_REQ).encode())
        assert r.status_code != 200, (name, r)
    ready = [e["name"] for e in index(srv.url, {"ready": True})]
    assert ready == ["simple"], ready
    assert requests.get(srv.url + "/v2/health/live").status_code == 200
    # Loading all is still safe: the symlinked-out model is not loaded.
    assert infer(srv.url, "simple", SIMPLE_REQ).status_code == 200


def test_unsafe_models_skipped_at_startup(start_server, tmp_path):
    repo = build_escape_case(tmp_path / "case")
    srv = start_server(repo, ["--model-control-mode=none"], wait="live")
    entries = wait_settled(srv.url, ["simple", "ver_escape"])
    assert [e["state"] for e in entries["simple"]] == ["READY"]
    # The symlink out of the repository is either not listed or not READY.
    assert all(e.get("state") != "READY" for e in entries.get("escape", []))
    assert raw_get(srv, "/v2/models/escape/ready").status_code != 200
    # Version 2 of ver_escape is a symlink out of the model: only 1 is served.
    r = requests.get(f"{srv.url}/v2/models/ver_escape")
    assert r.status_code == 200, r.text
    assert r.json()["versions"] == ["1"]
    assert requests.get(f"{srv.url}/v2/models/ver_escape/versions/2/ready").status_code != 200


# ---- command line -------------------------------------------------------------------


def test_flag_value_forms_and_verbose_log(start_server, example_repo_copy):
    """`--flag value` works like `--flag=value`; verbose logging runs."""
    srv = start_server(example_repo_copy, ["--model-control-mode", "explicit",
                                           "--load-model", "simple", "--log-verbose", "1"])
    assert infer(srv.url, "simple", SIMPLE_REQ).status_code == 200
    ready = [e["name"] for e in index(srv.url, {"ready": True})]
    assert ready == ["simple"]
    assert srv.log().strip(), "nothing logged at --log-verbose=1"


def test_help_lists_flags(tmp_path):
    out = harness.subprocess.run([harness.osprey_bin(), "--help"], capture_output=True,
                                 timeout=30, cwd=tmp_path)
    assert out.returncode == 0
    text = (out.stdout + out.stderr).decode()
    for flag in ("--model-repository", "--http-port", "--http-max-input-size",
                 "--model-control-mode", "--load-model", "--log-verbose"):
        assert flag in text, flag


@pytest.mark.parametrize("args, message", [
    (["--http-port=x"], "Error: invalid value 'x' for --http-port"),
    (["--http-port=70000"], "Error: invalid value '70000' for --http-port"),
    (["--strict-gpu=maybe"], "Error: invalid value 'maybe' for --strict-gpu"),
    (["--no-such-flag=1"], "Error: unknown option '--no-such-flag'"),
    (["--log-verbose"], "Error: option '--log-verbose' needs a value"),
    (["--trace-config=rate=x"], "Error: "),
    # Misspelled Triton flags stay errors; only the real names are accepted.
    (["--exit-on-eror=false"], "Error: unknown option '--exit-on-eror'"),
    (["--grpc-prot=8001"], "Error: unknown option '--grpc-prot'"),
    (["--strict-readiness=maybe"], "Error: invalid value 'maybe' for --strict-readiness"),
    (["--exit-timeout-secs=soon"], "Error: invalid value 'soon' for --exit-timeout-secs"),
    (["--grpc-port"], "Error: option '--grpc-port' needs a value"),
    (["--repository-poll-secs=0"], "Error: invalid value '0' for --repository-poll-secs"),
])
def test_bad_flags_exit_2_with_a_message(tmp_path, example_repo_copy, args, message):
    """Usage errors are reported before anything starts (exit status 2)."""
    srv = harness.OspreyServer(example_repo_copy, args, workdir=tmp_path)
    rc = srv.run_to_exit()
    assert rc == 2, srv.log_tail()
    assert message in srv.log(), srv.log_tail()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flag_id_names_the_server(start_server, example_repo_copy, tmp_path):
    """--id is GET /v2's "name"; without it Osprey answers "triton", the name
    Triton's client examples check (simple_http_health_metadata.py)."""
    import tritonclient.http as httpclient
    srv = start_server(example_repo_copy, ["--id", "edge-7"])
    assert requests.get(srv.url + "/v2").json()["name"] == "edge-7"
    with httpclient.InferenceServerClient(srv.hostport) as c:
        assert c.get_server_metadata()["name"] == "edge-7"
    # --model-store is Triton's other name of --model-repository.
    plain = harness.OspreyServer(example_repo_copy, workdir=tmp_path / "plain")
    plain.command = lambda: harness.wrapper_argv() + [
        plain.binary, f"--model-store={plain.repo}", "--http-port=0", "--metrics-port=0",
        "--grpc-port=0"]
    plain.start()
    try:
        with httpclient.InferenceServerClient(plain.hostport) as c:
            assert c.get_server_metadata()["name"] == "triton"
    finally:
        assert plain.stop() == 0, plain.log_tail()


def test_flags_without_effect_warn_once_and_the_server_runs(start_server,
                                                            example_repo_copy):
    """Triton flags that mean nothing to Osprey (response pools, cache
    directories, ...) are accepted in both value forms, one warning per
    flag."""
    srv = start_server(example_repo_copy, [
        "--grpc-max-response-pool-size", "4", "--grpc-max-response-pool-size=8",
        "--backend-config=tensorflow,version=2", "--backend-config=onnxruntime,x=y",
        "--cache-directory=/tmp", "--metrics-interval-ms=500",
        "--model-load-thread-count=2", "--allow-grpc=false"])
    log = srv.log()
    for flag in ("--grpc-max-response-pool-size",
                 "--cache-directory", "--metrics-interval-ms"):
        assert log.count(f"{flag} has no effect in Osprey") == 1, (flag, log)
    # Backend settings are real (test_onnx_config_contract.py).
    assert "--backend-config has no effect" not in log
    assert "--model-load-thread-count has no effect" not in log
    # --allow-grpc is real: false serves no gRPC port.
    assert "--allow-grpc has no effect" not in log
    assert "Started GRPCInferenceService" not in log
    assert infer(srv.url, "simple", SIMPLE_REQ).status_code == 200


def test_flag_exit_on_error(tmp_path):
    """Triton's --exit-on-error defaults to true: a model that fails to load
    at start-up makes the server exit 1 ("failed to load all models")."""
    repo = build_broken_repo(tmp_path / "repo")
    srv = harness.OspreyServer(repo, [], workdir=tmp_path / "default")
    assert srv.run_to_exit() == 1, srv.log_tail()
    assert "failed to load all models" in srv.log(), srv.log_tail()
    explicit = harness.OspreyServer(
        repo, ["--model-control-mode=explicit", f"--load-model={next(iter(BROKEN))}"],
        workdir=tmp_path / "explicit")
    assert explicit.run_to_exit() == 1, explicit.log_tail()


def test_flag_strict_readiness(start_server, tmp_path):
    """--strict-readiness (default true) makes /v2/health/ready wait for
    every model; false: ready whenever live. Bools take Triton's forms."""
    repo = build_broken_repo(tmp_path / "repo")
    strict = start_server(repo, ["--exit-on-error=0"], wait="live")
    assert requests.get(strict.url + "/v2/health/ready").status_code == 400
    loose = start_server(repo, ["--exit-on-error=False", "--strict-readiness=OFF"],
                         wait="ready")
    assert requests.get(loose.url + "/v2/health/ready").status_code == 200
    assert requests.get(loose.url + "/v2/health/live").status_code == 200
    assert requests.get(loose.url + f"/v2/models/{next(iter(BROKEN))}/ready").status_code != 200


def test_flag_exit_timeout_secs(start_server, example_repo_copy):
    """--exit-timeout-secs is the shutdown drain time (Triton's default 30);
    a server given one stops cleanly."""
    srv = start_server(example_repo_copy, ["--exit-timeout-secs=5"])
    assert infer(srv.url, "simple", SIMPLE_REQ).status_code == 200
    assert srv.stop() == 0, srv.log_tail()
    assert srv.clean_exit_problems() == []


def test_flag_exit_timeout_secs_bounds_the_drain(tmp_path):
    """With --exit-timeout-secs=0 a SIGTERM does not wait for a slow request
    in flight: the server says so and exits at once."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "slow", harness.identity_config(
        "slow", "TYPE_FP32", [-1],
        extra='parameters [ { key: "execute_delay_ms" value: { string_value: "4000" } } ]\n'))
    srv = harness.OspreyServer(repo, ["--exit-timeout-secs=0"], workdir=tmp_path / "srv")
    srv.start()

    def send():
        try:
            infer(srv.url, "slow", FP32_REQ)
        except requests.RequestException:
            pass  # the server exits under it

    harness.log_verbose(srv, 1)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    try:
        harness.wait_received(srv, "POST", "/v2/models/slow/infer")
        signalled = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.wait_exit(timeout=3)
        assert time.monotonic() - signalled < 3 * harness.timeout_scale()
    finally:
        srv.kill()
    assert rc == 0, srv.log_tail()
    assert "requests still in progress after 0 ms" in srv.log(), srv.log_tail()


def test_flag_log_file(tmp_path, example_repo_copy):
    """--log-file: the log goes to that file instead of stderr, and the
    logging API names it."""
    log_path = tmp_path / "osprey.log"
    port = free_port()
    srv = harness.OspreyServer(example_repo_copy,
                               [f"--log-file={log_path}", f"--http-port={port}",
                                "--grpc-max-response-pool-size=1"],
                               workdir=tmp_path / "srv")
    srv.spawn()
    srv.port = port
    try:
        deadline = time.monotonic() + 30 * harness.timeout_scale()
        while True:
            try:
                if requests.get(srv.url + "/v2/health/ready", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert srv.alive() and time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.05)
        assert requests.get(srv.url + "/v2/logging").json()["log_file"] == str(log_path)
    finally:
        assert srv.stop() == 0, srv.log_tail()
    text = log_path.read_text()
    assert "Started HTTPService" in text
    assert "--grpc-max-response-pool-size has no effect in Osprey" in text
    assert "Started GRPCInferenceService" in text
    assert "Waiting for in-flight requests to complete." in text
    assert "Started HTTPService" not in srv.stderr()
    assert "Signal (15) received." in srv.stdout()  # Triton prints it there


def test_flag_deprecated_trace_flags(start_server, example_repo_copy):
    """Triton's deprecated --trace-level/--trace-rate/--trace-count are the
    --trace-config settings of the same names."""
    srv = start_server(example_repo_copy, ["--trace-level=TIMESTAMPS", "--trace-rate=7",
                                           "--trace-count=3"])
    settings = requests.get(srv.url + "/v2/trace/setting").json()
    assert settings["trace_level"] == ["TIMESTAMPS"]
    assert settings["trace_rate"] == "7"
    assert settings["trace_count"] == "3"


def test_failed_start_stops_what_started(tmp_path, example_repo_copy):
    """A service that cannot start (the metrics port is taken) stops the ones
    started before it, in reverse, and the process exits 1 cleanly."""
    import socket
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        srv = harness.OspreyServer(example_repo_copy,
                                   ["--metrics-address=127.0.0.1", f"--metrics-port={port}"],
                                   workdir=tmp_path)
        rc = srv.run_to_exit()
    finally:
        taken.close()
    assert rc == 1, srv.log_tail()
    log = srv.log()
    assert "failed to start the metrics service" in log, srv.log_tail()
    for marker in harness.SANITIZER_MARKERS:
        assert marker not in log


# ---- restricted APIs (mirrors Triton's qa/L0_http http_restricted_api_test.py
# and the start-up checks of qa/L0_http/test.sh) -------------------------------

@pytest.mark.parametrize("args, message", [
    (["--http-restricted-api=model-repository,health:k1=v1",
      "--http-restricted-api=metadata,health:k2=v2"],
     "restricted api 'health' can not be specified in multiple config groups"),
    (["--http-restricted-api=model-reposit,health:k1=v1"],
     "unknown restricted api 'model-reposit'"),
    (["--http-restricted-api=health"],
     "--http-restricted-api option format is '<API_1,API_2>:<setting>=<value>'. "
     "Got health"),
])
def test_restricted_api_startup_errors(tmp_path, example_repo_copy, args, message):
    srv = harness.OspreyServer(example_repo_copy, args, workdir=tmp_path)
    assert srv.run_to_exit() == 2, srv.log_tail()
    assert message in srv.log(), srv.log_tail()


def test_restricted_apis_need_their_header(start_server, example_repo_copy):
    srv = start_server(example_repo_copy, [
        "--http-restricted-api=model-repository,health:admin-key=admin-value",
        "--http-restricted-api=inference:infer-key=infer-value"], wait=None)
    denied = {"error": "This API is restricted, expecting header 'admin-key'"}
    for method, path in (("GET", "/v2/health/ready"), ("GET", "/v2/health/live"),
                         ("GET", "/v2/models/simple/ready"),
                         ("POST", "/v2/repository/index"),
                         ("POST", "/v2/repository/models/simple/load"),
                         # the group is checked before the method, as Triton
                         ("POST", "/v2/health/live")):
        r = requests.request(method, srv.url + path, timeout=10)
        assert r.status_code == 403, (path, r.text)
        assert r.json() == denied, (path, r.text)
        r = requests.request(method, srv.url + path, timeout=10,
                             headers={"admin-key": "wrong"})
        assert r.status_code == 403, (path, r.text)
    r = requests.get(srv.url + "/v2/health/ready", headers={"admin-key": "admin-value"},
                     timeout=10)
    assert r.status_code == 200
    r = infer(srv.url, "simple", SIMPLE_REQ)
    assert r.status_code == 403
    assert r.json() == {"error": "This API is restricted, expecting header 'infer-key'"}
    r = requests.post(f"{srv.url}/v2/models/simple/infer", json=SIMPLE_REQ,
                      headers={"infer-key": "infer-value"}, timeout=10)
    assert r.status_code == 200, r.text
    # Groups not named stay open.
    assert requests.get(srv.url + "/v2/models/simple", timeout=10).status_code == 200
    assert requests.get(srv.url + "/v2/models/simple/config", timeout=10).status_code == 200


def test_poll_mode_follows_the_repository(start_server, tmp_path):
    """--model-control-mode=poll (Triton's): everything loads at start, then
    a new folder is loaded, a changed config reloaded and a removed folder
    unloaded within --repository-poll-secs; the load API is refused."""
    repo = tmp_path / "repo"
    harness.write_model(repo, "a", harness.identity_config("a", "TYPE_FP32", [-1]))
    srv = start_server(repo, ["--model-control-mode=poll", "--repository-poll-secs=1"])

    def states():
        return {(e["name"], e.get("version"), e.get("state"))
                for e in index(srv.url)}

    def wait_for(check, what):
        deadline = time.monotonic() + 20 * harness.timeout_scale()
        while time.monotonic() < deadline:
            got = states()
            if check(got):
                return got
            time.sleep(0.2)
        pytest.fail(f"poll mode never {what}: {states()}")

    assert ("a", "1", "READY") in states()
    r = requests.post(f"{srv.url}/v2/repository/models/a/load", timeout=10)
    assert r.status_code == 503, r.text

    harness.write_model(repo, "b", harness.identity_config("b", "TYPE_FP32", [-1]))
    wait_for(lambda s: ("b", "1", "READY") in s, "loaded the new model")

    # A new version folder of 'a' reloads it.
    (repo / "a" / "2").mkdir()
    wait_for(lambda s: ("a", "2", "READY") in s or ("a", "1", "READY") in s
             and len([x for x in s if x[0] == "a"]) > 1, "reloaded the changed model")

    shutil.rmtree(repo / "b")
    wait_for(lambda s: ("b", "1", "READY") not in s, "unloaded the removed model")
    r = infer(srv.url, "a", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]})
    assert r.status_code == 200, r.text
