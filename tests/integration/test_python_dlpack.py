"""GPU tensors of python models through DLPack, on the fake GPUs.

`osprey_fakegpu` is the real server over tests/fake_cuda's runtime (two
fake GPUs); the stubs load the same fake runtime as a shared library
(libosprey_fake_cudart.so, named by OSPREY_PYTHON_CUDA_RUNTIME), so that
the model py_dlpack cudaMallocs "device memory" through ctypes as a
torch.cuda model would, and hands it on with Tensor.from_dlpack. Such a
tensor travels as a CUDA IPC handle: the server maps the stub's
allocation (the fake maps the stub's memfd, as CUDA maps another
process's memory) and copies it once into the response. The reverse way,
FORCE_CPU_ONLY_INPUT_TENSORS "no" hands a GPU instance's inputs to the stub
in GPU memory. Every server here must exit with no IPC handle left open,
in the server and in its stubs (the fake reports those at exit), and the
stub must free what it lent once the server has copied it.

The DLPack structures themselves are checked against numpy, a real
DLPack producer and consumer (CPU capsules), without a server.
"""

import os
import pathlib
import re
import queue
import shutil
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness

BUILD = pathlib.Path(harness.osprey_bin()).parent
FAKE_GPU_BIN = BUILD / "osprey_fakegpu"
FAKE_RUNTIME = BUILD / "libosprey_fake_cudart.so"
STUB_DIR = harness.ROOT / "backends" / "python" / "stub"
MODELS = pathlib.Path(__file__).parent / "python_models"

needs_fake_gpus = pytest.mark.skipif(
    not FAKE_GPU_BIN.exists() or not FAKE_RUNTIME.exists(),
    reason="osprey_fakegpu and the fake runtime library are built only with "
           "the CUDA toolkit (OSPREY_CUDA)")

GPU_OUT, ROUND_TRIP, NON_CONTIGUOUS, NUMPY, DOUBLE, BLS, PASS_BACK = range(7)


