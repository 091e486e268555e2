"""Triton's CUDA shared memory RPCs over gRPC, on the fake GPUs.

The same fake CUDA allocations as test_kserve_http_cuda_shm.py (a POSIX
object the fake runtime maps as GPU memory, exported as a 64-byte raw
handle); here tritonclient.grpc registers them, so the handle travels as
protobuf bytes (the client base64-decodes what it is given).
"""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from test_kserve_http_cuda_shm import (  # noqa: F401 (fixtures)
    FAKE_GPU_BIN, SIMPLE_BYTES, allocations, mapped_in, pytestmark, repo)


@pytest.fixture
def server(start_server, repo):  # noqa: F811
    return start_server(repo, ["--allow-client-shm=true", "--strict-gpu"],
                        binary=FAKE_GPU_BIN)


def test_simple_grpc_cudashm_client_flow(server, allocations):  # noqa: F811
    # mirrors tritonclient's simple_grpc_cudashm_client.py: one GPU region
    # for the inputs, one for the outputs, status, unregister all
    out = allocations("gout", 2 * SIMPLE_BYTES)
    inp = allocations("gin", 2 * SIMPLE_BYTES)
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 3, dtype=np.int32)
    inp.write(a)
    inp.write(b, offset=SIMPLE_BYTES)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    client.register_cuda_shared_memory("output_data", out.raw_handle(), 0,
                                       2 * SIMPLE_BYTES)
    client.register_cuda_shared_memory("input_data", inp.raw_handle(), 1,
                                       2 * SIMPLE_BYTES)
    assert mapped_in(server, out) and mapped_in(server, inp)

    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
              grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("input_data", SIMPLE_BYTES)
    inputs[1].set_shared_memory("input_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
               grpcclient.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("output_data", SIMPLE_BYTES)
    outputs[1].set_shared_memory("output_data", SIMPLE_BYTES, offset=SIMPLE_BYTES)
    result = client.infer("simple", inputs, outputs=outputs)
    assert result.get_output("OUTPUT0").datatype == "INT32"  # data: in the region
    np.testing.assert_array_equal(out.read(np.int32, 16), a + b)
    np.testing.assert_array_equal(out.read(np.int32, 16, SIMPLE_BYTES), a - b)

    status = client.get_cuda_shared_memory_status(as_json=True)
    assert status["regions"] == {
        "input_data": {"name": "input_data", "device_id": "1", "byte_size": "128"},
        # protobuf JSON leaves out a field at its default (device 0)
        "output_data": {"name": "output_data", "byte_size": "128"},
    }
    only = client.get_cuda_shared_memory_status("input_data", as_json=True)
    assert list(only["regions"]) == ["input_data"]
    client.unregister_cuda_shared_memory("input_data")
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    assert not mapped_in(server, out) and not mapped_in(server, inp)
    client.close()


def test_register_errors_match_http(server, allocations):  # noqa: F811
    alloc = allocations("gerr", 128)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    junk = __import__("base64").b64encode(bytes(64))
    cases = [
        (junk, 0, 128, "failed to register shared memory region: invalid args"),
        (alloc.raw_handle(), 7, 128,
         "failed to register shared memory region: invalid args"),
        (alloc.raw_handle(), 0, 4096,
         "failed to register shared memory region 'r': invalid args"),
    ]
    for handle, device, size, message in cases:
        with pytest.raises(InferenceServerException) as e:
            client.register_cuda_shared_memory("r", handle, device, size)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert e.value.message() == message
    client.register_cuda_shared_memory("r", alloc.raw_handle(), 0, 128)
    with pytest.raises(InferenceServerException) as e:
        client.register_cuda_shared_memory("r", alloc.raw_handle(), 0, 128)
    assert e.value.status() == "StatusCode.ALREADY_EXISTS"
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status("r")
    assert "registered as CUDA shared memory" in e.value.message()
    client.unregister_cuda_shared_memory("r")
    assert not mapped_in(server, alloc)
    client.close()
