"""The HTTP wire contract, driven with `requests` and raw sockets: every
framing rule and error message of the protocol reference
(../shared/protocols/kserve-triton-http-grpc.md, sections 0-3 and 7).

Where the reference quotes a string, the test compares the exact string (the
whole body when the reference gives the whole body, `in` otherwise, since
core errors may carry a "[request id: ...] " prefix)."""

import gzip
import io
import json
import socket
import struct
import threading
import time
import zlib

import numpy as np
import pytest
import requests

import harness

MIB = 1 << 20
DEFAULT_LIMIT = 64 * MIB
RAISED_LIMIT = 128 * MIB

SEQ = list(range(1, 17))
SUM = [2 * x for x in SEQ]
ZEROS = [0] * 16


# ---- helpers -------------------------------------------------------------------


def infer_url(srv, model, version=None):
    if version is None:
        return f"{srv.url}/v2/models/{model}/infer"
    return f"{srv.url}/v2/models/{model}/versions/{version}/infer"


def post(srv, model, body, headers=None, version=None, **kw):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    kw.setdefault("timeout", 120)
    return requests.post(infer_url(srv, model, version), data=body, headers=headers or {}, **kw)


def error_of(r):
    return r.json()["error"]


def assert_error(r, status, message, exact=True):
    """status and JSON error; exact=True compares the whole body."""
    assert r.status_code == status, (r.status_code, r.text[:2000])
    if exact:
        assert r.text == json.dumps({"error": message}, separators=(",", ":"), ensure_ascii=False), \
            r.text[:2000]
    else:
        assert message in error_of(r), (message, r.text[:2000])


def split_body(r):
    """(header dict, header text, blob bytes) of an infer response."""
    ihcl = r.headers.get("Inference-Header-Content-Length")
    if ihcl is None:
        return r.json(), r.text, b""
    n = int(ihcl)
    return json.loads(r.content[:n]), r.content[:n].decode(), r.content[n:]


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


def simple_json_inputs(n0=16, n1=16, with_in1=True):
    ins = [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(1, n0 + 1))}]
    if with_in1:
        ins.append({"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
                    "data": list(range(1, n1 + 1))})
    return ins


def i32(values):
    return np.array(values, dtype="<i4").tobytes()


def f32(values):
    return np.array(values, dtype="<f4").tobytes()


def bytes_tensor(items):
    return b"".join(struct.pack("<I", len(s)) + s for s in items)


def live(srv):
    return requests.get(srv.url + "/v2/health/live", timeout=10).status_code == 200


FORM = {"Content-Type": "application/x-www-form-urlencoded"}  # what curl -d sends


def exact_json(srv_model, outputs, version="1", rid=None, params=None):
    d = {}
    if rid:
        d["id"] = rid
    d["model_name"] = srv_model
    d["model_version"] = version
    if params:
        d["parameters"] = params
    d["outputs"] = outputs
    return compact(d)


def json_out(name, dtype, shape, data):
    return {"name": name, "datatype": dtype, "shape": shape, "data": data}


def bin_out(name, dtype, shape, size):
    return {"name": name, "datatype": dtype, "shape": shape, "parameters": {"binary_data_size": size}}


# ---- §1 endpoints, routing, methods ----------------------------------------------------


NOT_FOUND = '{"error":"Not Found"}'


@pytest.mark.parametrize("method,path", [
    ("GET", "/"),
    ("GET", "/v2/nothing"),
    ("GET", "/v2/health"),
    ("GET", "/v2/health/live/"),
    ("GET", "/v2/health/alive"),
    ("GET", "/v2/models"),
    ("GET", "/v2/models/simple/"),
    ("GET", "/v2/models/simple/versions/abc/ready"),
    ("POST", "/v2/models/simple/versions/abc/infer"),
    ("POST", "/v2/models/simple/versions/-1/infer"),
    ("GET", "/v2/models/simple/versions/"),
    ("POST", "/v2/models/simple/infer/extra"),
    ("GET", "/v2/models/simple/metadata"),
    ("POST", "/v2/repository/models/simple/reload"),
    ("GET", "/v3"),
])
def test_unknown_path_404(qa_server, method, path):
    r = requests.request(method, qa_server.url + path, timeout=10)
    assert r.status_code == 404, (path, r.status_code, r.text)
    assert r.text == NOT_FOUND


@pytest.mark.parametrize("method,path", [
    ("GET", "/v2/models/simple/infer"),
    ("PUT", "/v2/models/simple/infer"),
    ("DELETE", "/v2/models/simple/infer"),
    ("POST", "/v2/health/live"),
    ("POST", "/v2/health/ready"),
    ("POST", "/v2"),
    ("POST", "/v2/models/simple"),
    ("POST", "/v2/models/simple/ready"),
    ("POST", "/v2/models/simple/config"),
    ("GET", "/v2/repository/index"),
    ("GET", "/v2/repository/models/simple/load"),
    ("GET", "/v2/repository/models/simple/unload"),
])
def test_wrong_method_405(qa_server, method, path):
    r = requests.request(method, qa_server.url + path, timeout=10)
    assert r.status_code == 405, (method, path, r.status_code, r.text)
    assert r.text == '{"error":"Method Not Allowed"}'


def test_health_endpoints(qa_server):
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/simple/ready",
                 "/v2/models/simple/versions/1/ready"):
        r = requests.get(qa_server.url + path)
        assert r.status_code == 200, (path, r.text)
        assert r.content == b""
        assert "Content-Type" not in r.headers, (path, r.headers)
    # The query string is not part of the route.
    assert requests.get(qa_server.url + "/v2/health/live?verbose=1").status_code == 200


def test_server_metadata_compact(qa_server):
    r = requests.get(qa_server.url + "/v2")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    meta = r.json()
    assert list(meta)[:3] == ["name", "version", "extensions"]
    assert r.text == compact(meta)


def test_model_metadata_exact(qa_server):
    r = requests.get(qa_server.url + "/v2/models/simple")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    tensor = lambda n: {"name": n, "datatype": "INT32", "shape": [-1, 16]}  # noqa: E731
    assert r.text == compact({
        "name": "simple", "versions": ["1"], "platform": "add_sub",
        "inputs": [tensor("INPUT0"), tensor("INPUT1")],
        "outputs": [tensor("OUTPUT0"), tensor("OUTPUT1")]})
    # No batch dimension when max_batch_size is 0.
    meta = requests.get(qa_server.url + "/v2/models/identity_nobatch").json()
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}]
    # STRING is BYTES on the wire.
    meta = requests.get(qa_server.url + "/v2/models/onnx_zero_1_object_1_element").json()
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, 1]}]


def test_model_config_json(qa_server):
    r = requests.get(qa_server.url + "/v2/models/onnx_zero_1_float16/config")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    assert r.text == compact(r.json())
    cfg = r.json()
    assert cfg["name"] == "onnx_zero_1_float16"
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["data_type"] == "TYPE_FP16"
    assert cfg["input"][0]["dims"] == [-1, -1]
    assert cfg["output"][0]["name"] == "OUTPUT0"
    assert cfg["output"][0]["dims"] == [-1, -1]
    cfg = requests.get(qa_server.url + "/v2/models/onnx_zero_1_object/config").json()
    assert cfg["input"][0]["data_type"] == "TYPE_STRING"


UNKNOWN = "Request for unknown model: 'no_such_model' is not found"


def test_unknown_model_messages(qa_server):
    for path in ("/v2/models/no_such_model", "/v2/models/no_such_model/config",
                 "/v2/models/no_such_model/ready"):
        r = requests.get(qa_server.url + path)
        assert_error(r, 404, UNKNOWN)
    r = post(qa_server, "no_such_model", {"inputs": simple_json_inputs()})
    assert_error(r, 404, UNKNOWN, exact=False)


