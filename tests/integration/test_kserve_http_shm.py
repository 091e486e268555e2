"""Triton's system shared memory extension over HTTP, driven by the official
tritonclient.http and tritonclient.utils.shared_memory the way Triton's
simple_http_shm_client.py and qa/L0_shared_memory do: create POSIX regions,
register them, infer with inputs and outputs in them, status, unregister,
and the errors (with Triton's messages and HTTP statuses). Also the
/v2/cudasharedmemory endpoints, answered as a Triton without GPU support
answers them, and --allow-client-shm off (Triton's default)."""

import ctypes
import os
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

import harness

SIMPLE_BYTES = 16 * 4  # one INT32 [1,16] tensor


@pytest.fixture(scope="module")
def shm_repo(tmp_path_factory):
    repo = harness.make_repo(tmp_path_factory.mktemp("shm_repo"), ["simple"])
    harness.write_model(repo, "identity_slow", harness.identity_config(
        "identity_slow", "TYPE_FP32", [-1],
        extra='parameters [ { key: "execute_delay_ms" '
              'value: { string_value: "1000" } } ]\n'))
    harness.write_model(repo, "identity_fp32",
                        harness.identity_config("identity_fp32", "TYPE_FP32", [-1]))
    return repo


@pytest.fixture
def server(start_server, shm_repo):
    return start_server(shm_repo, ["--allow-client-shm=true"])


@pytest.fixture
def client(server):
    with httpclient.InferenceServerClient(server.hostport) as c:
        yield c
        try:
            c.unregister_system_shared_memory()
        except InferenceServerException:
            pass


class Regions:
    """POSIX regions made with tritonclient's helper, destroyed at the end."""

    def __init__(self):
        self.handles = []

    def create(self, name, key, size):
        h = shm.create_shared_memory_region(name, key, size)
        self.handles.append(h)
        return h

    def destroy(self):
        for h in self.handles:
            shm.destroy_shared_memory_region(h)
        self.handles = []


@pytest.fixture
def regions():
    r = Regions()
    yield r
    r.destroy()


def unique(key):
    return f"/osprey_test_{os.getpid()}_{key}"


def error_of(resp):
    return resp.json()["error"]


# ---- simple_http_shm_client.py -------------------------------------------------


def test_simple_inputs_and_outputs_in_shared_memory(client, regions):
    # as simple_http_shm_client.py: one region holds both outputs, another
    # both inputs, each tensor at its own offset
    out_key, in_key = unique("out"), unique("in")
    out_h = regions.create("output_data", out_key, 2 * SIMPLE_BYTES)
    in_h = regions.create("input_data", in_key, 2 * SIMPLE_BYTES)
    a = np.arange(16, dtype=np.int32)
    b = np.ones(16, dtype=np.int32)
    shm.set_shared_memory_region(in_h, [a])
    shm.set_shared_memory_region(in_h, [b], offset=SIMPLE_BYTES)
    client.register_system_shared_memory("output_data", out_key, 2 * SIMPLE_BYTES)
    client.register_system_shared_memory("input_data", in_key, 2 * SIMPLE_BYTES)

    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("input_data", SIMPLE_BYTES)
    inputs[1].set_shared_memory("input_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
    outputs[0].set_shared_memory("output_data", SIMPLE_BYTES)
    outputs[1].set_shared_memory("output_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)

    result = client.infer("simple", inputs, outputs=outputs)
    out0 = result.get_output("OUTPUT0")
    out1 = result.get_output("OUTPUT1")
    # Triton's response names a shared memory output without data
    assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    assert out1 == {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16]}
    got0 = shm.get_contents_as_numpy(out_h, np.int32, [1, 16])
    got1 = shm.get_contents_as_numpy(out_h, np.int32, [1, 16], offset=SIMPLE_BYTES)
    np.testing.assert_array_equal(got0[0], a + b)
    np.testing.assert_array_equal(got1[0], a - b)

    status = client.get_system_shared_memory_status()
    assert status == [
        {"name": "input_data", "key": in_key, "offset": 0, "byte_size": 128},
        {"name": "output_data", "key": out_key, "offset": 0, "byte_size": 128},
    ]
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []


def test_mixed_shared_memory_and_binary_tensors(client, regions):
    key = unique("mixed")
    h = regions.create("mixed", key, SIMPLE_BYTES)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.int32)
    shm.set_shared_memory_region(h, [a])
    client.register_system_shared_memory("mixed", key, SIMPLE_BYTES)
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_shared_memory("mixed", SIMPLE_BYTES)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(b, binary_data=True)
    o0 = httpclient.InferRequestedOutput("OUTPUT0")
    o1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)
    result = client.infer("simple", [i0, i1], outputs=[o0, o1])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_identity_fp32_in_and_out_of_one_region_at_an_offset(client, regions):
    n = 1000
    key = unique("ident")
    # the region is registered at an offset into the object, which is not a
    # page multiple
    h = regions.create("ident_obj", key, 100 + 2 * 4 * n)
    x = np.linspace(-1, 1, n, dtype=np.float32).reshape(1, n)
    shm.set_shared_memory_region(h, [x], offset=100)
    client.register_system_shared_memory("ident", key, 2 * 4 * n, offset=100)
    inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
    inp.set_shared_memory("ident", 4 * n)
    out = httpclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("ident", 4 * n, offset=4 * n)
    result = client.infer("identity_fp32", [inp], outputs=[out])
    assert result.get_output("OUTPUT0")["shape"] == [1, n]
    got = shm.get_contents_as_numpy(h, np.float32, [1, n], offset=100 + 4 * n)
    np.testing.assert_array_equal(got, x)
    assert client.get_system_shared_memory_status("ident") == [
        {"name": "ident", "key": key, "offset": 100, "byte_size": 8 * n}]


