"""Triton's classification extension (protocol reference §3): an output
asked for with "classification": k comes back as BYTES "<value>:<index>
[:<label>]", its top k classes per batch item, through tritonclient's
class_count and raw JSON, with labels from label_filename."""

import json
import shutil

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

import harness

LABELS = ["zero", "one", "two"]  # fewer labels than classes: the rest have none


def identity_model(name, max_batch_size, dims, dtype="TYPE_FP32", label=False):
    extra = ' label_filename: "labels.txt"' if label else ""
    batch = f"max_batch_size: {max_batch_size}\n"
    return (f'name: "{name}"\nbackend: "identity"\n{batch}'
            f'input [ {{ name: "INPUT0" data_type: {dtype} dims: {dims} }} ]\n'
            f'output [ {{ name: "OUTPUT0" data_type: {dtype} dims: {dims}{extra} }} ]\n')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cls_repo")
    shutil.copytree(harness.ROOT / "models", repo, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.py"))
    models = {
        "labelled": identity_model("labelled", 8, "[ -1 ]", label=True),
        "unbatched": identity_model("unbatched", 0, "[ -1 ]"),
        "ints": identity_model("ints", 8, "[ -1 ]", "TYPE_INT64"),
        "halves": identity_model("halves", 8, "[ -1 ]", "TYPE_FP16"),
    }
    for name, text in models.items():
        harness.write_model(repo, name, text)
    (repo / "labelled" / "labels.txt").write_text("\n".join(LABELS) + "\n")
    srv = harness.OspreyServer(repo, workdir=tmp_path_factory.mktemp("cls_srv"))
    srv.start()
    yield srv
    srv.stop()
    problems = srv.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + srv.log_tail()


def expected(values, k, labels=None):
    """What Triton answers for one batch item: std::to_string formats."""
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    out = []
    for i in order:
        v = values[i]
        text = f"{v:f}:{i}" if isinstance(v, float) else f"{v}:{i}"
        if labels and i < len(labels):
            text += ":" + labels[i]
        out.append(text.encode())
    return out


def infer(client, model, x, dtype, k, binary=True):
    i = httpclient.InferInput("INPUT0" if model != "digits_mlp" else "image",
                              list(x.shape), dtype)
    i.set_data_from_numpy(x)
    name = "OUTPUT0" if model != "digits_mlp" else "probabilities"
    out = httpclient.InferRequestedOutput(name, binary_data=binary, class_count=k)
    return client.infer(model, [i], outputs=[out]).as_numpy(name)


def test_server_metadata_extensions_in_tritons_order(server):
    """Triton 2.51's list whatever the flags (protocol reference §1): a
    disabled extension answers its own error when used."""
    assert requests.get(server.url + "/v2").json()["extensions"] == [
        "classification", "sequence", "model_repository",
        "model_repository(unload_dependents)", "schedule_policy", "model_configuration",
        "system_shared_memory", "cuda_shared_memory", "binary_tensor_data", "parameters",
        "statistics", "trace", "logging"]


@pytest.mark.parametrize("binary", [True, False])
def test_top_k_of_a_batched_model(server, binary):
    client = httpclient.InferenceServerClient(server.hostport)
    x = np.random.default_rng(1).uniform(0, 1, (4, 64)).astype(np.float32)
    plain = httpclient.InferInput("image", [4, 64], "FP32")
    plain.set_data_from_numpy(x)
    probs = client.infer("digits_mlp", [plain]).as_numpy("probabilities")
    got = infer(client, "digits_mlp", x, "FP32", 3, binary)
    assert got.shape == (4, 3)
    for row, values in zip(got, probs):
        assert [bytes(c) if binary else c.encode() for c in row] == \
            expected([float(v) for v in values], 3)


def test_labels_and_fewer_classes_than_asked(server):
    client = httpclient.InferenceServerClient(server.hostport)
    x = np.array([[0.25, 3.5, -1.0, 3.5, 0.0]], dtype=np.float32)
    got = infer(client, "labelled", x, "FP32", 9)  # 9 > 5 elements
    assert got.shape == (1, 5)
    assert got[0].tolist() == [b"3.500000:1:one", b"3.500000:3", b"0.250000:0:zero",
                               b"0.000000:4", b"-1.000000:2:two"]


def test_unbatched_shape_and_integers(server):
    client = httpclient.InferenceServerClient(server.hostport)
    got = infer(client, "unbatched", np.array([1.5, 9.0, 2.0], dtype=np.float32), "FP32", 2)
    assert got.shape == (2,)
    assert got.tolist() == [b"9.000000:1", b"2.000000:2"]
    big = np.array([[-(2**62), 2**62 + 1, 7]], dtype=np.int64)
    got = infer(client, "ints", big, "INT64", 3)
    assert got.tolist() == [[f"{2**62 + 1}:1".encode(), b"7:2", f"{-(2**62)}:0".encode()]]


def test_zero_classes_returns_the_values(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32",
                        "data": [1, 2, 3]}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}]}
    r = requests.post(server.url + "/v2/models/labelled/infer", data=json.dumps(body))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [1, 2, 3]


@pytest.mark.parametrize("model,dtype,array", [
    ("halves", "FP16", np.ones((1, 2), np.float16)),
    ("simple_identity", "BYTES", np.array([[b"a", b"b"]], dtype=np.object_)),
])
def test_types_without_an_order_are_refused(server, model, dtype, array):
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(Exception) as e:
        infer(client, model, array, dtype, 1)
    assert str(e.value) == ("[400] class result not available for output due to "
                            f"unsupported type '{dtype}'")


def test_too_many_elements_to_classify(server):
    client = httpclient.InferenceServerClient(server.hostport)
    x = np.zeros((1, 1000001), dtype=np.float32)
    with pytest.raises(Exception) as e:
        infer(client, "labelled", x, "FP32", 1)
    assert "classification output tensor too large" in str(e.value)
    assert infer(client, "labelled", x[:, :1000000], "FP32", 1).shape == (1, 1)


def test_classification_must_be_an_unsigned_integer(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -1}}]}
    r = requests.post(server.url + "/v2/models/labelled/infer", data=json.dumps(body))
    assert r.status_code == 500  # a TritonJson typed-access error, as in Triton
    assert "Unable to set 'classification'" in r.json()["error"]


def test_missing_label_file_fails_the_load(start_server, tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "nolabels", identity_model("nolabels", 8, "[ -1 ]", label=True))
    # Triton's --exit-on-error (default true) would exit at the failed load.
    srv = start_server(repo, ["--exit-on-error=false"], wait="live")
    index = requests.post(srv.url + "/v2/repository/index", data="{}").json()
    assert index[0]["state"] == "UNAVAILABLE"
    assert "labels.txt" in index[0]["reason"]
