"""Triton's CUDA shared memory extension over HTTP, on the fake GPUs.

`osprey_fakegpu` is the real server over the fake CUDA runtime of
tests/fake_cuda. There a CUDA IPC handle may name a POSIX shared memory
object, which the fake's cudaIpcOpenMemHandle maps as memory of the GPU
the region is registered on (see tests/fake_cuda/fake_cuda.h for the
64-byte layout). So these tests play the client process of
tritonclient's simple_http_cudashm_client.py: they "cudaMalloc" (create
an object), export it (build the raw handle), register it, write inputs
into it and read outputs from it, while the server reaches that memory only
through its CUDA device (device-to-host copies for inputs, host-to-device
for outputs; the fake checks that every such copy stays inside the mapped
allocation). tritonclient.utils.cuda_shared_memory needs a real GPU, so the
handle is built here. The real-GPU flow is in tests/gpu (label gpu).
"""

import base64
import mmap
import os
import pathlib
import re

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"
SIMPLE_BYTES = 16 * 4  # one INT32 [1,16] tensor

pytestmark = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists(),
    reason="osprey_fakegpu is built only with the CUDA toolkit (OSPREY_CUDA)")


class FakeGpuAllocation:
    """A client's "cudaMalloc" under the fake runtime: a POSIX shared memory
    object, mapped here, and its raw CUDA IPC handle (base64)."""

    def __init__(self, tag, size):
        self.name = f"/osp_cu_{os.getpid()}_{tag}"[:39]
        self.path = pathlib.Path("/dev/shm") / self.name.lstrip("/")
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.size = size

    def raw_handle(self):
        handle = (b"osprey-fake-ipc".ljust(16, b"\0") + bytes([2]) + bytes(7)
                  + self.name.encode().ljust(40, b"\0"))
        assert len(handle) == 64
        return base64.b64encode(handle).decode()

    def write(self, array, offset=0):
        data = np.ascontiguousarray(array).tobytes()
        self.map[offset:offset + len(data)] = data

    def read(self, dtype, count, offset=0):
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=offset).copy()

    def destroy(self):
        self.map.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def allocations():
    made = []

    def make(tag, size):
        a = FakeGpuAllocation(tag, size)
        made.append(a)
        return a

    yield make
    for a in made:
        a.destroy()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = harness.make_repo(tmp_path_factory.mktemp("cuda_shm_repo"), ["simple"])
    config = root / "simple" / "config.pbtxt"
    config.write_text(config.read_text()
                      + "\ninstance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n")
    return root


@pytest.fixture
def server(start_server, repo):
    return start_server(repo, ["--allow-client-shm=true", "--strict-gpu"],
                        binary=FAKE_GPU_BIN)


def mapped_in(server, alloc):
    """Whether the server process maps the object now."""
    maps = pathlib.Path(f"/proc/{server.proc.pid}/maps").read_text()
    return alloc.name.lstrip("/") in maps


def error_of(resp):
    return resp.json()["error"]