def test_version_in_url(qa_server):
    r = requests.get(qa_server.url + "/v2/models/simple/versions/1")
    assert r.status_code == 200
    assert r.json()["versions"] == ["1"]
    assert requests.get(qa_server.url + "/v2/models/simple/versions/1/config").status_code == 200
    r = post(qa_server, "simple", {"inputs": simple_json_inputs()}, version="1")
    assert r.status_code == 200, r.text
    assert r.json()["model_version"] == "1"
    missing = "Request for unknown model: 'simple' version 2 is not found"
    assert_error(requests.get(qa_server.url + "/v2/models/simple/versions/2"), 404, missing)
    assert_error(requests.get(qa_server.url + "/v2/models/simple/versions/2/config"), 404, missing)
    r = post(qa_server, "simple", {"inputs": simple_json_inputs()}, version="2")
    assert_error(r, 404, missing, exact=False)


def test_ready_unknown_version_is_404(qa_server):
    """TRITONSERVER_ServerModelIsReady fails in GetModel for an unknown
    version, so the handler answers with that error (404), not with
    "Model version not ready" (400, only for a known version that is not
    ready)."""
    r = requests.get(qa_server.url + "/v2/models/simple/versions/2/ready")
    assert_error(r, 404, "Request for unknown model: 'simple' version 2 is not found")


# ---- §7 curl matrix on `simple` --------------------------------------------------------


def curl_simple(srv, extra=None):
    body = {"inputs": simple_json_inputs()}
    if extra:
        body.update(extra)
        # keep the key order curl used: parameters first, outputs last
        body = {k: body[k] for k in ("parameters", "inputs", "outputs") if k in body}
    return post(srv, "simple", compact(body), headers=FORM)


ALL_JSON = exact_json("simple", [json_out("OUTPUT0", "INT32", [1, 16], SUM),
                                 json_out("OUTPUT1", "INT32", [1, 16], ZEROS)])


def test_curl_json_in_json_out(qa_server):
    r = curl_simple(qa_server)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert "Inference-Header-Content-Length" not in r.headers
    assert r.text == ALL_JSON
    assert "[2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32]" in r.text
    assert "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]" in r.text


@pytest.mark.parametrize("out1", [{"name": "OUTPUT1", "parameters": {"binary_data": False}},
                                  {"name": "OUTPUT1"}], ids=["out1_false", "out1_bare"])
def test_curl_output0_binary(qa_server, out1):
    r = curl_simple(qa_server, {"outputs": [
        {"name": "OUTPUT0", "parameters": {"binary_data": True}}, out1]})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    header = exact_json("simple", [bin_out("OUTPUT0", "INT32", [1, 16], 64),
                                   json_out("OUTPUT1", "INT32", [1, 16], ZEROS)])
    assert int(r.headers["Inference-Header-Content-Length"]) == len(header)
    assert r.content == header.encode() + i32(SUM)


def test_curl_binary_data_output_no_outputs(qa_server):
    r = curl_simple(qa_server, {"parameters": {"binary_data_output": True}})
    assert r.status_code == 200, r.text
    header = exact_json("simple", [bin_out("OUTPUT0", "INT32", [1, 16], 64),
                                   bin_out("OUTPUT1", "INT32", [1, 16], 64)])
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert int(r.headers["Inference-Header-Content-Length"]) == len(header)
    assert r.content == header.encode() + i32(SUM) + i32(ZEROS)


def test_curl_binary_data_output_overridden(qa_server):
    """A listed output without binary_data is JSON even when
    binary_data_output is true."""
    r = curl_simple(qa_server, {"parameters": {"binary_data_output": True}, "outputs": [
        {"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT1"}]})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.text == ALL_JSON


def test_binary_data_output_false_and_listed_binary(qa_server):
    r = curl_simple(qa_server, {"parameters": {"binary_data_output": False}})
    assert r.text == ALL_JSON
    # Only the listed outputs come back.
    r = curl_simple(qa_server, {"parameters": {"binary_data_output": True}, "outputs": [
        {"name": "OUTPUT1", "parameters": {"binary_data": True}}]})
    header = exact_json("simple", [bin_out("OUTPUT1", "INT32", [1, 16], 64)])
    assert r.content == header.encode() + i32(ZEROS)
    r = curl_simple(qa_server, {"outputs": [{"name": "OUTPUT1"}]})
    assert r.text == exact_json("simple", [json_out("OUTPUT1", "INT32", [1, 16], ZEROS)])


def test_binary_blobs_follow_output_order(qa_server):
    r = curl_simple(qa_server, {"outputs": [
        {"name": "OUTPUT1", "parameters": {"binary_data": True}},
        {"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    assert r.status_code == 200
    header, _, blob = split_body(r)
    names = [o["name"] for o in header["outputs"]]
    assert sorted(names) == ["OUTPUT0", "OUTPUT1"]
    expect = {"OUTPUT0": i32(SUM), "OUTPUT1": i32(ZEROS)}
    assert blob == b"".join(expect[n] for n in names)


def test_curl_too_few_elements(qa_server):
    r = post(qa_server, "simple", compact({"inputs": simple_json_inputs(n0=15, with_in1=False)}),
             headers=FORM)
    assert_error(r, 500, "Failed to parse 'data' field: shape does not match true shape")


def test_curl_too_many_elements(qa_server):
    r = post(qa_server, "simple", compact({"inputs": simple_json_inputs(n0=18, with_in1=False)}),
             headers=FORM)
    assert_error(r, 500, "Unable to parse 'data': Shape does not match true shape of 'data' field")


def test_bytes_element_count_mismatch_json(qa_server):
    """For BYTES the JSON size pass sizes the buffer from the data itself, so
    a count mismatch is caught by the core's string validation (400), not by
    the 'data' parser as for fixed-size types."""
    r = post(qa_server, "simple_identity", {"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1], "data": ["a", "b"]}]})
    assert_error(r, 400, "unexpected number of string elements 2 for inference input 'INPUT0' "
                         "for model 'simple_identity', expecting 1", exact=False)
    r = post(qa_server, "simple_identity", {"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "data": ["a"]}]})
    assert_error(r, 400, "expected 2 string elements for inference input 'INPUT0' for model "
                         "'simple_identity', got 1", exact=False)


# ---- §2 binary tensor framing -----------------------------------------------------------


def binary_request(inputs_json, blobs, outputs=None, params=None, rid=None):
    d = {}
    if rid is not None:
        d["id"] = rid
    if params:
        d["parameters"] = params
    d["inputs"] = inputs_json
    if outputs is not None:
        d["outputs"] = outputs
    header = compact(d).encode()
    return header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header))}


def bin_in(name, dtype, shape, size):
    return {"name": name, "datatype": dtype, "shape": shape, "parameters": {"binary_data_size": size}}


def test_binary_inputs_in_input_order(qa_server):
    a = list(range(16))
    b = [100] * 16
    # INPUT1 is listed first, so its blob comes first.
    body, hdrs = binary_request([bin_in("INPUT1", "INT32", [1, 16], 64),
                                 bin_in("INPUT0", "INT32", [1, 16], 64)], [i32(b), i32(a)])
    r = post(qa_server, "simple", body, hdrs)
    assert r.status_code == 200, r.text
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert out["OUTPUT0"] == [x + 100 for x in a]
    assert out["OUTPUT1"] == [x - 100 for x in a]


def test_binary_and_json_inputs_mixed(qa_server):
    body, hdrs = binary_request([
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": SEQ},
        bin_in("INPUT1", "INT32", [1, 16], 64)], [i32(SEQ)],
        outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    r = post(qa_server, "simple", body, hdrs)
    assert r.status_code == 200, r.text
    header, _, blob = split_body(r)
    assert blob == i32(SUM)


def test_binary_not_enough_bytes(qa_server):
    body, hdrs = binary_request([bin_in("INPUT0", "INT32", [1, 16], 64),
                                 bin_in("INPUT1", "INT32", [1, 16], 64)], [i32(SEQ), i32(SEQ)[:36]])
    r = post(qa_server, "simple", body, hdrs)
    assert_error(r, 400, "unexpected size for input 'INPUT1', expecting 28 additional bytes "
                         "for model 'simple'")
    assert live(qa_server)


def test_binary_extra_bytes(qa_server):
    body, hdrs = binary_request([bin_in("INPUT0", "INT32", [1, 16], 64),
                                 bin_in("INPUT1", "INT32", [1, 16], 64)],
                                [i32(SEQ), i32(SEQ), b"extra"])
    r = post(qa_server, "simple", body, hdrs)
    assert_error(r, 400, "unexpected additional input data for model 'simple'")


def test_binary_size_mismatch_with_shape(qa_server):
    body, hdrs = binary_request([bin_in("INPUT0", "INT32", [1, 16], 60),
                                 bin_in("INPUT1", "INT32", [1, 16], 68)],
                                [i32(SEQ)[:60], i32(SEQ) + b"\0\0\0\0"])
    r = post(qa_server, "simple", body, hdrs)
    assert_error(r, 400, "input byte size mismatch for input 'INPUT0' for model 'simple'. "
                         "Expected 64, got 60", exact=False)


def test_input_content_fields(qa_server):
    both = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0],
            "parameters": {"binary_data_size": 4}}
    body, hdrs = binary_request([both], [f32([1.0])])
    r = post(qa_server, "onnx_zero_1_float32", body, hdrs)
    prefix = ("Input must set only one of the following fields: 'data', 'binary_data_size' in "
              "'parameters', 'shared_memory_region' in 'parameters'. But")
    assert_error(r, 400, prefix + " set 'data' 'binary_data_size'")
    r = post(qa_server, "onnx_zero_1_float32",
             {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1]}]})
    assert_error(r, 400, prefix + " no field is set")
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "parameters": {"other": 1}}]})
    assert_error(r, 400, prefix + " no field is set")


