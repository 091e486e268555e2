#!/usr/bin/env python3
"""Makes models/digits_onnx/1/model.onnx: an MLP (64-32-10, ReLU, softmax)
trained with scikit-learn on its bundled 8x8 digits data (no download),
written as an ONNX graph (opset 13: Gemm, Relu, Gemm, Softmax) whose
first dimension is symbolic, so that Triton's auto-complete rules make it
batch. The model folder has no config.pbtxt on purpose.

    .venv/bin/python tests/onnx/make_digits_model.py [OUT]
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "models/digits_onnx/1/model.onnx"
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=400, random_state=0)
    clf.fit(x[:1500], digits.target[:1500])
    print("held-out accuracy:", clf.score(x[1500:], digits.target[1500:]))

    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    nodes = [
        helper.make_node("Gemm", ["pixels", "w1", "b1"], ["h"], name="dense1"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
        helper.make_node("Gemm", ["h_relu", "w2", "b2"], ["logits"], name="dense2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1,
                         name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                       ["batch", 10])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
         numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(b2, "b2")])
    model = helper.make_model(graph, producer_name="osprey",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
