#!/usr/bin/env python3
"""Standard architectures as ONNX graphs with random weights (no download),
for the real-architecture tests and tests/bench/onnx_bench.py:

  resnet18     torchvision's ResNet-18 (1000 classes, 224x224)
  mobilenet_v2 torchvision's MobileNetV2 (width 1.0, 224x224)
  bert         a 2-layer BERT encoder, hidden 128, 2 heads, intermediate
               512, with input_ids, attention_mask and token_type_ids
  mlp          784-512-512-10 with ReLU

With PyPI torch and torchvision importable, `export_torch` writes the same
models through torch.onnx.export (what a user's repository holds); without
them, `build` writes them node by node with the onnx package in the shapes
torch's exporter gives (opset 13: Conv/BatchNormalization unfused,
Clip(0, 6), Gemm, torch's LayerNorm and Gelu subgraphs, the attention
mask arithmetic), so the runtime sees the same patterns either way.

    python tests/onnx/architectures.py OUT_DIR [names...]
"""

import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class Graph:
    """Collects nodes and initializers with unique names."""

    def __init__(self, seed):
        self.nodes, self.inits = [], []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base, arr):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def weight(self, base, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else np.sqrt(2.0 / max(fan_in, 1))
        return self.const(base, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs,
                                           name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs, outputs):
        g = helper.make_graph(self.nodes, "g", inputs, outputs, self.inits)
        m = helper.make_model(g, producer_name="osprey-architectures",
                              opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m

    # -- layers -------------------------------------------------------------

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu"):
        w = self.weight("conv_w", (cout, cin // group, k, k))
        y = self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=group)
        c = cout
        scale = self.const("bn_scale", (1 + 0.1 * self.rng.standard_normal(c)).astype(np.float32))
        bias = self.const("bn_bias", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const("bn_mean", (0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const("bn_var", (1 + 0.1 * self.rng.random(c)).astype(np.float32))
        y = self.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        if act == "relu":
            y = self.op("Relu", [y])
        elif act == "relu6":
            y = self.op("Clip", [y, self.const("zero", np.array(0, np.float32)),
                                 self.const("six", np.array(6, np.float32))])
        return y

    def linear(self, x, cin, cout):
        w = self.weight("fc_w", (cout, cin), scale=1.0 / np.sqrt(cin))
        b = self.const("fc_b", (0.01 * self.rng.standard_normal(cout)).astype(np.float32))
        return self.op("Gemm", [x, w, b], transB=1)


def resnet18(seed=0):
    g = Graph(seed)
    x = g.conv_bn("input", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = g.conv_bn(x, cin, cout, 3, stride=s)
            y = g.conv_bn(y, cout, cout, 3, act=None)
            if s != 1 or cin != cout:
                x = g.conv_bn(x, cin, cout, 1, stride=s, act=None)
            x = g.op("Relu", [g.op("Add", [y, x])])
            cin = cout
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    out = g.linear(x, 512, 1000)
    g.nodes[-1].output[0] = "output"
    return g.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])])


def mobilenet_v2(seed=1):
    g = Graph(seed)
    x = g.conv_bn("input", 3, 32, 3, stride=2, act="relu6")
    cin = 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = g.conv_bn(y, cin, hidden, 1, act="relu6")
            y = g.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden, act="relu6")
            y = g.conv_bn(y, hidden, c, 1, act=None)
            if stride == 1 and cin == c:
                y = g.op("Add", [x, y])
            x, cin = y, c
    x = g.conv_bn(x, cin, 1280, 1, act="relu6")
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    g.linear(x, 1280, 1000)
    g.nodes[-1].output[0] = "output"
    return g.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])])


def _layer_norm(g, x, hidden):
    """torch's legacy LayerNorm export."""
    mean = g.op("ReduceMean", [x], axes=[-1])
    d = g.op("Sub", [x, mean])
    var = g.op("ReduceMean", [g.op("Pow", [d, g.const("two", np.array(2, np.float32))])],
               axes=[-1])
    sd = g.op("Sqrt", [g.op("Add", [var, g.const("eps", np.array(1e-12, np.float32))])])
    y = g.op("Div", [d, sd])
    y = g.op("Mul", [y, g.const("ln_g", (1 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32))])
    return g.op("Add", [y, g.const("ln_b", (0.1 * g.rng.standard_normal(hidden)).astype(np.float32))])


def _gelu(g, x):
    """torch's exact Gelu export: x * 0.5 * (1 + erf(x / sqrt 2))."""
    e = g.op("Erf", [g.op("Div", [x, g.const("sqrt2", np.array(np.sqrt(2), np.float32))])])
    e = g.op("Add", [e, g.const("one", np.array(1, np.float32))])
    return g.op("Mul", [g.op("Mul", [x, e]), g.const("half", np.array(0.5, np.float32))])


def _dense(g, x, cin, cout):
    w = g.weight("w", (cin, cout), scale=1.0 / np.sqrt(cin))
    b = g.const("b", (0.02 * g.rng.standard_normal(cout)).astype(np.float32))
    return g.op("Add", [g.op("MatMul", [x, w]), b])