def test_binary_data_size_not_uint(qa_server):
    for bad in ("4", -4, 4.5):
        body, hdrs = binary_request([bin_in("INPUT0", "FP32", [1, 1], bad)], [f32([1.0])])
        r = post(qa_server, "onnx_zero_1_float32", body, hdrs)
        assert_error(r, 500, "Unable to parse 'binary_data_size': attempt to access JSON "
                             "non-unsigned-integer as unsigned-integer")


def test_zero_size_binary_output_is_json_response(qa_server):
    body, hdrs = binary_request([bin_in("INPUT0", "FP32", [1, 0], 0)], [],
                                outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    r = post(qa_server, "onnx_zero_1_float32", body, hdrs)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert "Inference-Header-Content-Length" not in r.headers
    assert r.text == exact_json("onnx_zero_1_float32", [bin_out("OUTPUT0", "FP32", [1, 0], 0)])


def test_zero_element_json_input(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 0], "data": []}]})
    assert r.status_code == 200, r.text
    assert r.text == exact_json("onnx_zero_1_float32", [json_out("OUTPUT0", "FP32", [1, 0], [])])


def test_bytes_binary_round_trip(qa_server):
    items = [b"hello", b"", b"\x00\xff binary", "ü".encode()]
    body, hdrs = binary_request([bin_in("INPUT0", "BYTES", [1, 4], len(bytes_tensor(items)))],
                                [bytes_tensor(items)], params={"binary_data_output": True})
    r = post(qa_server, "simple_identity", body, hdrs)
    assert r.status_code == 200, r.text
    header, _, blob = split_body(r)
    assert header["outputs"][0]["datatype"] == "BYTES"
    assert header["outputs"][0]["parameters"]["binary_data_size"] == len(bytes_tensor(items))
    assert blob == bytes_tensor(items)


def test_bytes_binary_errors(qa_server):
    two = bytes_tensor([b"a", b"b"])
    body, hdrs = binary_request([bin_in("INPUT0", "BYTES", [1, 1], len(two))], [two])
    r = post(qa_server, "simple_identity", body, hdrs)
    assert r.status_code == 400, r.text
    assert ("unexpected number of string elements 2 for inference input 'INPUT0' for model "
            "'simple_identity', expecting 1") in error_of(r)
    body, hdrs = binary_request([bin_in("INPUT0", "BYTES", [1, 1], 2)], [b"\x01\x00"])
    r = post(qa_server, "simple_identity", body, hdrs)
    assert r.status_code == 400, r.text
    assert ("incomplete string length indicator for inference input 'INPUT0' for model "
            "'simple_identity'") in error_of(r)
    one = bytes_tensor([b"a"])
    body, hdrs = binary_request([bin_in("INPUT0", "BYTES", [1, 2], len(one))], [one])
    r = post(qa_server, "simple_identity", body, hdrs)
    assert r.status_code == 400, r.text
    assert ("expected 2 string elements for inference input 'INPUT0' for model "
            "'simple_identity', got 1") in error_of(r)
    assert live(qa_server)


def test_bool_binary_is_one_byte(qa_server):
    body, hdrs = binary_request([bin_in("INPUT0", "BOOL", [1, 3], 3)], [b"\x01\x00\x01"],
                                params={"binary_data_output": True})
    r = post(qa_server, "identity_bool", body, hdrs)
    assert r.status_code == 200, r.text
    header, _, blob = split_body(r)
    assert blob == b"\x01\x00\x01"
    r = post(qa_server, "identity_bool", {"inputs": [
        {"name": "INPUT0", "datatype": "BOOL", "shape": [1, 3], "data": [True, False, True]}]})
    assert r.text == exact_json("identity_bool", [json_out("OUTPUT0", "BOOL", [1, 3], [True, False, True])])


def test_fp16_binary(qa_server):
    x = np.array([[1.0, -2.5], [0.099976, 65504.0]], np.float16).reshape(1, 2, 2)
    body, hdrs = binary_request([bin_in("INPUT0", "FP16", [1, 2, 2], 8)], [x.tobytes()],
                                params={"binary_data_output": True})
    r = post(qa_server, "onnx_zero_1_float16", body, hdrs)
    assert r.status_code == 200, r.text
    header, _, blob = split_body(r)
    assert header["outputs"][0] == bin_out("OUTPUT0", "FP16", [1, 2, 2], 8)
    assert blob == x.tobytes()


# ---- IHCL header rules -----------------------------------------------------------------


def test_ihcl_not_a_number(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": []},
             {"Inference-Header-Content-Length": "abc"})
    assert_error(r, 400, "Unable to parse Inference-Header-Content-Length, got: abc")


def test_ihcl_out_of_range(qa_server):
    """qa test_inference_header_content_length_out_of_range."""
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": []},
             {"Inference-Header-Content-Length": "99999999999"})
    assert_error(r, 400, "Unable to parse Inference-Header-Content-Length, value is out of range "
                         "[ -2147483648, 2147483647 ], got: 99999999999")
    assert live(qa_server)


def test_ihcl_range_check(qa_server):
    body = compact({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]})
    n = len(body)
    for bad in ("-1", str(n + 1), "2147483647"):
        r = post(qa_server, "onnx_zero_1_float32", body, {"Inference-Header-Content-Length": bad})
        assert_error(r, 400, f"inference header size should be in range (0, {n}), got: {bad}")
    # Both ends of the "open" range are accepted; IHCL == body length is all JSON.
    r = post(qa_server, "onnx_zero_1_float32", body, {"Inference-Header-Content-Length": str(n)})
    assert r.status_code == 200, r.text
    # std::stoi semantics: trailing garbage after the number is ignored.
    r = post(qa_server, "onnx_zero_1_float32", body,
             {"Inference-Header-Content-Length": f"{n}abc"})
    assert r.status_code == 200, r.text


def test_ihcl_cuts_into_json(qa_server):
    body = compact({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]})
    r = post(qa_server, "onnx_zero_1_float32", body,
             {"Inference-Header-Content-Length": str(len(body) - 5)})
    assert r.status_code == 500, r.text
    assert error_of(r).startswith("failed to parse the request JSON buffer: ")
    assert live(qa_server)


def test_ihcl_uses_decompressed_length(qa_server):
    body = compact({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]})
    r = post(qa_server, "onnx_zero_1_float32", gzip.compress(body.encode()),
             {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(body))})
    assert r.status_code == 200, r.text
    r = post(qa_server, "onnx_zero_1_float32", gzip.compress(body.encode()),
             {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(body) + 1)})
    assert_error(r, 400, f"inference header size should be in range (0, {len(body)}), "
                         f"got: {len(body) + 1}")


# ---- raw binary requests (qa/L0_http/http_test.py) ----------------------------------------


def raw_post(srv, model, data, extra_headers=None):
    headers = {"Inference-Header-Content-Length": "0"}
    headers.update(extra_headers or {})
    return post(srv, model, data, headers)


