"""Writes FP32 weights in the safetensors format the dense backend reads
(used by the benchmarks and the GPU check to make random models)."""
import json
import struct


def write_safetensors(path, tensors):
    """tensors: [(name, shape, values)], values with .tobytes() giving
    little-endian float32 (array('f') or a '<f4' numpy array)."""
    header, blobs, offset = {}, [], 0
    for name, shape, values in tensors:
        data = values.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