def test_simple_http_cudashm_client_flow(server, allocations):
    # simple_http_cudashm_client.py: one GPU region for both outputs, one for
    # both inputs (on GPU 0 while the model runs on GPU 1), each tensor at
    # its own offset; results read from GPU memory, status, unregister all
    out = allocations("out", 2 * SIMPLE_BYTES)
    inp = allocations("in", 2 * SIMPLE_BYTES)
    a = np.arange(16, dtype=np.int32)
    b = np.ones(16, dtype=np.int32)
    inp.write(a)
    inp.write(b, offset=SIMPLE_BYTES)
    with httpclient.InferenceServerClient(server.hostport) as client:
        client.unregister_system_shared_memory()
        client.unregister_cuda_shared_memory()
        client.register_cuda_shared_memory("output_data", out.raw_handle(), 0,
                                           2 * SIMPLE_BYTES)
        client.register_cuda_shared_memory("input_data", inp.raw_handle(), 0,
                                           2 * SIMPLE_BYTES)
        assert mapped_in(server, out) and mapped_in(server, inp)

        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("input_data", SIMPLE_BYTES)
        inputs[1].set_shared_memory("input_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
        outputs[0].set_shared_memory("output_data", SIMPLE_BYTES)
        outputs[1].set_shared_memory("output_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)
        result = client.infer("simple", inputs, outputs=outputs)
        assert result.get_output("OUTPUT0") == {
            "name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
        np.testing.assert_array_equal(out.read(np.int32, 16), a + b)
        np.testing.assert_array_equal(out.read(np.int32, 16, SIMPLE_BYTES), a - b)

        assert client.get_cuda_shared_memory_status() == [
            {"name": "input_data", "device_id": 0, "byte_size": 128},
            {"name": "output_data", "device_id": 0, "byte_size": 128},
        ]
        assert client.get_system_shared_memory_status() == []
        client.unregister_cuda_shared_memory()
        assert client.get_cuda_shared_memory_status() == []
    # unregistering closed the handles: the server maps neither any more
    assert not mapped_in(server, out) and not mapped_in(server, inp)


def test_inputs_change_between_requests_and_regions_on_either_gpu(server, allocations):
    # the region is read at each request, not cached; device_id picks the GPU
    region = allocations("both", 4 * SIMPLE_BYTES)
    url = server.url
    for device in (0, 1):
        r = requests.post(f"{url}/v2/cudasharedmemory/region/r{device}/register",
                          json={"raw_handle": {"b64": region.raw_handle()},
                                "device_id": device, "byte_size": 4 * SIMPLE_BYTES})
        assert r.status_code == 200, r.text
    for step, device in enumerate((0, 1, 0)):
        a = np.full(16, step, dtype=np.int32)
        b = np.arange(16, dtype=np.int32) * (step + 1)
        region.write(a)
        region.write(b, offset=SIMPLE_BYTES)
        name = f"r{device}"
        body = {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                 "parameters": {"shared_memory_region": name,
                                "shared_memory_byte_size": SIMPLE_BYTES}},
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
                 "parameters": {"shared_memory_region": name,
                                "shared_memory_offset": SIMPLE_BYTES,
                                "shared_memory_byte_size": SIMPLE_BYTES}}],
            "outputs": [
                {"name": "OUTPUT0",
                 "parameters": {"shared_memory_region": name,
                                "shared_memory_offset": 2 * SIMPLE_BYTES,
                                "shared_memory_byte_size": SIMPLE_BYTES}},
                {"name": "OUTPUT1"}]}
        r = requests.post(f"{url}/v2/models/simple/infer", json=body)
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["outputs"][0] == {"name": "OUTPUT0", "datatype": "INT32",
                                       "shape": [1, 16]}
        assert reply["outputs"][1]["data"] == list(a - b)
        np.testing.assert_array_equal(region.read(np.int32, 16, 2 * SIMPLE_BYTES), a + b)
    r = requests.get(f"{url}/v2/cudasharedmemory/region/r1/status")
    assert r.json() == [{"name": "r1", "device_id": 1, "byte_size": 256}]
    assert requests.post(f"{url}/v2/cudasharedmemory/region/r0/unregister").status_code == 200
    assert requests.post(f"{url}/v2/cudasharedmemory/region/r1/unregister").status_code == 200
    assert not mapped_in(server, region)