def raw_output(r):
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    return json.loads(r.content[:n]), r.content[n:]


@pytest.mark.parametrize("n", [8, 32], ids=["raw_binary", "raw_binary_longer"])
def test_raw_binary(qa_server, n):
    x = np.arange(n, dtype=np.float32).tobytes()
    header, blob = raw_output(raw_post(qa_server, "onnx_zero_1_float32", x))
    assert blob == x
    assert header["outputs"][0] == bin_out("OUTPUT0", "FP32", [1, n], 4 * n)


def test_raw_byte(qa_server):
    r = raw_post(qa_server, "onnx_zero_1_object_1_element", b"427")
    header, blob = raw_output(r)
    assert blob == struct.pack("<I", 3) + b"427"
    assert blob[4:].decode() == "427"
    assert header["outputs"][0]["shape"] == [1, 1]


def test_raw_byte_too_many_elements(qa_server):
    r = raw_post(qa_server, "onnx_zero_1_object", b"427")
    assert_error(r, 400, "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
                 exact=False)


def test_raw_multi_variable_dimensions(qa_server):
    r = raw_post(qa_server, "onnx_zero_1_float16", np.ones([2, 2], np.float16).tobytes())
    assert_error(r, 400, "The shape of the raw input 'INPUT0' can not be deduced because there are "
                         "more than one variable-sized dimension", exact=False)


def test_raw_multi_inputs(qa_server):
    r = raw_post(qa_server, "onnx_zero_3_float32", np.arange(24, dtype=np.float32).tobytes())
    assert_error(r, 400, "Raw request must only have 1 input (found 1) to be deduced but got 3 "
                         "inputs in 'onnx_zero_3_float32' model configuration", exact=False)
    r = raw_post(qa_server, "simple", b"A" * 128)
    assert_error(r, 400, "Raw request must only have 1 input (found 1) to be deduced but got 2 "
                         "inputs in 'simple' model configuration", exact=False)


def test_raw_remainder_is_size_mismatch(qa_server):
    r = raw_post(qa_server, "onnx_zero_1_float32", b"\0" * 7)
    assert r.status_code == 400, r.text
    assert "input byte size mismatch for input 'INPUT0' for model 'onnx_zero_1_float32'" in error_of(r)


def test_raw_no_batching_model(qa_server):
    header, blob = raw_output(raw_post(qa_server, "identity_nobatch", f32([1, 2, 3])))
    assert header["outputs"][0]["shape"] == [3]
    assert blob == f32([1, 2, 3])


def test_raw_empty_body(qa_server):
    """No body and no IHCL is a raw request with a zero-size input."""
    for headers in ({}, {"Inference-Header-Content-Length": "0"}):
        r = post(qa_server, "onnx_zero_1_float32", b"", headers)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"] == "application/json"
        assert r.text == exact_json("onnx_zero_1_float32", [bin_out("OUTPUT0", "FP32", [1, 0], 0)])


def test_content_encoding_chunked_manually(qa_server):
    """qa test: a hand-chunked raw body plus the Content-Length requests adds."""
    x = np.arange(8, dtype=np.float32).tobytes()
    r = raw_post(qa_server, "onnx_zero_1_float32", harness.chunk_encode(x),
                 {"Transfer-Encoding": "chunked"})
    assert "Content-Length" in r.request.headers  # both headers went out
    _, blob = raw_output(r)
    assert blob == x


def test_chunked_many_chunks_with_ihcl(qa_server):
    header = compact({"inputs": [bin_in("INPUT0", "FP32", [1, 4096], 16384)],
                      "parameters": {"binary_data_output": True}}).encode()
    data = np.arange(4096, dtype=np.float32).tobytes()
    body = harness.chunk_encode(header + data, chunk_size=37)
    with harness.RawConnection(qa_server.host, qa_server.port) as c:
        r = c.request("POST", "/v2/models/onnx_zero_1_float32/infer",
                      {"Transfer-Encoding": "chunked",
                       "Inference-Header-Content-Length": str(len(header))}, body)
    assert r.status, r
    assert r.status == 200, r
    n = int(r.headers["inference-header-content-length"])
    assert r.body[n:] == data


MAX_CHUNKS = 65536
TOO_MANY_CHUNKS = ("Chunked request body exceeds maximum of 65536 non-empty chunks. "
                   "Send fewer or larger HTTP chunks.")


def test_chunked_infer_rejected_over_max_chunks(qa_server):
    """http_request_many_chunks.py: more than 65,536 non-empty chunks is a 400
    and the connection closes. libmicrohttpd does not expose chunk
    boundaries, so the server counts access-handler calls (at most one per
    chunk) while the pieces are small; 1-2 byte chunks are counted
    exactly. The body is a valid request padded with JSON whitespace, so
    only the chunk count is wrong with it."""
    body = compact({"inputs": simple_json_inputs()}).encode()
    n_chunks = 70_000
    body += b" " * (n_chunks * 3 // 2 - len(body))  # room for 1-2 byte chunks
    chunks, pos = [], 0
    for i in range(n_chunks - 1):
        size = 1 + i % 2
        chunks.append(b"%X\r\n%s\r\n" % (size, body[pos:pos + size]))
        pos += size
    chunks.append(b"%X\r\n%s\r\n" % (len(body) - pos, body[pos:]))  # the rest
    assert len(chunks) == n_chunks > MAX_CHUNKS
    assert all(not c.startswith(b"0\r\n") for c in chunks)  # all non-empty
    wire = b"".join(chunks) + b"0\r\n\r\n"
    head = (b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")

    with harness.RawConnection(qa_server.host, qa_server.port) as c:
        c.send(head)
        step = len(wire) // 4 + 1  # a few large writes
        for i in range(0, len(wire), step):
            c.send(wire[i:i + step])
        r = c.read_response()
        assert r.status == 400, r
        assert r.headers.get("connection", "").lower() == "close", r.headers
        assert r.body == compact({"error": TOO_MANY_CHUNKS}).encode(), r.body[:2000]
        # The server closes the connection after the reply.
        c.sock.settimeout(10)
        with pytest.raises((EOFError, ConnectionResetError)):
            c.read_response()

    # The server keeps serving, on new connections.
    assert requests.get(qa_server.url + "/v2/health/ready", timeout=10).status_code == 200
    r = post(qa_server, "simple", {"inputs": simple_json_inputs()})
    assert r.status_code == 200, r.text
    assert r.text == ALL_JSON


def test_chunked_infer_at_max_chunks_accepted(qa_server):
    """The same padded body in fewer chunks than the cap (60,000) is served:
    the cap, not the chunk size, refuses the request above."""
    body = compact({"inputs": simple_json_inputs()}).encode()
    n_chunks = 60_000
    body += b" " * (n_chunks - len(body))
    chunks = [b"1\r\n%s\r\n" % body[i:i + 1] for i in range(len(body))]
    assert len(chunks) == n_chunks < MAX_CHUNKS
    wire = b"".join(chunks) + b"0\r\n\r\n"
    with harness.RawConnection(qa_server.host, qa_server.port) as c:
        r = c.request("POST", "/v2/models/simple/infer", {"Transfer-Encoding": "chunked"}, wire)
    assert r.status == 200, r
    assert r.body == ALL_JSON.encode()


def test_descriptive_status_code(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["onnx_zero_1_float32_queue"])
    srv = start_server(repo)
    x = np.arange(8, dtype=np.float32).tobytes()
    first = {}
    t = threading.Thread(target=lambda: first.setdefault(
        "r", raw_post(srv, "onnx_zero_1_float32_queue", x)))
    t.start()
    harness.wait_pending(srv, "onnx_zero_1_float32_queue", 1)  # the queue is full
    r = raw_post(srv, "onnx_zero_1_float32_queue", x)
    assert r.status_code == 503
    assert "Exceeds maximum queue size" in error_of(r)
    t.join()
    assert first["r"].status_code == 200


# ---- http_test.py: JSON shapes, depth, duplicates, index ---------------------------------


def test_buffer_size_overflow(qa_server):
    big = 2 ** 60 + 2
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [
        {"name": "INPUT0", "shape": [2 ** 4, big], "datatype": "FP32", "data": [1.0]}]})
    assert_error(r, 400, f"invalid shape for input 'INPUT0': shape [16,{big}] causes total element "
                         "count to exceed maximum size of 9223372036854775807", exact=False)
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [
        {"name": "INPUT0", "shape": [2 ** 2, big], "datatype": "FP32", "data": [1.0]}]})
    assert_error(r, 400, f"byte size overflow for input 'INPUT0': element count ({4 * big}) * data "
                         "type size (4) exceeds maximum allowed size (9223372036854775807)",
                 exact=False)
    assert live(qa_server)