def variant(repo, name, extra="", decoupled=False, placement=None):
    """A copy of py_dlpack named `name`, with `extra` config lines."""
    shutil.copytree(MODELS / "py_dlpack", repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "py_dlpack"', f'name: "{name}"')
    if placement is not None:
        text = re.sub(r"instance_group \[.*\]", placement, text)
    if decoupled:
        text += "model_transaction_policy { decoupled: true }\n"
    config.write_text(text + extra)


def start_with_fake_runtime(start_server, repo, binary):
    """The server, its stubs loading the fake runtime (they inherit the
    server's environment)."""
    saved = os.environ.get("OSPREY_PYTHON_CUDA_RUNTIME")
    os.environ["OSPREY_PYTHON_CUDA_RUNTIME"] = str(FAKE_RUNTIME)
    try:
        return start_server(
            repo, [f"--backend-config=python,python-executable={sys.executable}"],
            binary=binary)
    finally:
        if saved is None:
            del os.environ["OSPREY_PYTHON_CUDA_RUNTIME"]
        else:
            os.environ["OSPREY_PYTHON_CUDA_RUNTIME"] = saved


@pytest.fixture
def gpu_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    variant(repo, "py_dlpack")
    variant(repo, "py_dlpack_gpu_inputs",
            'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" '
            'value: { string_value: "no" } }\n')
    variant(repo, "py_dlpack_decoupled", decoupled=True)
    variant(repo, "py_dlpack_decoupled_gpu_inputs",
            'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" '
            'value: { string_value: "no" } }\n', decoupled=True)
    shutil.copytree(MODELS / "py_add_sub", repo / "py_add_sub")
    return repo


def infer(server, model, mode, values):
    client = httpclient.InferenceServerClient(server.hostport)
    inputs = [httpclient.InferInput("MODE", [1], "INT32"),
              httpclient.InferInput("IN", [len(values)], "FP32")]
    inputs[0].set_data_from_numpy(np.array([mode], np.int32))
    inputs[1].set_data_from_numpy(np.asarray(values, np.float32))
    return client.infer(model, inputs)


def stream_infer(server, model, mode, values):
    """One request of a decoupled model over a gRPC stream: its responses
    (results or errors) until the final flag."""
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    inputs = [grpcclient.InferInput("MODE", [1], "INT32"),
              grpcclient.InferInput("IN", [len(values)], "FP32")]
    inputs[0].set_data_from_numpy(np.array([mode], np.int32))
    inputs[1].set_data_from_numpy(np.asarray(values, np.float32))
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    answers = []
    while True:
        result, error = got.get(timeout=30 * harness.timeout_scale())
        if error is not None:
            answers.append(error)
            break
        if result.as_numpy("OUT") is not None:
            answers.append(result)
        final = result.get_response().parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            break
    client.stop_stream()
    client.close()
    return answers


def live_after(server, model, stream=False):
    """The model's DeviceArrays alive at the start of a plain request,
    asked until none is left (the stub frees what it lent when the
    server's RELEASE comes, right after the copy); the last count when
    some stay past the deadline."""
    last = []

    def none_left():
        if stream:
            live = int(stream_infer(server, model, NUMPY, [0.0])[0].as_numpy("LIVE")[0])
        else:
            live = int(infer(server, model, NUMPY, [0.0]).as_numpy("LIVE")[0])
        last.append(live)
        return live == 0

    try:
        harness.wait_for(none_left, f"{model}'s lent GPU tensors to be freed")
    except AssertionError:
        pass
    return last[-1]


def assert_no_open_handles(server):
    server.stop()
    log = server.log()
    assert not re.search(r"fake CUDA: .*still open", log), server.log_tail()
    assert "fake CUDA:" not in log, server.log_tail()


@needs_fake_gpus
def test_gpu_output_reaches_the_client_byte_for_byte(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    values = np.random.default_rng(7).standard_normal(1000).astype(np.float32)
    result = infer(server, "py_dlpack", GPU_OUT, values)
    assert result.as_numpy("OUT").tobytes() == values.tobytes()
    assert not result.as_numpy("IN_ON_GPU")[0]  # FORCE_CPU_ONLY_INPUT_TENSORS
    # Many in a row: each lent allocation is freed after the copy.
    for i in range(20):
        assert np.array_equal(infer(server, "py_dlpack", GPU_OUT, values[:i + 1])
                              .as_numpy("OUT"), values[:i + 1])
    assert live_after(server, "py_dlpack") == 0
    assert_no_open_handles(server)


@needs_fake_gpus
def test_to_dlpack_round_trip(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    values = np.arange(17, dtype=np.float32) * 0.5
    result = infer(server, "py_dlpack", ROUND_TRIP, values)
    np.testing.assert_array_equal(result.as_numpy("OUT"), values)
    assert live_after(server, "py_dlpack") == 0
    assert_no_open_handles(server)


@needs_fake_gpus
def test_non_contiguous_gpu_tensor_is_refused_as_triton_does(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    with pytest.raises(Exception) as failed:
        infer(server, "py_dlpack", NON_CONTIGUOUS, np.arange(8, dtype=np.float32))
    assert ("DLPack tensor is not contiguous. Only contiguous DLPack tensors "
            "that are stored in C-Order are supported.") in str(failed.value)
    assert live_after(server, "py_dlpack") == 0
    assert_no_open_handles(server)


@needs_fake_gpus
def test_gpu_tensors_as_bls_inputs(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    values = np.array([1.5, -2, 3, 4.25], np.float32)
    # a region call (a model that is not decoupled) and an inline one
    # (BLS_CALL, a decoupled model's)
    result = infer(server, "py_dlpack", BLS, values)
    np.testing.assert_array_equal(result.as_numpy("OUT"), values * 2)
    answers = stream_infer(server, "py_dlpack_decoupled", BLS, values)
    np.testing.assert_array_equal(answers[0].as_numpy("OUT"), values * 2)
    assert live_after(server, "py_dlpack") == 0
    assert live_after(server, "py_dlpack_decoupled", stream=True) == 0
    assert_no_open_handles(server)


@needs_fake_gpus
def test_decoupled_response_sender_sends_gpu_tensors(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    values = np.linspace(-1, 1, 300, dtype=np.float32)
    for mode in (GPU_OUT, ROUND_TRIP):
        answers = stream_infer(server, "py_dlpack_decoupled", mode, values)
        assert len(answers) == 1, answers
        assert answers[0].as_numpy("OUT").tobytes() == values.tobytes()
    assert live_after(server, "py_dlpack_decoupled", stream=True) == 0
    assert_no_open_handles(server)


@needs_fake_gpus
def test_force_cpu_only_input_tensors_no_hands_gpu_inputs(start_server, gpu_repo):
    server = start_with_fake_runtime(start_server, gpu_repo, FAKE_GPU_BIN)
    values = np.arange(50, dtype=np.float32) - 7
    result = infer(server, "py_dlpack_gpu_inputs", DOUBLE, values)
    assert result.as_numpy("IN_ON_GPU")[0]
    np.testing.assert_array_equal(result.as_numpy("OUT"), values * 2)
    # a GPU input handed straight back as the output (the stub copies it
    # on the GPU first: CUDA cannot export memory it mapped from another
    # process), and again into a GPU tensor of its own
    for mode in (PASS_BACK, GPU_OUT):
        result = infer(server, "py_dlpack_gpu_inputs", mode, values)
        np.testing.assert_array_equal(result.as_numpy("OUT"), values)
    # the default ("yes") keeps them on the host, as Triton does
    assert not infer(server, "py_dlpack", DOUBLE, values).as_numpy("IN_ON_GPU")[0]
    assert live_after(server, "py_dlpack_gpu_inputs") == 0
    # a decoupled model gets copies its threads may keep past execute
    for mode, want in ((DOUBLE, values * 2), (PASS_BACK, values)):
        (answer,) = stream_infer(server, "py_dlpack_decoupled_gpu_inputs", mode, values)
        assert answer.as_numpy("IN_ON_GPU")[0]
        np.testing.assert_array_equal(answer.as_numpy("OUT"), want)
    # The stub maps the server's input memory once and unmaps it at
    # finalize: the fake reports any mapping left at either side's exit.
    assert_no_open_handles(server)


def test_force_cpu_only_input_tensors_takes_yes_or_no(start_server, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    variant(repo, "py_dlpack_bad", 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" '
            'value: { string_value: "maybe" } }\n',
            placement="instance_group [ { kind: KIND_CPU } ]")
    server = start_server(repo, ["--model-control-mode=explicit",
                                 f"--backend-config=python,python-executable={sys.executable}"])
    with pytest.raises(InferenceServerException) as failed:
        httpclient.InferenceServerClient(server.hostport).load_model("py_dlpack_bad")
    assert "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: 'maybe'" in \
        failed.value.message()


@needs_fake_gpus
def test_gpu_output_on_a_server_without_gpus_fails_that_request(start_server, tmp_path):
    # The plain server (no CUDA device here); the stub still has a CUDA
    # runtime, the fake one, and returns a tensor in its GPU memory.
    repo = tmp_path / "repo"
    repo.mkdir()
    variant(repo, "py_dlpack", placement="instance_group [ { kind: KIND_CPU } ]")
    server = start_with_fake_runtime(start_server, repo, None)
    with pytest.raises(Exception) as failed:
        infer(server, "py_dlpack", GPU_OUT, [1.0, 2.0])
    message = str(failed.value)
    assert ("DLPack capsule passed pointer to memory allocated on GPU device, "
            "when GPU is not available") in message
    assert "tensor 'OUT' is in the memory of CUDA device 0" in message
    # the stub and the server carry on, and the lent tensor was released
    np.testing.assert_array_equal(
        infer(server, "py_dlpack", NUMPY, [3.0]).as_numpy("OUT"), [3.0])
    assert live_after(server, "py_dlpack") == 0
    assert_no_open_handles(server)


# ---- the DLPack structures against numpy (no server) ------------------------


@pytest.fixture
def dlpack():
    sys.path.insert(0, str(STUB_DIR))
    try:
        import osprey_dlpack
        yield osprey_dlpack
    finally:
        sys.path.remove(str(STUB_DIR))


class Producer:
    """An object with the DLPack protocol around a capsule."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_numpy_reads_the_capsules_pb_utils_makes(dlpack):
    array = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    capsule = dlpack.export_capsule(array.ctypes.data, list(array.shape), "INT16",
                                    dlpack.KDL_CPU, 0, array)
    seen = np.from_dlpack(Producer(capsule))
    np.testing.assert_array_equal(seen, array)
    assert seen.strides == array.strides  # explicit C-order strides
    del seen, capsule
    assert not dlpack._exported  # numpy called the deleter
    dlpack.export_capsule(array.ctypes.data, [24], "INT16", dlpack.KDL_CPU, 0, array)
    assert not dlpack._exported  # an unconsumed capsule deletes itself


def test_pb_utils_reads_the_capsules_numpy_makes(dlpack):
    for dtype, name in ((np.float32, "FP32"), (np.uint8, "UINT8"),
                        (np.bool_, "BOOL"), (np.int64, "INT64"), (np.float16, "FP16")):
        array = np.ones((3, 5), dtype)
        imported = dlpack.import_capsule(array.__dlpack__())
        assert (imported.ptr, imported.shape, imported.triton_dtype, imported.nbytes) == \
            (array.ctypes.data, [3, 5], name, array.nbytes)
        assert imported.device_type == dlpack.KDL_CPU
    with pytest.raises(dlpack.DLPackError, match="not contiguous"):
        dlpack.import_capsule(np.ones((4, 4), np.float32)[:, ::2].__dlpack__())
    capsule = np.ones(3).__dlpack__()
    dlpack.import_capsule(capsule)
    with pytest.raises(dlpack.DLPackError, match="must be a DLPack capsule"):
        dlpack.import_capsule(capsule)  # used already
