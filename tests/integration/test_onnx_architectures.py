"""Standard architectures (ResNet-18, MobileNetV2, a 2-layer BERT encoder,
an MLP; random weights, tests/onnx/architectures.py) through Osprey's
runtime, compared with onnxruntime at batch 1 and 8 (BERT also at two
sequence lengths): largest error within 1e-4 of the reference's scale.

The graphs are written node by node with the onnx package in the shapes
torch's exporter gives; with PyPI torch and torchvision installed, the CNNs
and the MLP are exported by torch itself instead (OSPREY_TORCH_EXPORT=1).
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import harness

sys.path.insert(0, str(harness.ROOT / "tests" / "onnx"))
import architectures  # noqa: E402

CASES = [("mlp", 1, None), ("mlp", 8, None),
         ("resnet18", 1, None), ("resnet18", 8, None),
         ("mobilenet_v2", 1, None), ("mobilenet_v2", 8, None),
         ("bert", 1, 16), ("bert", 8, 16), ("bert", 1, 40), ("bert", 8, 40)]


def runner():
    return pathlib.Path(harness.osprey_bin()).parent / "tests" / "onnx" / "onnx_conformance"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("architectures")
    torch = os.environ.get("OSPREY_TORCH_EXPORT") == "1"
    return {n: architectures.write(n, out, prefer_torch=torch) for n in architectures.BUILDERS}


def write_case(dst, model_path, feeds):
    """An ONNX backend-test case: model + inputs + onnxruntime's outputs."""
    import onnxruntime as ort
    dst.mkdir(parents=True)
    (dst / "model.onnx").symlink_to(model_path)
    ds = dst / "test_data_set_0"
    ds.mkdir()
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for i, name in enumerate(names):
        (ds / f"input_{i}.pb").write_bytes(
            numpy_helper.from_array(feeds[name], name).SerializeToString())
    outs = sess.run(None, {n: feeds[n] for n in names})
    for k, arr in enumerate(outs):
        (ds / f"output_{k}.pb").write_bytes(numpy_helper.from_array(arr).SerializeToString())
    return float(max(np.abs(o).max() for o in outs))


@pytest.mark.parametrize("name,batch,seq", CASES,
                         ids=[f"{n}-b{b}" + (f"-s{s}" if s else "") for n, b, s in CASES])
def test_architecture_matches_onnxruntime(models, tmp_path, name, batch, seq):
    if not runner().exists():
        pytest.skip(f"{runner()} is not built")
    feeds = architectures.feeds(name, batch, seq=seq or 16)
    case = tmp_path / f"{name}_b{batch}"
    scale = write_case(case, models[name], feeds)
    # max error <= 1e-4 relative to the output's scale
    out = subprocess.run([str(runner()), "--rtol", "1e-4", "--atol", str(1e-4 * scale),
                          str(case)], capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("PASS"), out.stdout + out.stderr