def test_negative_dimensions(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [
        {"name": "INPUT0", "shape": [2, -5], "datatype": "FP32", "data": [1.0]}]})
    assert_error(r, 500, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
                         "unsigned-integer")


def nested(depth, leaf):
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


@pytest.mark.parametrize("model,dtype,leaf", [("simple_identity", "BYTES", "hello"),
                                              ("simple_identity_int64", "INT64", 123)])
@pytest.mark.parametrize("depth,ok", [(50, True), (99, True), (100, False), (120, False)])
def test_json_recursion_depth_limit(qa_server, model, dtype, leaf, depth, ok):
    r = post(qa_server, model, {"inputs": [
        {"name": "INPUT0", "datatype": dtype, "shape": [1, 1], "data": nested(depth, leaf)}]})
    if ok:
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [leaf]
    else:
        assert r.status_code == 400, r.text
        msg = "JSON nesting depth exceeds maximum allowed limit (100)"
        if dtype == "BYTES":
            assert error_of(r) == msg
        else:
            assert error_of(r) == "Unable to parse 'data': " + msg


def test_nested_data_is_flattened(qa_server):
    for data in ([1, 2, 3, 4], [[1, 2], [3, 4]], [[[1], [2]], [[3], [4]]], [[1], [2, 3, [4]]]):
        r = post(qa_server, "simple_identity_int64", {"inputs": [
            {"name": "INPUT0", "datatype": "INT64", "shape": [2, 2], "data": data}]})
        assert r.status_code == 200, (data, r.text)
        assert r.json()["outputs"][0]["data"] == [1, 2, 3, 4]


def test_duplicate_output_names(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8],
                    "data": [list(map(float, range(8)))]}],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]})
    assert_error(r, 400, "output 'OUTPUT0' already exists in request", exact=False)
    assert live(qa_server)


def index_post(srv, body, **kw):
    return requests.post(srv.url + "/v2/repository/index", data=body,
                         headers={"Content-Type": "application/json"}, timeout=60, **kw)


def test_repository_index_deeply_nested_json(qa_server):
    depth = 250000
    payload = '{"ready":' + "[" * depth + "true" + "]" * depth + "}"
    assert len(payload) < DEFAULT_LIMIT
    r = index_post(qa_server, payload)
    assert_error(r, 400, "Invalid value for 'ready': expected a boolean")
    assert live(qa_server)


def test_repository_index(qa_server, qa_repo):
    r = index_post(qa_server, b"")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    assert r.text == compact(r.json())
    entries = r.json()
    names = [e["name"] for e in entries]
    assert names == sorted(names)
    for e in entries:
        assert e == {"name": e["name"], "version": "1", "state": "READY"}, e
    r = index_post(qa_server, '{"ready":true}')
    assert r.json() == entries
    assert index_post(qa_server, '{"ready":false}').status_code == 200
    assert index_post(qa_server, "{}").status_code == 200
    for bad in ('{"ready":"yes"}', '{"ready":1}', '{"ready":[true]}', '{"ready":{}}'):
        assert_error(index_post(qa_server, bad), 400, "Invalid value for 'ready': expected a boolean")


def test_repository_index_ready_null(qa_server):
    """A present-but-null 'ready' is not a boolean either (TritonJson Find
    succeeds, IsBool fails)."""
    assert_error(index_post(qa_server, '{"ready":null}'), 400,
                 "Invalid value for 'ready': expected a boolean")


def test_repository_name_in_path(qa_server):
    r = requests.post(qa_server.url + "/v2/repository/myrepo/models/simple/load")
    assert_error(r, 501, "'repository_name' specification is not supported")
    r = requests.post(qa_server.url + "/v2/repository/myrepo/models/simple/unload")
    assert_error(r, 501, "'repository_name' specification is not supported")
    assert post(qa_server, "simple", {"inputs": simple_json_inputs()}).status_code == 200


# ---- §0/§3 JSON types and core validation -----------------------------------------------


def json_in(name, dtype, shape, data):
    return {"name": name, "datatype": dtype, "shape": shape, "data": data}


JSON_TYPE_ERRORS = [
    # (model, request body, exact error message) -- all 500 (TritonJson errors)
    ("simple", {"inputs": [json_in("INPUT0", "INT32", [1, 16], [1.5] * 16),
                           json_in("INPUT1", "INT32", [1, 16], SEQ)]},
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ("simple", {"inputs": [json_in("INPUT0", "INT32", [1, 16], ["1"] * 16),
                           json_in("INPUT1", "INT32", [1, 16], SEQ)]},
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ("identity_uint32", {"inputs": [json_in("INPUT0", "UINT32", [1, 2], [1, -1])]},
     "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("identity_bool", {"inputs": [json_in("INPUT0", "BOOL", [1, 2], [1, 0])]},
     "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 2], [1.0, "x"])]},
     "Unable to parse 'data': attempt to access JSON non-number as double"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 1], 1.0)]},
     "Unable to parse 'data': attempt to access JSON non-array as array"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", 1, [1.0])]},
     "Unable to parse 'shape': attempt to access JSON non-array as array"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 1.5], [1.0])]},
     "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", 32, [1, 1], [1.0])]},
     "Unable to parse 'datatype': attempt to access JSON non-string as string"),
    ("onnx_zero_1_float32", {"inputs": [json_in(0, "FP32", [1, 1], [1.0])]},
     "Unable to parse 'name': attempt to access JSON non-string as string"),
    ("onnx_zero_1_float32", {"inputs": [{"datatype": "FP32", "shape": [1, 1], "data": [1.0]}]},
     "Unable to parse 'name': attempt to access non-existing object member 'name'"),
    ("onnx_zero_1_float32", {"inputs": [{"name": "INPUT0", "shape": [1, 1], "data": [1.0]}]},
     "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'"),
    ("onnx_zero_1_float32", {"inputs": [{"name": "INPUT0", "datatype": "FP32", "data": [1.0]}]},
     "Unable to parse 'shape': attempt to access non-existing object member 'shape'"),
    ("onnx_zero_1_float32", {},
     "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
    ("onnx_zero_1_float32", {"inputs": {}},
     "Unable to parse 'inputs': attempt to access JSON non-array as array"),
    ("onnx_zero_1_float32", {"id": 7, "inputs": [json_in("INPUT0", "FP32", [1, 1], [1.0])]},
     "Unable to parse 'id': attempt to access JSON non-string as string"),
    ("onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 1], [1.0])], "outputs": {}},
     "Unable to parse 'outputs': attempt to access JSON non-array as array"),
]


@pytest.mark.parametrize("model,body,message", JSON_TYPE_ERRORS,
                         ids=[f"e{i}" for i in range(len(JSON_TYPE_ERRORS))])
def test_json_type_errors_are_500(qa_server, model, body, message):
    r = post(qa_server, model, body)
    assert_error(r, 500, message)


def test_bytes_json_non_string(qa_server):
    r = post(qa_server, "simple_identity", {"inputs": [json_in("INPUT0", "BYTES", [1, 1], [5])]})
    assert r.status_code == 500, r.text
    assert "attempt to access JSON non-string as string" in error_of(r)


@pytest.mark.parametrize("body", ["{", '{"inputs":[}', "[1,2", "{\"inputs\": [] } trailing",
                                  "\x00"])
def test_malformed_json_is_500(qa_server, body):
    r = post(qa_server, "onnx_zero_1_float32", body)
    assert r.status_code == 500, r.text
    assert error_of(r).startswith("failed to parse the request JSON buffer: ")
    assert live(qa_server)


