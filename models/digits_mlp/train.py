#!/usr/bin/env python3
"""Train the digits_mlp example model and write 1/model.safetensors.

The model is a 64 -> 64 -> 10 multilayer perceptron (ReLU hidden layer,
softmax output) over scikit-learn's handwritten digits (8x8 images, pixel
values 0..16, 10 classes, 1797 samples). It uses numpy only, with a fixed
seed, so running this script again reproduces the committed weights (up
to rounding differences between numpy/BLAS builds).

Data, exactly as a client or test must prepare it:
    X, y = sklearn.datasets.load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)         # inputs scaled to [0, 1]
    order = np.random.RandomState(0).permutation(len(X))
    train = X[order[:-360]], y[order[:-360]]       # 1437 samples
    held_out = X[order[-360:]], y[order[-360:]]    # 360, never trained on

(RandomState's stream is fixed across numpy versions, so the split is too.
The raw order is not used directly because the last samples come from
different writers than the rest.)

Weights are stored as PyTorch's nn.Linear stores them: layers.<i>.weight is
[out, in] (row-major) and layers.<i>.bias is [out], FP32, so the dense
backend computes y = x @ W.T + b per layer.

Usage: python3 models/digits_mlp/train.py   (prints held-out accuracy)
"""

import json
import os
import struct
import sys

import numpy as np
from sklearn.datasets import load_digits

HELD_OUT = 360
HIDDEN = 64
SEED = 0
SPLIT_SEED = 0
EPOCHS = 150
BATCH = 32
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 1e-4
OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "1",
                        "model.safetensors")


def load_split():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(SPLIT_SEED).permutation(len(x))
    train, held_out = order[:-HELD_OUT], order[-HELD_OUT:]
    return (x[train], y[train]), (x[held_out], y[held_out])


def init_linear(rng, n_in, n_out):
    # nn.Linear's default initialisation: U(-1/sqrt(in), 1/sqrt(in)).
    bound = 1.0 / np.sqrt(n_in)
    w = rng.uniform(-bound, bound, size=(n_out, n_in)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(n_out,)).astype(np.float32)
    return w, b


def forward(params, x):
    (w0, b0), (w1, b1) = params
    h = np.maximum(x @ w0.T + b0, 0.0)
    logits = h @ w1.T + b1
    return h, logits


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train(x, y):
    rng = np.random.RandomState(SEED)
    params = [init_linear(rng, x.shape[1], HIDDEN), init_linear(rng, HIDDEN, 10)]
    flat = [p for layer in params for p in layer]
    m = [np.zeros_like(p) for p in flat]
    v = [np.zeros_like(p) for p in flat]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    step = 0
    onehot = np.eye(10, dtype=np.float32)[y]
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            xb, tb = x[idx], onehot[idx]
            h, logits = forward(params, xb)
            # Gradient of mean cross-entropy through softmax.
            g_logits = (softmax(logits) - tb) / len(idx)
            (w0, _), (w1, _) = params
            g_w1 = g_logits.T @ h
            g_b1 = g_logits.sum(axis=0)
            g_h = (g_logits @ w1) * (h > 0)
            g_w0 = g_h.T @ xb
            g_b0 = g_h.sum(axis=0)
            grads = [g_w0 + WEIGHT_DECAY * w0, g_b0,
                     g_w1 + WEIGHT_DECAY * w1, g_b1]
            step += 1
            for i, g in enumerate(grads):
                m[i] = beta1 * m[i] + (1 - beta1) * g
                v[i] = beta2 * v[i] + (1 - beta2) * g * g
                m_hat = m[i] / (1 - beta1 ** step)
                v_hat = v[i] / (1 - beta2 ** step)
                flat[i] -= (LEARNING_RATE * m_hat /
                            (np.sqrt(v_hat) + eps)).astype(np.float32)
    return params


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 array), written in that order."""
    header = {}
    offset = 0
    blobs = []
    for name, array in tensors:
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt", "source": "train.py"}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def main():
    (x_train, y_train), (x_test, y_test) = load_split()
    params = train(x_train, y_train)
    _, logits = forward(params, x_test)
    accuracy = float((logits.argmax(axis=1) == y_test).mean())
    print(f"held-out accuracy: {accuracy:.4f} ({HELD_OUT} samples)")
    if accuracy < 0.95:
        print("accuracy below 0.95: weights not written", file=sys.stderr)
        return 1
    (w0, b0), (w1, b1) = params
    write_safetensors(OUT_PATH, [("layers.0.weight", w0), ("layers.0.bias", b0),
                                 ("layers.1.weight", w1), ("layers.1.bias", b1)])
    print(f"wrote {OUT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