def test_server_metadata_lists_system_shared_memory_in_tritons_position(server):
    ext = requests.get(server.url + "/v2").json()["extensions"]
    assert "system_shared_memory" in ext
    assert ext.index("model_configuration") + 1 == ext.index("system_shared_memory")
    assert ext.index("system_shared_memory") + 1 == ext.index("cuda_shared_memory")
    assert ext.index("cuda_shared_memory") + 1 == ext.index("binary_tensor_data")


# ---- registration errors ----------------------------------------------------------


def test_register_errors(server, regions):
    key = unique("reg")
    regions.create("reg", key, 64)
    base = server.url + "/v2/systemsharedmemory"

    def register(name, body):
        return requests.post(f"{base}/region/{name}/register", json=body)

    r = register("r", {"byte_size": 8})
    assert (r.status_code, error_of(r)) == (
        400, "Shared memory register request has no 'key' field")
    r = register("r", {"key": key})
    assert (r.status_code, error_of(r)) == (
        400, "Shared memory register request has no 'byte_size' field")
    r = register("r", {"key": "/osprey_no_such_region", "byte_size": 8})
    assert (r.status_code, error_of(r)) == (
        500, "Unable to open shared memory region: '/osprey_no_such_region'")
    for offset, size in ((0, 65), (1, 64), (64, 1), (65, 0)):
        r = register("r", {"key": key, "offset": offset, "byte_size": size})
        assert (r.status_code, error_of(r)) == (
            400, "failed to register shared memory region 'r': invalid args")
    r = register("r", {"key": "///", "byte_size": 8})
    assert (r.status_code, error_of(r)) == (
        400, "cannot register shared memory region 'r' - invalid shm key '///'")
    r = register("r", {"key": "/triton_python_backend_shm_region_1", "byte_size": 8})
    assert r.status_code == 400
    assert "contains the reserved prefix 'triton_python_backend_shm_region_'" in error_of(r)

    assert register("r", {"key": key, "byte_size": 64}).status_code == 200
    r = register("r", {"key": key, "byte_size": 64})
    assert (r.status_code, error_of(r)) == (
        400, "shared memory region 'r' already in manager")
    # a second region of the same object
    assert register("r2", {"key": key, "offset": 32, "byte_size": 32}).status_code == 200
    assert len(requests.get(base + "/status").json()) == 2

    r = requests.post(base + "/register", json={"key": key, "byte_size": 8})
    assert (r.status_code, error_of(r)) == (
        400, "'region name' is necessary to register system shared memory region")


def test_status_and_unregister(client, server, regions):
    key = unique("st")
    regions.create("st", key, 64)
    base = server.url + "/v2/systemsharedmemory"
    r = requests.get(base + "/region/nope/status")
    assert (r.status_code, error_of(r)) == (
        404, "Unable to find system shared memory region: 'nope'")
    assert r.headers["Content-Type"] == "application/json"
    for name in ("a", "b", "c"):
        client.register_system_shared_memory(name, key, 16)
    assert [s["name"] for s in client.get_system_shared_memory_status()] == ["a", "b", "c"]
    client.unregister_system_shared_memory("b")
    assert [s["name"] for s in client.get_system_shared_memory_status()] == ["a", "c"]
    # an unknown region unregisters without error, as in Triton
    assert requests.post(base + "/region/nope/unregister").status_code == 200
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    # the method is checked per action
    assert requests.post(base + "/status").status_code == 405
    assert requests.get(base + "/region/a/register").status_code == 405
    assert requests.get(base + "/unregister").status_code == 405
    # the regex: no trailing slash, no action-less region
    assert requests.get(base + "/status/").status_code == 404
    assert requests.get(base + "/region/status").status_code == 404