def test_fp16_bf16_over_json_refused(qa_server):
    r = post(qa_server, "onnx_zero_1_float16", {"inputs": [json_in("INPUT0", "FP16", [1, 1, 2], [1.0, 2.0])]})
    assert_error(r, 400, "receiving FP16 data via JSON is not supported. Please use the binary data "
                         "format for input INPUT0")
    r = post(qa_server, "identity_bf16", {"inputs": [json_in("INPUT0", "BF16", [1, 2], [1.0, 2.0])]})
    assert_error(r, 400, "receiving BF16 data via JSON is not supported. Please use the binary data "
                         "format for input INPUT0")
    x = np.ones((1, 1, 2), np.float16).tobytes()
    body, hdrs = binary_request([bin_in("INPUT0", "FP16", [1, 1, 2], 4)], [x])
    r = post(qa_server, "onnx_zero_1_float16", body, hdrs)
    assert r.status_code == 400, r.text
    assert ("sending FP16 data via JSON is not supported. Please use the binary data format for "
            "output") in error_of(r)
    assert live(qa_server)


def test_unknown_datatype(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP8", [1, 1], [1.0])]})
    assert_error(r, 400, "invalid datatype for input INPUT0")


CORE_ERRORS = [
    # (model, inputs, outputs, expected substring); all 400
    ("simple", simple_json_inputs(with_in1=False), None,
     "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing "
     "required input(s) ['INPUT1']. Please provide all required input(s)."),
    ("simple", [json_in("INPUT0", "INT32", [1, 16], SEQ), json_in("INPUT2", "INT32", [1, 16], SEQ)],
     None, "unexpected inference input 'INPUT2' for model 'simple'"),
    ("simple", [json_in("INPUT0", "FP32", [1, 16], SEQ), json_in("INPUT1", "INT32", [1, 16], SEQ)],
     None, "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"),
    ("simple", [json_in("INPUT0", "INT32", [1, 15], SEQ[:15]), json_in("INPUT1", "INT32", [1, 15], SEQ[:15])],
     None, "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]"),
    ("simple", [json_in("INPUT0", "INT32", [1, 16], SEQ), json_in("INPUT1", "INT32", [2, 16], SEQ * 2)],
     None, "input 'INPUT1' batch size does not match other inputs for 'simple'"),
    ("simple", [json_in("INPUT0", "INT32", [9, 16], SEQ * 9), json_in("INPUT1", "INT32", [9, 16], SEQ * 9)],
     None, "inference request batch-size must be <= 8 for 'simple'"),
    ("simple", simple_json_inputs(), [{"name": "OUTPUT9"}],
     "unexpected inference output 'OUTPUT9' for model 'simple'"),
    ("simple", simple_json_inputs(), [{"name": "OUTPUT1"}, {"name": "OUTPUT1"}],
     "output 'OUTPUT1' already exists in request"),
]


@pytest.mark.parametrize("model,inputs,outputs,message", CORE_ERRORS,
                         ids=[f"c{i}" for i in range(len(CORE_ERRORS))])
def test_core_validation_errors(qa_server, model, inputs, outputs, message):
    body = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    r = post(qa_server, model, body)
    assert_error(r, 400, message, exact=False)


def test_request_id_echo_and_error_prefix(qa_server):
    r = post(qa_server, "simple", {"id": "my-req-1", "inputs": simple_json_inputs()})
    assert r.status_code == 200
    assert r.text == exact_json("simple", [json_out("OUTPUT0", "INT32", [1, 16], SUM),
                                           json_out("OUTPUT1", "INT32", [1, 16], ZEROS)], rid="my-req-1")
    r = post(qa_server, "simple", {"id": "", "inputs": simple_json_inputs()})
    assert r.text == ALL_JSON
    big = [json_in("INPUT0", "INT32", [9, 16], SEQ * 9), json_in("INPUT1", "INT32", [9, 16], SEQ * 9)]
    r = post(qa_server, "simple", {"id": "my-req-2", "inputs": big})
    assert_error(r, 400, "[request id: my-req-2] inference request batch-size must be <= 8 for 'simple'")
    r = post(qa_server, "simple", {"inputs": big})
    assert_error(r, 400, "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'")


def test_request_parameters(qa_server):
    ok = {"custom_s": "x", "custom_i": -3, "custom_b": True, "custom_d": 0.25,
          "priority": 0, "timeout": 1000000, "binary_data_output": False}
    r = post(qa_server, "simple", {"parameters": ok, "inputs": simple_json_inputs()})
    assert r.status_code == 200, r.text
    r = post(qa_server, "simple", {"parameters": {"triton_enable_x": True},
                                   "inputs": simple_json_inputs()})
    assert_error(r, 400, "parameter keys starting with 'triton_' are reserved for Triton usage and "
                         "should not be specified.", exact=False)
    for bad in ([1], {"a": 1}, None):
        r = post(qa_server, "simple", {"parameters": {"foo": bad}, "inputs": simple_json_inputs()})
        assert_error(r, 400, "parameter 'foo' has invalid type. It should be either 'int', 'bool', "
                             "or 'string'.", exact=False)
    r = post(qa_server, "simple", {"parameters": {"binary_data_output": "yes"},
                                   "inputs": simple_json_inputs()})
    assert r.status_code >= 400


def test_nan_and_infinity(qa_server):
    body = ('{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],'
            '"data":[NaN,Infinity,-Infinity,1.5]}]}')
    r = post(qa_server, "onnx_zero_1_float32", body)
    assert r.status_code == 200, r.text
    assert '"data":[NaN,Infinity,-Infinity,1.5]' in r.text
    body = body.replace("FP32", "FP64")
    r = post(qa_server, "identity_fp64", body)
    assert r.status_code == 200, r.text
    assert '"data":[NaN,Infinity,-Infinity,1.5]' in r.text


def test_fp32_output_widened_to_double(qa_server):
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 1], [0.1])]})
    assert r.text == exact_json("onnx_zero_1_float32",
                                [json_out("OUTPUT0", "FP32", [1, 1], [0.10000000149011612])])


def test_int_json_truncation_and_fp_ints(qa_server):
    """Integers are not range-checked (silent truncation); FP accepts ints."""
    r = post(qa_server, "identity_int8", {"inputs": [json_in("INPUT0", "INT8", [1, 2], [127, 128])]})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [127, -128]
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, 2], [1, -2])]})
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == [1.0, -2.0]


def test_bytes_json(qa_server):
    strings = ["hello", "", "wörld", 'quote " and \\ backslash', "tab\tnl\n", "\u20ac"]
    r = post(qa_server, "simple_identity", {"inputs": [json_in("INPUT0", "BYTES", [2, 3], strings)]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["datatype"] == "BYTES" and out["shape"] == [2, 3]
    assert out["data"] == strings


# ---- compression ------------------------------------------------------------------------


SIMPLE_BODY = compact({"inputs": simple_json_inputs()}).encode()


@pytest.mark.parametrize("enc,fn", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                    ("identity", lambda b: b)])
def test_compressed_request(qa_server, enc, fn):
    r = post(qa_server, "simple", fn(SIMPLE_BODY), {"Content-Encoding": enc,
                                                    "Accept-Encoding": "identity"})
    assert r.status_code == 200, r.text
    assert r.text == ALL_JSON


@pytest.mark.parametrize("enc", ["br", "compress", "zstd", "gzip, deflate"])
def test_unsupported_request_encoding_501(qa_server, enc):
    r = post(qa_server, "simple", SIMPLE_BODY, {"Content-Encoding": enc})
    assert_error(r, 501, "Unsupported compression type")
    assert r.headers["Accept-Encoding"] == "gzip, deflate"


def test_corrupt_gzip_body(qa_server):
    r = post(qa_server, "simple", b"\x1f\x8b\x08\x00garbage-not-gzip", {"Content-Encoding": "gzip"})
    assert 400 <= r.status_code < 600 and r.status_code != 501
    assert "error" in r.json()
    assert live(qa_server)


def test_truncated_gzip_body_is_refused(qa_server):
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                                   "data": [1.0, 2.0, 3.0, 4.0]}]}).encode()
    whole = gzip.compress(body)
    r = post(qa_server, "onnx_zero_1_float32", whole[:-12], {"Content-Encoding": "gzip"})
    assert r.status_code == 400
    assert r.json() == {"error": "Failed to decompress data: the compressed body is truncated"}
    assert post(qa_server, "onnx_zero_1_float32", whole, {"Content-Encoding": "gzip"}).status_code == 200


