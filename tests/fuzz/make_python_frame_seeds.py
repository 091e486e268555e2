#!/usr/bin/env python3
"""Writes seeds for fuzz_python_frames into corpus/python_frames/: frames
as backends/python/stub/osprey_python_stub.py builds them (a RESULT with
outputs and an error, BLS requests with and without a timeout and
parameters, RESPONSE frames with data, an error and the final flag alone,
BLS_CALL frames with inline tensors, a BLS_CANCEL), each behind the
target's selector byte (0 RESULT, 1 BLS, 2 RESPONSE, 3 BLS_CALL, 4
BLS_CANCEL), GPU tensors' descriptors (Tensor.from_dlpack) among them.

    python3 tests/fuzz/make_python_frame_seeds.py
"""
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "python_frames"


def tensor(name, dtype, shape, offset, nbytes):
    name, dtype = name.encode(), dtype.encode()
    return (struct.pack("<H", len(name)) + name + struct.pack("<B", len(dtype)) + dtype +
            struct.pack("<B%dq" % len(shape), len(shape), *shape) +
            struct.pack("<QQ", offset, nbytes))


def gpu_tensor(name, dtype, shape, offset, nbytes, device, lease):
    """A GPU tensor's descriptor: rank byte with bit 7, then device id,
    lease and a 64-byte CUDA IPC handle after the byte size."""
    name, dtype = name.encode(), dtype.encode()
    return (struct.pack("<H", len(name)) + name + struct.pack("<B", len(dtype)) + dtype +
            struct.pack("<B%dq" % len(shape), len(shape) | 0x80, *shape) +
            struct.pack("<QQiQ", offset, nbytes, device, lease) + bytes(range(64)))


def error(code, message):
    message = message.encode()
    return struct.pack("<III", 1, code, len(message)) + message


def options(timeout_us=0, parameters=()):
    """A BLS request's tail: its timeout and its parameters, each (key,
    value) a str, an int or a bool."""
    out = struct.pack("<QI", timeout_us, len(parameters))
    for key, value in parameters:
        key = key.encode()
        out += struct.pack("<H", len(key)) + key
        if isinstance(value, bool):
            out += struct.pack("<BB", 2, value)
        elif isinstance(value, int):
            out += struct.pack("<Bq", 1, value)
        else:
            value = value.encode()
            out += struct.pack("<BI", 0, len(value)) + value
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    result = (struct.pack("<QI", 4096, 2) +
              struct.pack("<II", 0, 2) + tensor("OUTPUT0", "FP32", [1, 4], 0, 16) +
              tensor("OUTPUT1", "BYTES", [2], 64, 13) +
              error(3, "bad input"))
    bls = (struct.pack("<QQ", 4096, 128) + struct.pack("<H", 7) + b"add_sub" +
           struct.pack("<q", -1) + struct.pack("<H", 2) + b"r1" +
           struct.pack("<I", 1) + tensor("INPUT0", "INT32", [4], 0, 16) +
           struct.pack("<I", 1) + struct.pack("<H", 7) + b"OUTPUT0" + options())
    bls_options = (struct.pack("<QQ", 4096, 64) + struct.pack("<H", 9) + b"py_params" +
                   struct.pack("<q", 1) + struct.pack("<H", 0) + struct.pack("<I", 0) +
                   struct.pack("<I", 0) +
                   options(100000, [("s", "text"), ("i", -7), ("b", True)]))
    data = bytes(range(16))
    response = (struct.pack("<QIIQ", 0, 0, 1, len(data)) + struct.pack("<II", 0, 1) +
                tensor("OUT", "INT32", [4], 0, 16) + data)
    response_error = struct.pack("<QIIQ", 1, 1, 1, 0) + error(13, "stub failed")
    final_only = struct.pack("<QIIQ", 0, 1, 0, 0)
    call_data = bytes(range(16)) + b"\x03\x00\x00\x00abc"
    call = (struct.pack("<QBQ", 7, 0, len(call_data)) + struct.pack("<H", 10) +
            b"py_add_sub" + struct.pack("<q", -1) + struct.pack("<H", 0) +
            struct.pack("<I", 2) + tensor("INPUT0", "FP32", [4], 0, 16) +
            tensor("S", "BYTES", [1], 16, 7) +
            struct.pack("<I", 1) + struct.pack("<H", 7) + b"OUTPUT0" +
            options(5, [("k", "v")]) + call_data)
    call_decoupled = (struct.pack("<QBQ", 8, 1, 4) + struct.pack("<H", 9) +
                      b"py_square" + struct.pack("<q", 1) + struct.pack("<H", 1) +
                      b"r" + struct.pack("<I", 1) + tensor("IN", "INT32", [1], 0, 4) +
                      struct.pack("<I", 0) + options() + struct.pack("<i", 3))
    result_gpu = (struct.pack("<QI", 4096, 1) + struct.pack("<II", 0, 2) +
                  gpu_tensor("OUTPUT0", "FP32", [2, 2], 1 << 20, 16, 1, 5) +
                  tensor("OUTPUT1", "INT8", [4], 0, 4))
    call_gpu = (struct.pack("<QBQ", 9, 0, 4) + struct.pack("<H", 1) + b"m" +
                struct.pack("<q", -1) + struct.pack("<H", 0) + struct.pack("<I", 2) +
                gpu_tensor("G", "INT32", [2], 4096, 8, 0, 0) +
                tensor("H", "INT8", [4], 0, 4) + struct.pack("<I", 0) + options() +
                bytes(4))
    seeds = {"result": b"\x00" + result, "bls": b"\x01" + bls,
             "bls_options": b"\x01" + bls_options,
             "bls_cancel": b"\x04" + struct.pack("<Q", 8),
             "result_gpu": b"\x00" + result_gpu, "bls_call_gpu": b"\x03" + call_gpu,
             "bls_call": b"\x03" + call, "bls_call_decoupled": b"\x03" + call_decoupled,
             "response": b"\x02" + response, "response_error": b"\x02" + response_error,
             "final_only": b"\x02" + final_only}
    for name, frame in seeds.items():
        (OUT / f"seed_{name}.bin").write_bytes(frame)


if __name__ == "__main__":
    main()