# ---- inference errors ---------------------------------------------------------------


def simple_shm_request(in_region, in_size, out_region=None, out_size=SIMPLE_BYTES,
                       in_offset=0):
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_shared_memory(in_region, in_size, offset=in_offset)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    outputs = None
    if out_region:
        o = httpclient.InferRequestedOutput("OUTPUT0")
        o.set_shared_memory(out_region, out_size)
        outputs = [o]
    return [i0, i1], outputs


def test_inference_errors(client, regions):
    key = unique("inf")
    regions.create("inf", key, 256)
    client.register_system_shared_memory("inf", key, 256)
    client.register_system_shared_memory("small", key, 16)

    def infer_error(inputs, outputs):
        with pytest.raises(InferenceServerException) as e:
            client.infer("simple", inputs, outputs=outputs)
        return e.value

    e = infer_error(*simple_shm_request("missing", SIMPLE_BYTES))
    assert e.status() == "404"
    assert e.message() == "Unable to find shared memory region: 'missing'"
    e = infer_error(*simple_shm_request("inf", SIMPLE_BYTES, in_offset=256))
    assert e.message() == "Invalid offset for shared memory region: 'inf'"
    e = infer_error(*simple_shm_request("inf", SIMPLE_BYTES, in_offset=250))
    assert e.message() == "Invalid offset + byte size for shared memory region: 'inf'"
    # the core checks the size against the tensor's (qa test_too_big_shm)
    e = infer_error(*simple_shm_request("inf", 128))
    assert e.status() == "400"
    assert ("input byte size mismatch for input 'INPUT0' for model 'simple'. "
            "Expected 64, got 128") in e.message()
    # an output region too small for the result
    e = infer_error(*simple_shm_request("inf", SIMPLE_BYTES, "small", 16))
    assert e.status() == "500"
    assert e.message() == (
        "shared memory size specified with the request for output 'OUTPUT0' "
        "(16 bytes) should be at least 64 bytes to hold the results")