def raw_response(srv, body, accept, extra=None):
    headers = {"Accept-Encoding": accept}
    headers.update(extra or {})
    r = requests.post(infer_url(srv, "simple"), data=body, headers=headers, stream=True, timeout=60)
    raw = r.raw.read(decode_content=False)
    return r, raw


@pytest.mark.parametrize("accept,expect", [
    ("gzip", "gzip"), ("deflate", "deflate"), ("identity", None),
    ("gzip;q=0, deflate", "deflate"), ("deflate;q=0.5, gzip;q=1.0", "gzip"),
    ("gzip;q=0.2, deflate;q=0.8", "deflate"), ("br", None)])
def test_response_compression(qa_server, accept, expect):
    r, raw = raw_response(qa_server, SIMPLE_BODY, accept)
    assert r.status_code == 200
    assert r.headers.get("Content-Encoding") == expect, r.headers
    if expect == "gzip":
        assert raw[:2] == b"\x1f\x8b"
        plain = gzip.decompress(raw)
    elif expect == "deflate":
        plain = zlib.decompress(raw)
    else:
        plain = raw
    assert plain.decode() == ALL_JSON


def test_binary_response_compressed_keeps_uncompressed_ihcl(qa_server):
    body = compact({"parameters": {"binary_data_output": True}, "inputs": simple_json_inputs()}).encode()
    r, raw = raw_response(qa_server, body, "gzip")
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.headers["Content-Type"] == "application/octet-stream"
    plain = gzip.decompress(raw)
    n = int(r.headers["Inference-Header-Content-Length"])
    header = json.loads(plain[:n])
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [64, 64]
    assert plain[n:] == i32(SUM) + i32(ZEROS)


# ---- --http-max-input-size (http_input_size_limit_test.py) ----------------------------------

LARGE = pytest.mark.large


def fp32_json_body(n, filler=b"1.0", outputs=None):
    head = ('{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"data":[' % n).encode()
    tail = b"]}]"
    if outputs is not None:
        tail += b',"outputs":' + compact(outputs).encode()
    tail += b"}"
    return head + (filler + b",") * (n - 1) + filler + tail


def size_limit_substrings(r):
    assert r.status_code == 400, (r.status_code, r.text[:500])
    msg = error_of(r)
    assert "request JSON size of " in msg
    assert " bytes exceeds the maximum allowed input size of " in msg
    assert "Use --http-max-input-size to increase the limit." in msg


