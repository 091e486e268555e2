"""ONNX's backend test data (Debian's libonnx-testdata) through Osprey's
runtime, beside onnxruntime on the same cases.

Every suite (node, pytorch-converted, pytorch-operator, simple) is copied
into a temporary folder with its models below opset 7 converted by
onnx.version_converter (what the issue's setup asks for; the node suite is
already at 7+). Then the conformance runner (build/tests/onnx/onnx_conformance)
and onnxruntime run every case; a case passes when every output is within
rtol 1e-3, atol 1e-5 of the expected one. The test fails when a case in
tests/onnx/expected_pass_<suite>.txt does not pass, and prints, per suite,
Osprey's and onnxruntime's pass counts and the cases onnxruntime passes
and Osprey does not.
"""

import os
import pathlib
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, version_converter

import harness

DATA = pathlib.Path("/usr/share/libonnx-testdata/data")
SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]
RTOL, ATOL = 1e-3, 1e-5
TARGET_OPSET = 9  # what version_converter lifts pre-7 models to


def runner():
    return pathlib.Path(harness.osprey_bin()).parent / "tests" / "onnx" / "onnx_conformance"


def prepare_suite(suite, out):
    """Copies the suite's cases into out/, converting old opsets. Returns
    the case folders that could be prepared."""
    cases = []
    for case in sorted((DATA / suite).iterdir()):
        if not (case / "model.onnx").exists():
            continue
        dst = out / case.name
        shutil.copytree(case, dst)
        try:
            model = onnx.load(str(dst / "model.onnx"))
            opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                        default=0)
            if opset and opset < 7:
                model = version_converter.convert_version(model, TARGET_OPSET)
                onnx.save(model, str(dst / "model.onnx"))
        except Exception:  # noqa: BLE001 - a model the converter cannot lift
            shutil.rmtree(dst)
            continue
        cases.append(dst)
    return cases


def load_pb(path):
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def ort_passes(case):
    """Whether onnxruntime reproduces every data set of the case."""
    import onnxruntime as ort
    try:
        sess = ort.InferenceSession(str(case / "model.onnx"),
                                    providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        for ds in sorted(case.glob("test_data_set_*")):
            feeds = {}
            for i, name in enumerate(names):
                p = ds / f"input_{i}.pb"
                if p.exists():
                    feeds[name] = load_pb(p)
            got = sess.run(None, feeds)
            for k, g in enumerate(got):
                want = load_pb(ds / f"output_{k}.pb")
                if want.dtype == object or g.shape != want.shape:
                    return False
                if np.issubdtype(want.dtype, np.floating):
                    if not np.allclose(g, want, rtol=RTOL, atol=ATOL, equal_nan=True):
                        return False
                elif not np.array_equal(g, want):
                    return False
        return True
    except Exception:  # noqa: BLE001 - any refusal is a failure
        return False


def osprey_results(cases):
    out = subprocess.run([str(runner())] + [str(c) for c in cases],
                         capture_output=True, text=True, timeout=600)
    results = {}
    for line in out.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASS", "FAIL", "UNSUPPORTED"):
            results[rest.split(":", 1)[0]] = word
    return results


def expected(suite):
    path = harness.ROOT / "tests" / "onnx" / f"expected_pass_{suite}.txt"
    if not path.exists():
        return set()
    return {line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


@pytest.mark.skipif(not DATA.exists(), reason="libonnx-testdata is not installed")
@pytest.mark.parametrize("suite", SUITES)
def test_onnx_backend_test_data(suite, tmp_path):
    if not runner().exists():
        pytest.skip(f"{runner()} is not built")
    cases = prepare_suite(suite, tmp_path)
    ours = osprey_results(cases)
    ort = {c.name for c in cases if ort_passes(c)}
    passed = {n for n, r in ours.items() if r == "PASS"}
    missing = sorted(ort - passed)
    print(f"\n{suite}: {len(cases)} cases; Osprey passes {len(passed)}, "
          f"onnxruntime passes {len(ort)}; onnxruntime-only: {len(missing)}")
    if os.environ.get("OSPREY_ONNX_PRINT_GAPS"):
        print("\n".join(missing))
    regressed = sorted(expected(suite) - passed)
    assert not regressed, f"expected passes that fail now: {regressed}"
