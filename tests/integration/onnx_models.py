"""Small ONNX graphs built with the onnx package (random weights, fixed
seeds) for the serving tests, and the reference numbers from onnxruntime.

Each builder returns a ModelProto with a symbolic batch dim ("batch") so
that Triton's auto-complete makes it batch; seq-length models also have a
symbolic "seq" dim.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def _model(nodes, inputs, outputs, inits, opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, producer_name="osprey-tests",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp(in_dim=16, hidden=32, out_dim=4, seed=0):
    """x[batch, in] -> Gemm -> Relu -> MatMul+Add -> y[batch, out]."""
    rng = np.random.default_rng(seed)
    inits = {
        "w1": rng.standard_normal((in_dim, hidden)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(hidden).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((hidden, out_dim)).astype(np.float32) * 0.3,
        "b2": rng.standard_normal(out_dim).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["y0"], name="fc2"),
        helper.make_node("Add", ["y0", "b2"], ["y"], name="bias2"),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", in_dim])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out_dim])],
                  inits)


def cnn(channels=8, classes=5, seed=1):
    """image[batch, 3, 16, 16] -> Conv+BN+Relu -> MaxPool -> Conv (+residual)
    -> GlobalAveragePool -> Flatten -> Gemm -> logits[batch, classes]."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = {
        "w1": rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(c).astype(np.float32) * 0.1,
        "bn_s": (1 + 0.1 * rng.standard_normal(c)).astype(np.float32),
        "bn_b": (0.1 * rng.standard_normal(c)).astype(np.float32),
        "bn_m": (0.1 * rng.standard_normal(c)).astype(np.float32),
        "bn_v": (1 + 0.1 * rng.random(c)).astype(np.float32),
        "w2": rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2,
        "wf": rng.standard_normal((classes, c)).astype(np.float32) * 0.3,
        "bf": rng.standard_normal(classes).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"],
                         ["n1"], epsilon=1e-5, name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool1"),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["s2"], name="residual"),
        helper.make_node("Relu", ["s2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1, name="fc"),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                 ["batch", 3, 16, 16])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                 ["batch", classes])],
                  inits)


def attention(hidden=16, seed=2):
    """x[batch, seq, hidden] -> one self-attention head with the shape
    arithmetic transformer exports carry (Shape, Gather, Unsqueeze,
    Concat, Reshape) -> LayerNorm(x + attn) -> y[batch, seq, hidden]."""
    rng = np.random.default_rng(seed)
    h = hidden
    inits = {
        "wq": rng.standard_normal((h, h)).astype(np.float32) * 0.2,
        "wk": rng.standard_normal((h, h)).astype(np.float32) * 0.2,
        "wv": rng.standard_normal((h, h)).astype(np.float32) * 0.2,
        "scale": np.array(1.0 / np.sqrt(h), dtype=np.float32),
        "gamma": (1 + 0.1 * rng.standard_normal(h)).astype(np.float32),
        "beta": (0.1 * rng.standard_normal(h)).astype(np.float32),
        "idx0": np.array(0, dtype=np.int64),
        "idx1": np.array(1, dtype=np.int64),
        "axes0": np.array([0], dtype=np.int64),
        "minus1": np.array([-1], dtype=np.int64),
        "two": np.array(2.0, dtype=np.float32),
        "eps": np.array(1e-5, dtype=np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["qks"]),
        helper.make_node("Softmax", ["qks"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["att"]),
        # shape arithmetic: reshape att to [batch, seq, -1] computed from x
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "idx0"], ["b"], axis=0),
        helper.make_node("Gather", ["xs", "idx1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["bu"]),
        helper.make_node("Unsqueeze", ["s", "axes0"], ["su"]),
        helper.make_node("Concat", ["bu", "su", "minus1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["att", "newshape"], ["att2"]),
        helper.make_node("Add", ["x", "att2"], ["res"]),
        # LayerNorm as torch's legacy exporter writes it
        helper.make_node("ReduceMean", ["res"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["res", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["nrm"]),
        helper.make_node("Mul", ["nrm", "gamma"], ["ng"]),
        helper.make_node("Add", ["ng", "beta"], ["y"]),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                 ["batch", "seq", h])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                 ["batch", "seq", h])],
                  inits)


def reference(model, feeds):
    """The outputs onnxruntime computes for `feeds` ({name: array})."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