def raw_limit_case(srv, limit):
    plain = {"Accept-Encoding": "identity"}  # do not spend CI time gzipping 64 MiB
    over = np.ones(limit // 4 + 32, np.float32).tobytes()
    r = raw_post(srv, "onnx_zero_1_float32", over, plain)
    assert r.status_code == 400, r.text[:500]
    assert error_of(r) == (f"Raw input has a byte_size ({len(over)} bytes) that exceeds the maximum "
                           f"allowed value of {limit} bytes. Use --http-max-input-size to increase "
                           "the limit.")
    del over
    under = np.arange(limit // 4 - 32, dtype=np.float32)
    _, blob = raw_output(raw_post(srv, "onnx_zero_1_float32", under.tobytes(), plain))
    assert blob == under.tobytes()


def compressed_payload(target_size):
    """qa _create_compressed_payload: 1000 FP32 + whitespace padding."""
    payload = {"inputs": [json_in("INPUT0", "FP32", [1, 1000], [1.0] * 1000)]}
    text = json.dumps(payload, indent=4)
    padded = text[:-1] + " " * (target_size - len(text)) + text[-1]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        gz.write(padded.encode())
    return buf.getvalue(), len(padded)


def compressed_limit_case(srv, limit):
    data, size = compressed_payload(limit + MIB)
    assert size > limit
    r = post(srv, "onnx_zero_1_float32", data, {"Content-Encoding": "gzip"})
    assert r.status_code == 400, r.text
    assert error_of(r) == (f"Decompressed data size exceeds the maximum allowed value of {limit} "
                           "bytes. Use --http-max-input-size to increase the limit.")
    data, size = compressed_payload(limit - MIB)
    r = post(srv, "onnx_zero_1_float32", data, {"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["shape"] == [1, 1000]


def string_boundary_case(srv, limit):
    """A BYTES JSON body of exactly limit+1 bytes is refused, exactly limit passes."""
    def body_of(size):
        outputs = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
        empty = compact({"inputs": [json_in("INPUT0", "BYTES", [1, 1], [""])], "outputs": outputs})
        pad = size - len(empty)
        b = compact({"inputs": [json_in("INPUT0", "BYTES", [1, 1], ["A" * pad])], "outputs": outputs})
        assert len(b) == size
        return b.encode(), pad

    body, _ = body_of(limit + 1)
    r = post(srv, "simple_identity", body)
    size_limit_substrings(r)
    assert error_of(r) == (f"request JSON size of {limit + 1} bytes exceeds the maximum allowed input "
                           f"size of {limit} bytes. Use --http-max-input-size to increase the limit.")
    body, pad = body_of(limit)
    r = post(srv, "simple_identity", body)
    assert r.status_code == 200, r.text[:500]
    header, _, blob = split_body(r)
    assert header["outputs"][0]["parameters"]["binary_data_size"] == pad + 4
    assert len(blob) == pad + 4 and blob[4:5] == b"A"


@LARGE
def test_default_limit_raw_binary(qa_server):
    raw_limit_case(qa_server, DEFAULT_LIMIT)


@LARGE
def test_default_limit_json(qa_server):
    n = DEFAULT_LIMIT // 4 + 32
    r = post(qa_server, "onnx_zero_1_float32", fp32_json_body(n))
    size_limit_substrings(r)
    # Under the limit (about 64 MB of JSON, as the reference test sends).
    n = (DEFAULT_LIMIT // 4 - 32) * 4 // 5
    body = fp32_json_body(n, b"1.0", outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    assert len(body) < DEFAULT_LIMIT
    r = post(qa_server, "onnx_zero_1_float32", body)
    assert r.status_code == 200, r.text[:500]
    header, _, blob = split_body(r)
    assert header["outputs"][0]["shape"] == [1, n]
    assert blob == np.ones(n, np.float32).tobytes()


def test_json_input_expanded_size_limit(qa_server):
    """Limit #4: the byte size of a JSON input once expanded, from its shape."""
    n = DEFAULT_LIMIT // 4 + 32
    r = post(qa_server, "onnx_zero_1_float32", {"inputs": [json_in("INPUT0", "FP32", [1, n], [0])]})
    assert_error(r, 400, f"JSON input 'INPUT0' has a byte_size ({4 * n} bytes) that exceeds the "
                         f"maximum allowed value of {DEFAULT_LIMIT} bytes. Use --http-max-input-size "
                         "to increase the limit.")


@LARGE
def test_large_string_in_json(qa_server):
    string_boundary_case(qa_server, DEFAULT_LIMIT)


@LARGE
def test_default_limit_compressed(qa_server):
    compressed_limit_case(qa_server, DEFAULT_LIMIT)


def test_no_leak_on_invalid_inference_header_length(qa_server):
    psutil = pytest.importorskip("psutil")
    check_rss = not harness.instrumented()
    proc = psutil.Process(qa_server.pid)
    body = gzip.compress(b" " * MIB)
    headers = {"Content-Encoding": "gzip", "Inference-Header-Content-Length": "9999999"}
    with requests.Session() as s:
        def once():
            r = s.post(infer_url(qa_server, "onnx_zero_1_float32"), data=body, headers=headers)
            assert_error(r, 400, "inference header size should be in range (0, 1048576), got: 9999999")
        once()
        before = proc.memory_info().rss
        for _ in range(100):
            once()
        growth = proc.memory_info().rss - before
    if check_rss:  # under ASan/valgrind the leak check at exit covers this
        assert growth < 32 * MIB, f"server RSS grew by {growth / MIB:.1f} MiB"


def test_other_json_bodies_are_limited(qa_server):
    """Limit #1 applies to every JSON body, e.g. load (qa
    test_loading_large_invalid_model, with a 65 MiB body instead of 2.9 GB)."""
    body = b'{"parameters":{"config":"{}","file:1/model.onnx":"' + b"A" * (65 * MIB) + b'"}}'
    r = requests.post(qa_server.url + "/v2/repository/models/invalid_onnx/load", data=body,
                      headers={"Content-Type": "application/json"}, timeout=120)
    assert r.status_code != 200
    assert "request JSON size" in error_of(r)
    assert " exceeds the maximum allowed input size" in error_of(r)
    assert live(qa_server)
    r = index_post(qa_server, b'{"ready":true' + b" " * (65 * MIB) + b"}")
    size_limit_substrings(r)


@pytest.fixture(scope="module")
def raised_limit_server(tmp_path_factory):
    repo = harness.make_repo(tmp_path_factory.mktemp("raised_repo"),
                             ["onnx_zero_1_float32", "simple_identity"])
    srv = harness.OspreyServer(repo, ["--http-max-input-size=134217728"],
                               workdir=tmp_path_factory.mktemp("raised_srv"))
    srv.start()
    yield srv
    srv.stop()
    problems = srv.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + srv.log_tail()


@LARGE
def test_large_input_raw_binary(raised_limit_server):
    raw_limit_case(raised_limit_server, RAISED_LIMIT)


@LARGE
def test_large_input_json(raised_limit_server):
    n = RAISED_LIMIT // 4 + 32
    r = post(raised_limit_server, "onnx_zero_1_float32", fp32_json_body(n))
    size_limit_substrings(r)
    assert f"of {RAISED_LIMIT} bytes" in error_of(r)
    # A JSON body over the default limit but under the raised one passes
    # (a single large string keeps the parse cheap on small CI machines).
    body = compact({"inputs": [json_in("INPUT0", "BYTES", [1, 1], ["B" * (96 * MIB)])],
                    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    r = post(raised_limit_server, "simple_identity", body)
    assert r.status_code == 200, r.text[:500]
    assert split_body(r)[0]["outputs"][0]["parameters"]["binary_data_size"] == 96 * MIB + 4


@LARGE
def test_large_input_compressed(raised_limit_server):
    compressed_limit_case(raised_limit_server, RAISED_LIMIT)


@pytest.mark.parametrize("value", ["0", "-1024"])
def test_max_input_size_must_be_positive(tmp_path, qa_repo, value):
    srv = harness.OspreyServer(qa_repo, [f"--http-max-input-size={value}"], workdir=tmp_path / value)
    rc = srv.run_to_exit()
    assert rc != 0, srv.log_tail()
    assert rc > 0, f"killed by signal {-rc}: " + srv.log_tail()
    assert srv.log().count("Error: --http-max-input-size must be greater than 0.") == 1, srv.log_tail()
    for marker in harness.SANITIZER_MARKERS:
        assert marker not in srv.log()


# ---- connections ---------------------------------------------------------------------------


def drain_until_closed(s):
    """Reads what the server sends until it closes the connection: proof
    that it has seen the client's end of the request."""
    s.settimeout(30 * harness.timeout_scale())
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass


def test_client_disconnect_mid_upload(qa_server):
    header = compact({"inputs": [bin_in("INPUT0", "FP32", [1, 1 << 20], 4 << 20)]}).encode()
    for i in range(6):
        s = socket.create_connection((qa_server.host, qa_server.port))
        if i % 2 == 0:  # raw request, declared 8 MiB, 1 MiB sent
            head = ("POST /v2/models/onnx_zero_1_float32/infer HTTP/1.1\r\nHost: x\r\n"
                    "Inference-Header-Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % (8 * MIB))
            s.sendall(head.encode() + b"\0" * MIB)
        else:  # JSON header complete, blob cut short
            head = ("POST /v2/models/onnx_zero_1_float32/infer HTTP/1.1\r\nHost: x\r\n"
                    "Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                    % (len(header), len(header) + (4 << 20)))
            s.sendall(head.encode() + header + b"\0" * (1 << 20))
        if i >= 4:
            s.shutdown(socket.SHUT_WR)  # a truncated body: EOF before Content-Length
            drain_until_closed(s)
        s.close()
    # A chunked upload abandoned half-way (EOF inside a chunk).
    s = socket.create_connection((qa_server.host, qa_server.port))
    s.sendall(b"POST /v2/models/onnx_zero_1_float32/infer HTTP/1.1\r\nHost: x\r\n"
              b"Inference-Header-Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"1000\r\n" + b"\0" * 100)
    s.shutdown(socket.SHUT_WR)
    drain_until_closed(s)
    s.close()
    assert live(qa_server)
    x = np.arange(16, dtype=np.float32).tobytes()
    assert raw_output(raw_post(qa_server, "onnx_zero_1_float32", x))[1] == x


def test_client_disconnect_mid_response(qa_server):
    x = np.ones(8 * MIB, np.float32).tobytes()  # 32 MiB back
    for i in range(4):
        s = socket.create_connection((qa_server.host, qa_server.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        head = ("POST /v2/models/onnx_zero_1_float32/infer HTTP/1.1\r\nHost: x\r\n"
                "Inference-Header-Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(x))
        s.sendall(head.encode() + x)
        s.recv(1024)
        if i % 2:
            # RST instead of FIN
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # Gone before the model even finishes.
    for _ in range(3):
        s = socket.create_connection((qa_server.host, qa_server.port))
        body = compact({"inputs": [json_in("INPUT0", "FP32", [1, 2], [1.0, 2.0])]}).encode()
        s.sendall(b"POST /v2/models/identity_delay/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.close()
    # They finish without anyone to answer: a request queued behind them on
    # the model's only instance is answered after them.
    body = compact({"inputs": [json_in("INPUT0", "FP32", [1, 2], [1.0, 2.0])]})
    r = requests.post(qa_server.url + "/v2/models/identity_delay/infer", data=body, timeout=30)
    assert r.status_code == 200, r.text
    assert live(qa_server)
    y = np.arange(1024, dtype=np.float32).tobytes()
    assert raw_output(raw_post(qa_server, "onnx_zero_1_float32", y))[1] == y


N_CONNECTIONS = 160


def test_many_keep_alive_connections(qa_server):
    """>=128 concurrent keep-alive connections are all served, each for
    several requests, without the server closing them."""
    body = SIMPLE_BODY
    barrier = threading.Barrier(N_CONNECTIONS, timeout=60)
    results = [None] * N_CONNECTIONS

    def worker(i):
        try:
            with harness.RawConnection(qa_server.host, qa_server.port, timeout=60) as c:
                barrier.wait()  # all connections open at once
                out = []
                for _ in range(3):
                    r = c.request("POST", "/v2/models/simple/infer",
                                  {"Content-Type": "application/json"}, body)
                    out.append((r.status, r.headers.get("connection", ""), r.body))
                results[i] = out
        except Exception as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(N_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failures = [(i, r) for i, r in enumerate(results) if not isinstance(r, list)]
    assert not failures, f"{len(failures)} connections failed, e.g. {failures[:3]}"
    for out in results:
        for status, connection, resp in out:
            assert status == 200
            assert connection.lower() != "close"
            assert resp.decode() == ALL_JSON


def test_first_response_keeps_connection_alive(qa_server):
    """Queuing a response in the first access-handler call makes
    libmicrohttpd close the connection; GET and POST must both keep it."""
    with harness.RawConnection(qa_server.host, qa_server.port) as c:
        for _ in range(3):
            r = c.request("GET", "/v2/health/live")
            assert r.status == 200 and r.headers.get("connection", "").lower() != "close"
            r = c.request("GET", "/v2/models/simple")
            assert r.status == 200 and r.headers.get("connection", "").lower() != "close"
            r = c.request("POST", "/v2/models/simple/infer", {}, SIMPLE_BODY)
            assert r.status == 200 and r.headers.get("connection", "").lower() != "close"
            r = c.request("GET", "/v2/nothing")
            assert r.status == 404 and r.headers.get("connection", "").lower() != "close"
            r = c.request("POST", "/v2/models/simple/infer", {}, b"{")
            assert r.status == 500