def bert(layers=2, hidden=128, heads=2, intermediate=512, vocab=1000, max_pos=512, seed=2):
    g = Graph(seed)
    hd = hidden // heads
    word = g.weight("word_emb", (vocab, hidden), scale=0.02)
    pos = g.weight("pos_emb", (max_pos, hidden), scale=0.02)
    typ = g.weight("type_emb", (2, hidden), scale=0.02)
    ids_shape = g.op("Shape", ["input_ids"])
    seq = g.op("Gather", [ids_shape, g.const("i1", np.array(1, np.int64))], axis=0)
    positions = g.op("Range", [g.const("zero", np.array(0, np.int64)), seq,
                               g.const("step", np.array(1, np.int64))])
    positions = g.op("Unsqueeze", [positions, g.const("ax0", np.array([0], np.int64))])
    x = g.op("Add", [g.op("Gather", [word, "input_ids"], axis=0),
                     g.op("Gather", [pos, positions], axis=0)])
    x = g.op("Add", [x, g.op("Gather", [typ, "token_type_ids"], axis=0)])
    x = _layer_norm(g, x, hidden)
    # attention mask: (1 - mask) * -10000, shaped [batch, 1, 1, seq]
    m = g.op("Unsqueeze", ["attention_mask", g.const("ax12", np.array([1, 2], np.int64))])
    m = g.op("Cast", [m], to=TensorProto.FLOAT)
    m = g.op("Mul", [g.op("Sub", [g.const("one", np.array(1, np.float32)), m]),
                     g.const("neg", np.array(-10000, np.float32))])
    for _ in range(layers):
        shape = g.op("Shape", [x])
        b = g.op("Gather", [shape, g.const("i0", np.array(0, np.int64))], axis=0)
        s = g.op("Gather", [shape, g.const("i1", np.array(1, np.int64))], axis=0)
        bu = g.op("Unsqueeze", [b, g.const("a0", np.array([0], np.int64))])
        su = g.op("Unsqueeze", [s, g.const("a0", np.array([0], np.int64))])
        split_shape = g.op("Concat", [bu, su, g.const("hh", np.array([heads, hd], np.int64))],
                           axis=0)
        merge_shape = g.op("Concat", [bu, su, g.const("h", np.array([hidden], np.int64))],
                           axis=0)

        def heads_of(t):
            return g.op("Transpose", [g.op("Reshape", [t, split_shape])], perm=[0, 2, 1, 3])

        q = heads_of(_dense(g, x, hidden, hidden))
        k = g.op("Transpose", [g.op("Reshape", [_dense(g, x, hidden, hidden), split_shape])],
                 perm=[0, 2, 3, 1])
        v = heads_of(_dense(g, x, hidden, hidden))
        scores = g.op("Div", [g.op("MatMul", [q, k]),
                              g.const("sqrt_d", np.array(np.sqrt(hd), np.float32))])
        probs = g.op("Softmax", [g.op("Add", [scores, m])], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_shape])
        x = _layer_norm(g, g.op("Add", [_dense(g, ctx, hidden, hidden), x]), hidden)
        h = _gelu(g, _dense(g, x, hidden, intermediate))
        x = _layer_norm(g, g.op("Add", [_dense(g, h, intermediate, hidden), x]), hidden)
    g.nodes[-1].output[0] = "last_hidden_state"
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    return g.model(ins, [helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])])


def mlp(seed=3):
    g = Graph(seed)
    x = "input"
    for cin, cout in ((784, 512), (512, 512)):
        x = g.op("Relu", [g.linear(x, cin, cout)])
    g.linear(x, 512, 10)
    g.nodes[-1].output[0] = "output"
    return g.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 784])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])])


BUILDERS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "bert": bert, "mlp": mlp}


def feeds(name, batch, seq=16, seed=0):
    """Inputs for a model: {name: array}."""
    rng = np.random.default_rng(seed)
    if name in ("resnet18", "mobilenet_v2"):
        return {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    if name == "mlp":
        return {"input": rng.standard_normal((batch, 784)).astype(np.float32)}
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4:] = 0  # padding at the end
    return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
            "attention_mask": mask,
            "token_type_ids": (np.arange(seq)[None, :] >= seq // 2).astype(np.int64)
            .repeat(batch, 0)}


def export_torch(name, path):
    """The same model through torch.onnx.export, when torch is there.
    Returns False when torch or torchvision is missing."""
    try:
        import torch
        import torchvision
    except ImportError:
        return False
    torch.manual_seed(0)
    if name == "resnet18":
        net, args = torchvision.models.resnet18(), (torch.randn(1, 3, 224, 224),)
        names, dyn = ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}
    elif name == "mobilenet_v2":
        net, args = torchvision.models.mobilenet_v2(), (torch.randn(1, 3, 224, 224),)
        names, dyn = ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}
    elif name == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                  torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                  torch.nn.Linear(512, 10))
        args, names = (torch.randn(1, 784),), ["input"]
        dyn = {"input": {0: "batch"}, "output": {0: "batch"}}
    else:
        return False  # BERT needs transformers; the built graph stands in
    net.eval()
    torch.onnx.export(net, args, str(path), input_names=names, output_names=["output"],
                      dynamic_axes=dyn, opset_version=OPSET)
    return True


def write(name, out_dir, prefer_torch=False):
    path = pathlib.Path(out_dir) / f"{name}.onnx"
    if not (prefer_torch and export_torch(name, path)):
        onnx.save(BUILDERS[name](), str(path))
    return path


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[2:] or list(BUILDERS):
        print(write(n, out))
