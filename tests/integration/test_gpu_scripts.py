"""The Python parts of tests/gpu/check.sh, tried on a host without a GPU:
check.sh parses (bash -n), e2e_onnx.py's --dry-run (every model on the
CPU) generates its models, checks the served outputs against onnxruntime
and prints the throughput rows check.sh reads (graphs off and on, TF32 and
FP16), and e2e_python_dlpack.py passes its checks over the fake GPUs (as
check.sh's dry run runs it)."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import harness

sys.path.insert(0, str(harness.ROOT / "tests" / "gpu"))
import e2e_onnx  # noqa: E402
import e2e_python_dlpack  # noqa: E402

LOAD_CLIENT = pathlib.Path(harness.osprey_bin()).parent / "tests" / "bench" / "load_client"
FAKE_GPU_BIN = pathlib.Path(harness.osprey_bin()).parent / "osprey_fakegpu"
FAKE_RUNTIME = pathlib.Path(harness.osprey_bin()).parent / "libosprey_fake_cudart.so"


def test_check_sh_parses():
    subprocess.run(["bash", "-n", str(harness.ROOT / "tests" / "gpu" / "check.sh")], check=True)


def test_tolerances_hold_per_precision():
    """The largest error relative to the output's largest magnitude (at
    least 1): 1e-4 for FP32, 2e-3 for TF32 and FP16."""
    want = np.array([1.0, -2.0, 100.0], np.float32)
    assert e2e_onnx.within(want + 5e-3, want, "fp32")[1]
    assert not e2e_onnx.within(want + 0.05, want, "fp32")[1]
    assert e2e_onnx.within(want + 0.15, want, "tf32")[1]
    assert not e2e_onnx.within(want * 1.01, want, "fp16")[1]
    assert not e2e_onnx.within(want[:2], want, "tf32")[1]
    small = np.array([0.5, -0.25], np.float32)  # scale 1: absolute
    assert e2e_onnx.within(small + 1.5e-3, small, "fp16")[1]
    assert not e2e_onnx.within(small + 3e-3, small, "fp16")[1]


def test_request_body_round_trips():
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
             "b": np.array([[7]], np.int64)}
    body, ihcl = e2e_onnx.request_body(feeds, ["y"])
    header = body[:ihcl].decode()
    assert '"binary_data_size":24' in header and '"binary_data_size":8' in header
    assert body[ihcl:] == feeds["a"].tobytes() + feeds["b"].tobytes()


@pytest.mark.skipif(not LOAD_CLIENT.exists(), reason="tests/bench/load_client not built")
def test_e2e_onnx_dry_run(capsys):
    rc = e2e_onnx.main(["--osprey", harness.osprey_bin(), "--load-client", str(LOAD_CLIENT),
                        "--archs", "mlp", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = re.findall(r"^CHECK onnx model=(\S+) batch=(\d+) .* ok=(\d)$", out, re.M)
    assert len(checks) == 2 * len(e2e_onnx.VARIANTS), out
    assert all(ok == "1" for _, _, ok in checks), out
    rows = re.findall(r"^RESULT onnx arch=mlp graphs=(on|off) batch=(\d+) p50_ms=\S+ "
                      r"infer_per_s=(\S+)$", out, re.M)
    assert sorted((g, b) for g, b, _ in rows) == [("off", "1"), ("off", "2"),
                                                  ("on", "1"), ("on", "2")], out
    assert all(float(v) > 0 for _, _, v in rows)
    # TF32 and FP16 throughput, at every batch but the smallest
    prec = re.findall(r"^RESULT onnx_prec arch=mlp prec=(tf32|fp16) batch=(\d+) "
                      r"p50_ms=\S+ infer_per_s=(\S+)$", out, re.M)
    assert sorted((p, b) for p, b, _ in prec) == [("fp16", "2"), ("tf32", "2")], out
    assert all(float(v) > 0 for _, _, v in prec)


@pytest.mark.skipif(not FAKE_GPU_BIN.exists() or not FAKE_RUNTIME.exists(),
                    reason="osprey_fakegpu is built only with the CUDA toolkit")
def test_e2e_python_dlpack_over_the_fake_gpus(capsys):
    rc = e2e_python_dlpack.main(["--osprey", str(FAKE_GPU_BIN), "--cuda-runtime",
                                 str(FAKE_RUNTIME), "--repeat", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    checks = re.findall(r"^CHECK python_dlpack name=(\S+) ok=(\d)", out, re.M)
    assert len(checks) == 10 and all(ok == "1" for _, ok in checks), out
    assert re.search(r"^RESULT python_dlpack mib=4 gpu_p50_ms=\S+ numpy_p50_ms=\S+$",
                     out, re.M), out
