"""The CUDA device is a module that osprey loads only where a GPU is
(server/cuda_module.c): on a host without an NVIDIA driver the process maps
no CUDA library at all, and with a driver that reports a GPU (here a
libcuda.so.1 look-alike, tests/integration/fake_cuda_driver) it loads
libosprey_cuda.so and asks the CUDA runtime for devices."""

import os

import pytest
import requests

import harness

BUILD_DIR = os.path.dirname(harness.osprey_bin())
MODULE = os.path.join(BUILD_DIR, "libosprey_cuda.so")
FAKE_DRIVER_DIR = os.path.join(BUILD_DIR, "tests", "fake_cuda_driver")

pytestmark = pytest.mark.skipif(
    not os.path.exists(MODULE),
    reason="the CUDA device module is built only with the CUDA toolkit (OSPREY_CUDA)")

CUDA_LIBRARIES = ("libcudart", "libcublas", "libcuda.so")


def mapped_cuda_libraries(pid):
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted(p for p in paths if any(n in os.path.basename(p) for n in CUDA_LIBRARIES))


def simple_infer(srv):
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}
    r = requests.post(f"{srv.url}/v2/models/simple/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [i + 1 for i in range(16)]


def driver_present():
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")  # what the probe opens
        return True
    except OSError:
        return False


@pytest.fixture
def fake_driver(monkeypatch):
    """The build's look-alike libcuda.so.1 first on the library path."""
    if not os.path.exists(os.path.join(FAKE_DRIVER_DIR, "libcuda.so.1")):
        pytest.skip("fake driver not built (cmake --build build --target fake_cuda_driver)")
    monkeypatch.setenv("LD_LIBRARY_PATH",
                       FAKE_DRIVER_DIR + ":" + os.environ.get("LD_LIBRARY_PATH", ""))


@pytest.mark.skipif(driver_present(), reason="this host has an NVIDIA driver")
def test_no_driver_maps_no_cuda_library(start_server, tmp_path):
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]), ["--log-verbose=1"])
    assert mapped_cuda_libraries(srv.pid) == []
    assert "no NVIDIA driver" in srv.log()
    simple_infer(srv)


def test_driver_with_a_gpu_loads_the_module(start_server, tmp_path, fake_driver):
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]), ["--log-verbose=1"])
    log = srv.log()
    assert "CUDA device module loaded (1 GPU(s))" in log
    mapped = " ".join(mapped_cuda_libraries(srv.pid))
    with open(f"/proc/{srv.pid}/maps") as f:
        assert "libosprey_cuda.so" in f.read()
    assert "libcudart" in mapped
    # The look-alike driver has nothing behind the probe: the runtime finds
    # CUDA unusable and the model runs on the CPU.
    simple_infer(srv)


def test_module_path_from_the_environment(start_server, tmp_path, fake_driver,
                                           monkeypatch):
    monkeypatch.setenv("OSPREY_CUDA_MODULE", str(tmp_path / "missing.so"))
    srv = start_server(harness.make_repo(tmp_path / "repo", ["simple"]))
    assert "could not be loaded; models run on the CPU" in srv.log()
    # Only the (look-alike) driver the probe opened is mapped.
    assert all(p.startswith(FAKE_DRIVER_DIR) for p in mapped_cuda_libraries(srv.pid))
    simple_infer(srv)
