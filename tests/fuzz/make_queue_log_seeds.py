#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_queue_log (corpus/queue_log/): queue logs
in the format of server/queue/queue_log.h, each behind the driver's mode
byte (0: whole file, 1: header + rest, 2: header + records whose checksums
the driver sets). Run from this folder: python3 make_queue_log_seeds.py"""
import os
import struct
import zlib

HEADER = b"OSPQLOG\0" + struct.pack("<II", 1, 0)
PUT, DELETE, TRUNCATE, STATE = 1, 2, 3, 4


def name(q):
    q = q.encode()
    return struct.pack("<H", len(q)) + q


def record(kind, payload):
    crc = zlib.crc32(payload, zlib.crc32(bytes([kind])))
    return struct.pack("<II", len(payload), crc) + bytes([kind]) + payload


def s(v):
    v = v.encode()
    return struct.pack("<I", len(v)) + v


def put(q, index, data, tags=None, priority=0, rid=None):
    tags = dict(tags or {})
    tags.setdefault("requestId", rid or "rid-%d" % index)
    body = name(q) + struct.pack("<QiqI", index, priority, 1700000000, len(tags))
    for k, v in tags.items():
        body += s(k) + s(v)
    body += struct.pack("<I", len(data)) + data
    return record(PUT, body)


def delete(q, *indexes):
    return record(DELETE, name(q) + struct.pack("<I", len(indexes)) +
                  b"".join(struct.pack("<Q", i) for i in indexes))


def truncate(q, before):
    return record(TRUNCATE, name(q) + struct.pack("<Q", before))


def state(q, next_index, ended):
    return record(STATE, name(q) + struct.pack("<QB", next_index, ended))


seeds = {
    "empty.bin": b"\x00",
    "header_only.bin": b"\x00" + HEADER,
    "puts.bin": b"\x01" + put("svc", 1, b"a") + put("svc", 2, b"bb", {"k": "v"}, 1)
    + put("svc/sink", 1, b"r", rid="rid-1"),
    "mixed.bin": b"\x01" + put("svc", 1, b"a") + put("svc", 2, b"b")
    + put("svc", 3, b"c") + delete("svc", 2) + truncate("svc", 2)
    + state("svc", 10, 1) + put("svc", 10, b"after"),
    "compacted.bin": b"\x01" + put("q", 7, b"x" * 40) + state("q", 9, 0)
    + put("other", 1, b"o") + state("other", 2, 0),
    "torn_tail.bin": b"\x01" + put("svc", 1, b"whole") + put("svc", 2, b"torn")[:-3],
    "bad_crc.bin": b"\x01" + put("svc", 1, b"ok")
    + put("svc", 2, b"bad")[:-1] + b"!" + put("svc", 3, b"lost"),
    "fixup_records.bin": b"\x02" + put("svc", 1, b"a") + delete("svc", 1, 5, 9)
    + state("svc", 3, 0),
    "huge_length.bin": b"\x01" + put("svc", 1, b"a") + b"\xff\xff\xff\x7f" + b"\0" * 20,
}
os.makedirs("corpus/queue_log", exist_ok=True)
for file, data in seeds.items():
    with open(os.path.join("corpus/queue_log", file), "wb") as f:
        f.write(data)