def test_register_errors(server, allocations):
    alloc = allocations("err", 128)
    base = server.url + "/v2/cudasharedmemory"

    def register(name, body):
        r = requests.post(f"{base}/region/{name}/register", json=body)
        return r.status_code, error_of(r)

    good = {"raw_handle": {"b64": alloc.raw_handle()}, "device_id": 0, "byte_size": 128}
    assert register("r", {"device_id": 0, "byte_size": 8}) == (
        400, "Shared memory register request has no 'raw_handle' field")
    assert register("r", {**good, "raw_handle": {"b64": "AAAA"}}) == (
        400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    assert register("r", {**good, "raw_handle": {"b64": "not base64!"}}) == (
        400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    # a 64-byte handle the runtime cannot open
    junk = base64.b64encode(bytes(64)).decode()
    assert register("r", {**good, "raw_handle": {"b64": junk}}) == (
        400, "failed to register shared memory region: invalid args")
    # no such GPU
    assert register("r", {**good, "device_id": 7}) == (
        400, "failed to register shared memory region: invalid args")
    # more bytes than the exported allocation has
    assert register("r", {**good, "byte_size": 129}) == (
        400, "failed to register shared memory region 'r': invalid args")
    assert not mapped_in(server, alloc)  # the failed open was closed again
    assert requests.post(f"{base}/region/r/register", json=good).status_code == 200
    assert register("r", good) == (400, "shared memory region 'r' already in manager")
    # one name space with system shared memory, as in Triton
    sysr = requests.post(server.url + "/v2/systemsharedmemory/region/r/register",
                         json={"key": "/whatever", "byte_size": 8})
    assert (sysr.status_code, error_of(sysr)) == (
        400, "shared memory region 'r' already in manager")
    r = requests.get(server.url + "/v2/systemsharedmemory/region/r/status")
    assert (r.status_code, error_of(r)) == (
        404, "The region named 'r' is registered as CUDA shared memory, "
             "not system shared memory")
    r = requests.get(f"{base}/region/nope/status")
    assert (r.status_code, error_of(r)) == (
        404, "Unable to find cuda shared memory region: 'nope'")
    # unregistering it as system shared memory leaves it
    assert requests.post(server.url + "/v2/systemsharedmemory/region/r/unregister"
                         ).status_code == 200
    assert [x["name"] for x in requests.get(f"{base}/status").json()] == ["r"]


def test_inference_errors(server, allocations):
    alloc = allocations("inf", 2 * SIMPLE_BYTES)
    with httpclient.InferenceServerClient(server.hostport) as client:
        client.register_cuda_shared_memory("small", alloc.raw_handle(), 1,
                                           SIMPLE_BYTES)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("small", SIMPLE_BYTES)
        inputs[1].set_shared_memory("small", SIMPLE_BYTES, offset=SIMPLE_BYTES)
        with pytest.raises(InferenceServerException,
                           match="Invalid offset for shared memory region: 'small'"):
            client.infer("simple", inputs)
        inputs[1] = httpclient.InferInput("INPUT1", [1, 16], "INT32")
        inputs[1].set_shared_memory("small", SIMPLE_BYTES)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
        outputs[0].set_shared_memory("small", 8)
        with pytest.raises(InferenceServerException,
                           match="should be at least 64 bytes to hold the results"):
            client.infer("simple", inputs, outputs=outputs)
        client.unregister_cuda_shared_memory("small")


def test_server_metadata_lists_cuda_shared_memory_when_it_works(server, start_server,
                                                                 repo):
    ext = requests.get(server.url + "/v2").json()["extensions"]
    i = ext.index("system_shared_memory")
    assert ext[i + 1] == "cuda_shared_memory"
    # without --allow-client-shm both are still listed (as Triton lists
    # them whatever its flags), and register is refused
    off = start_server(repo, ["--strict-gpu"], binary=FAKE_GPU_BIN)
    ext = requests.get(off.url + "/v2").json()["extensions"]
    assert "cuda_shared_memory" in ext and "system_shared_memory" in ext
    r = requests.post(off.url + "/v2/cudasharedmemory/region/g/register",
                      json={"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
    assert r.status_code == 501
    # with no GPU at all the endpoints answer as a Triton without GPUs:
    # test_kserve_http_shm.py::test_cuda_shared_memory_as_triton_without_gpus


def test_regions_still_registered_at_shutdown_are_closed(start_server, repo, allocations):
    server = start_server(repo, ["--allow-client-shm=true", "--strict-gpu"],
                          binary=FAKE_GPU_BIN)
    alloc = allocations("shut", 128)
    r = requests.post(server.url + "/v2/cudasharedmemory/region/left/register",
                      json={"raw_handle": {"b64": alloc.raw_handle()},
                            "device_id": 1, "byte_size": 128})
    assert r.status_code == 200, r.text
    server.stop()
    assert "IPC memory handle" not in server.log(), server.log_tail()
    assert not re.search(r"fake CUDA: .*still open", server.log())