def test_inference_error_messages_raw(server, regions, client):
    key = unique("raw")
    regions.create("raw", key, 64)
    client.register_system_shared_memory("raw", key, 64)
    url = server.url + "/v2/models/simple/infer"
    data = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16}
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                        "parameters": {"shared_memory_region": 7}}, data]}
    r = requests.post(url, json=body)
    assert r.status_code == 500
    assert error_of(r).startswith("Unable to parse 'shared_memory_region'")
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                        "parameters": {"shared_memory_region": "raw",
                                       "shared_memory_byte_size": 64}}, data],
            "outputs": [{"name": "OUTPUT0", "parameters": {
                "shared_memory_region": "raw", "shared_memory_byte_size": 64,
                "binary_data": True}}]}
    r = requests.post(url, json=body)
    assert (r.status_code, error_of(r)) == (
        400, "Output can't set both 'shared_memory_region' and 'binary_data'")
    # JSON outputs next to a shared memory one: the region gets the bytes
    body["outputs"] = [{"name": "OUTPUT0", "parameters": {
        "shared_memory_region": "raw", "shared_memory_byte_size": 64}},
        {"name": "OUTPUT1"}]
    shm.set_shared_memory_region(regions.handles[0], [np.arange(16, dtype=np.int32)])
    r = requests.post(url, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    out = r.json()["outputs"]
    assert out[0] == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    assert out[1]["data"] == list(range(16))
    got = shm.get_contents_as_numpy(regions.handles[0], np.int32, [16])
    assert list(got) == list(range(16))


# ---- lifetime: unregister while a request uses the region ----------------------------


def test_unregister_during_inference_waits_for_the_request(client, server, regions):
    # as qa/L0_shared_memory's test_unregister_shm_during_inference_*: input
    # and output regions stay registered (listed, and usable by another
    # request) until the requests using them are done, then go by themselves
    n = 64
    in_key, out_key = unique("inflight_in"), unique("inflight_out")
    in_h = regions.create("inflight_in", in_key, 4 * n)
    out_h = regions.create("inflight_out", out_key, 4 * n)
    x = np.arange(n, dtype=np.float32).reshape(1, n)
    shm.set_shared_memory_region(in_h, [x])
    client.register_system_shared_memory("inflight_in", in_key, 4 * n)
    client.register_system_shared_memory("inflight_out", out_key, 4 * n)
    inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
    inp.set_shared_memory("inflight_in", 4 * n)
    out = httpclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("inflight_out", 4 * n)

    results = []

    def run():
        with httpclient.InferenceServerClient(server.hostport) as c:
            results.append(c.infer("identity_slow", [inp], outputs=[out]))

    client.update_log_settings({"log_verbose_level": 1})
    since = len(server.log())
    first = threading.Thread(target=run)
    first.start()
    # The model takes 1 s: unregistered while the request is in the server.
    harness.wait_received(server, "POST", "/v2/models/identity_slow/infer", since)
    client.update_log_settings({"log_verbose_level": 0})
    client.unregister_system_shared_memory()
    names = ["inflight_in", "inflight_out"]
    assert [s["name"] for s in client.get_system_shared_memory_status()] == names
    second = threading.Thread(target=run)
    second.start()
    first.join(10)
    assert [s["name"] for s in client.get_system_shared_memory_status()] == names
    second.join(10)
    assert len(results) == 2
    got = shm.get_contents_as_numpy(out_h, np.float32, [1, n])
    np.testing.assert_array_equal(got, x)
    assert client.get_system_shared_memory_status() == []
    with pytest.raises(InferenceServerException,
                       match="Unable to find shared memory region: 'inflight_in'"):
        client.infer("identity_slow", [inp], outputs=[out])


# ---- --allow-client-shm off, and CUDA shared memory -------------------------------------


def test_client_shm_disabled_by_default(start_server, shm_repo, regions):
    server = start_server(shm_repo)
    key = unique("off")
    regions.create("off", key, 8)
    base = server.url + "/v2/systemsharedmemory"
    disabled = ("Client shared memory is disabled. Start the server with "
                "'--allow-client-shm=true' to enable.")
    assert requests.get(base + "/status").json() == []
    r = requests.post(base + "/region/off/register", json={"key": key, "byte_size": 8})
    assert (r.status_code, error_of(r)) == (501, disabled)
    r = requests.post(base + "/region/off/unregister")
    assert (r.status_code, error_of(r)) == (501, disabled)
    r = requests.post(base + "/unregister")
    assert (r.status_code, error_of(r)) == (501, disabled)
    assert requests.get(base + "/status").json() == []
    # listed all the same, as Triton lists it whatever its flags
    assert "system_shared_memory" in requests.get(server.url + "/v2").json()["extensions"]
    with httpclient.InferenceServerClient(server.hostport) as c:
        with pytest.raises(InferenceServerException, match="Client shared memory is disabled"):
            c.register_system_shared_memory("off", key, 8)
        # an inference naming a region finds none
        inputs, outputs = simple_shm_request("off", SIMPLE_BYTES)
        with pytest.raises(InferenceServerException,
                           match="Unable to find shared memory region: 'off'"):
            c.infer("simple", inputs, outputs=outputs)
    r = requests.post(server.url + "/v2/cudasharedmemory/region/g/register",
                      json={"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
    assert (r.status_code, error_of(r)) == (501, disabled)


def test_cuda_shared_memory_as_triton_without_gpus(server):
    try:
        ctypes.CDLL("libcuda.so.1")  # what the server's CUDA probe opens
        pytest.skip("a GPU driver here (test_kserve_http_cuda_shm.py)")
    except OSError:
        pass
    base = server.url + "/v2/cudasharedmemory"
    r = requests.get(base + "/status")
    assert (r.status_code, r.json()) == (200, [])
    r = requests.get(base + "/region/g/status")
    assert (r.status_code, error_of(r)) == (
        404, "Unable to find cuda shared memory region: 'g'")
    r = requests.post(base + "/region/g/register",
                      json={"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8})
    assert (r.status_code, error_of(r)) == (
        400, "failed to register CUDA shared memory region: 'g', GPUs not supported")
    assert requests.post(base + "/region/g/unregister").status_code == 200
    assert requests.post(base + "/unregister").status_code == 200
    with httpclient.InferenceServerClient(server.hostport) as c:
        assert c.get_cuda_shared_memory_status() == []


def test_restricted_shared_memory_api(start_server, shm_repo):
    server = start_server(shm_repo, ["--allow-client-shm=true",
                                     "--http-restricted-api=shared-memory:k=v"])
    for method, path in (("GET", "/v2/systemsharedmemory/status"),
                         ("POST", "/v2/systemsharedmemory/unregister"),
                         ("GET", "/v2/cudasharedmemory/status")):
        r = requests.request(method, server.url + path)
        assert (r.status_code, error_of(r)) == (
            403, "This API is restricted, expecting header 'k'")
    r = requests.get(server.url + "/v2/systemsharedmemory/status", headers={"k": "v"})
    assert (r.status_code, r.json()) == (200, [])
