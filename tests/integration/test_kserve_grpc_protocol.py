"""The KServe v2 gRPC service at the wire level (protocol reference §5,
plus §4 for trace and §6 for the repository and statistics): every RPC's
statuses and messages as a running Triton gives them, typed and raw
contents, request parameters, bad input (malformed protobuf, unknown
method, oversize, mixed or missing contents, wrong sizes, cancel and
disconnect mid-stream), restricted protocols, shared memory, model
control with overrides, TraceSetting (the gRPC half of Triton's
qa/L0_trace/trace_endpoint_test.py), LogSettings, trace stamps and the
SIGTERM drain. Requests are built with the generated stubs that ship with
tritonclient.grpc, so each field is exactly what the test says."""

import json
import pathlib
import queue
import signal
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import harness

SERVICE = "/inference.GRPCInferenceService/"


@pytest.fixture
def stub(models_server):
    with grpc.insecure_channel(models_server.grpc_url) as ch:
        yield service_pb2_grpc.GRPCInferenceServiceStub(ch)


@pytest.fixture
def qa_stub(qa_server):
    with grpc.insecure_channel(qa_server.grpc_url) as ch:
        yield service_pb2_grpc.GRPCInferenceServiceStub(ch)


def rpc_error(fn, *args, **kw):
    with pytest.raises(grpc.RpcError) as e:
        fn(*args, **kw)
    return e.value.code(), e.value.details()


def tensor(name, datatype, shape, **contents):
    t = service_pb2.ModelInferRequest().InferInputTensor(
        name=name, datatype=datatype, shape=shape)
    for field, values in contents.items():
        getattr(t.contents, field).extend(values)
    return t


def simple_raw_request(a=None, b=None, **kw):
    a = np.arange(16, dtype=np.int32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), dtype=np.int32) if b is None else b
    req = service_pb2.ModelInferRequest(model_name="simple", **kw)
    req.inputs.extend([tensor("INPUT0", "INT32", [1, 16]), tensor("INPUT1", "INT32", [1, 16])])
    req.raw_input_contents.extend([a.tobytes(), b.tobytes()])
    return req


def output(resp, i, dtype):
    return np.frombuffer(resp.raw_output_contents[i], dtype=dtype)


def raw_call(srv, method, payload, metadata=None):
    """Sends raw bytes to `method` and returns (code, details, bytes)."""
    with grpc.insecure_channel(srv.grpc_url) as ch:
        call = ch.unary_unary(method, request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        try:
            return grpc.StatusCode.OK, "", call(payload, metadata=metadata, timeout=10)
        except grpc.RpcError as e:
            return e.code(), e.details(), None


def still_serving(srv):
    """Both ports answer after whatever the test did."""
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        assert c.is_server_live()
    assert requests.get(srv.url + "/v2/health/live", timeout=5).status_code == 200


# ---- health, metadata, config, statistics -------------------------------------------


def test_health_rpcs(stub, models_server):
    assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
    assert stub.ServerReady(service_pb2.ServerReadyRequest()).ready
    assert stub.ModelReady(service_pb2.ModelReadyRequest(name="simple")).ready
    assert stub.ModelReady(service_pb2.ModelReadyRequest(name="simple", version="1")).ready
    # Unknown model or version: OK with ready false (observed on Triton).
    assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="nope")).ready
    assert not stub.ModelReady(service_pb2.ModelReadyRequest(name="simple", version="7")).ready
    code, msg = rpc_error(stub.ModelReady, service_pb2.ModelReadyRequest(name="simple",
                                                                         version="-1"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert msg == ("invalid model version specified '-1' , version should be an "
                   "integral value > 0")
    # grpc.health.v1.Health/Check answers SERVING (1) for any service name.
    code, _, body = raw_call(models_server, "/grpc.health.v1.Health/Check", b"\x0a\x03any")
    assert code == grpc.StatusCode.OK and body == b"\x08\x01"


def test_metadata_and_config(stub):
    meta = stub.ServerMetadata(service_pb2.ServerMetadataRequest())
    # Triton 2.51's list whatever the flags (no --allow-client-shm here).
    assert meta.name == "triton" and list(meta.extensions) == [
        "classification", "sequence", "model_repository",
        "model_repository(unload_dependents)", "schedule_policy", "model_configuration",
        "system_shared_memory", "cuda_shared_memory", "binary_tensor_data", "parameters",
        "statistics", "trace", "logging"]
    mm = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="half_plus_two"))
    assert mm.versions == ["123"] and mm.platform == "affine"
    assert list(mm.inputs[0].shape) == [-1]  # no batch dim: max_batch_size 0
    code, msg = rpc_error(stub.ModelMetadata, service_pb2.ModelMetadataRequest(name="nope"))
    assert (code, msg) == (grpc.StatusCode.NOT_FOUND,
                           "Request for unknown model: 'nope' is not found")
    code, msg = rpc_error(stub.ModelConfig,
                          service_pb2.ModelConfigRequest(name="simple", version="3"))
    assert (code, msg) == (grpc.StatusCode.NOT_FOUND,
                           "Request for unknown model: 'simple' version 3 is not found")
    cfg = stub.ModelConfig(service_pb2.ModelConfigRequest(name="digits_mlp")).config
    assert cfg.backend == "dense" and cfg.max_batch_size == 256
    assert cfg.parameters["activation"].string_value == "relu"
    assert cfg.instance_group[0].name == "digits_mlp_0"
    assert cfg.version_policy.WhichOneof("policy_choice") == "latest"


def test_statistics_errors(stub):
    code, msg = rpc_error(stub.ModelStatistics, service_pb2.ModelStatisticsRequest(name="nope"))
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "requested model 'nope' is not available")
    code, msg = rpc_error(stub.ModelStatistics,
                          service_pb2.ModelStatisticsRequest(name="simple", version="9"))
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "requested model version is not available for model 'simple'")
    every = stub.ModelStatistics(service_pb2.ModelStatisticsRequest())
    assert "simple" in [m.name for m in every.model_stats]


# ---- inference: raw and typed contents ----------------------------------------------------


def test_raw_contents(stub):
    resp = stub.ModelInfer(simple_raw_request(id="r1"))
    assert resp.id == "r1" and resp.model_name == "simple" and resp.model_version == "1"
    assert [o.name for o in resp.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert list(resp.outputs[0].shape) == [1, 16] and resp.outputs[0].datatype == "INT32"
    np.testing.assert_array_equal(output(resp, 0, np.int32), np.arange(16) + 1)
    np.testing.assert_array_equal(output(resp, 1, np.int32), np.arange(16) - 1)


def test_typed_contents(stub, qa_stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    req.inputs.extend([tensor("INPUT0", "INT32", [1, 16], int_contents=range(16)),
                       tensor("INPUT1", "INT32", [1, 16], int_contents=[2] * 16)])
    resp = stub.ModelInfer(req)
    np.testing.assert_array_equal(output(resp, 0, np.int32), np.arange(16) + 2)
    # Outputs always come back raw, never in contents.
    assert not resp.outputs[0].HasField("contents")

    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.append(tensor("INPUT0", "FP32", [1, 3], fp32_contents=[0.5, -1.0, 3.25]))
    np.testing.assert_array_equal(output(stub.ModelInfer(req), 0, np.float32),
                                  [0.5, -1.0, 3.25])

    req = service_pb2.ModelInferRequest(model_name="simple_identity")
    req.inputs.append(tensor("INPUT0", "BYTES", [1, 2], bytes_contents=[b"ab", b""]))
    raw = stub.ModelInfer(req).raw_output_contents[0]
    assert raw == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"

    cases = [("identity_bool", "BOOL", dict(bool_contents=[True, False, True]), np.bool_),
             ("identity_int8", "INT8", dict(int_contents=[-3, 0, 127]), np.int8),
             ("identity_uint32", "UINT32", dict(uint_contents=[1, 2, 4000000000]), np.uint32),
             ("simple_identity_int64", "INT64", dict(int64_contents=[-1, 2**40, 3]), np.int64),
             ("identity_fp64", "FP64", dict(fp64_contents=[1.5, -2.5, 1e300]), np.float64)]
    for model, dt, contents, npdt in cases:
        req = service_pb2.ModelInferRequest(model_name=model)
        req.inputs.append(tensor("INPUT0", dt, [1, 3], **contents))
        got = output(qa_stub.ModelInfer(req), 0, npdt)
        np.testing.assert_array_equal(got, np.array(list(contents.values())[0], dtype=npdt))


def test_contents_errors(stub):
    req = service_pb2.ModelInferRequest(model_name="simple")
    req.inputs.extend([tensor("INPUT0", "INT32", [1, 16], int_contents=range(16)),
                       tensor("INPUT1", "INT32", [1, 16])])
    req.raw_input_contents.append(np.ones(16, np.int32).tobytes())
    code, msg = rpc_error(stub.ModelInfer, req)
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "contents field must not be specified when using "
                           "raw_input_contents for 'INPUT0' for model 'simple'")

    req = simple_raw_request()
    del req.raw_input_contents[1]
    code, msg = rpc_error(stub.ModelInfer, req)
    assert msg == "unable to find data for input tensor 'INPUT1' for model 'simple' in request."
    assert code == grpc.StatusCode.INVALID_ARGUMENT

    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.append(tensor("INPUT0", "FP32", [1, 2], int_contents=[1, 2]))
    code, msg = rpc_error(stub.ModelInfer, req)
    assert msg == ("unexpected explicit tensor data for input tensor 'INPUT0' for model "
                   "'identity_fp32' of type 'INT32', expected datatype 'FP32'")

    req = simple_raw_request()
    req.raw_input_contents[0] = b"\x00" * 60  # 15 elements
    code, msg = rpc_error(stub.ModelInfer, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60" in msg

    # Negative dimensions reach the model's checks, worded as Triton's.
    req = simple_raw_request(id="n1")
    req.inputs[0].shape[:] = [1, -16]
    code, msg = rpc_error(stub.ModelInfer, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert msg.startswith("[request id: n1] unexpected shape for input 'INPUT0' for model "
                          "'simple'. Expected [-1,16], got [1,-16]. NOTE: ")
    req = simple_raw_request(id="n2")
    for t in req.inputs:
        t.shape[:] = [-1, 16]
    code, msg = rpc_error(stub.ModelInfer, req)
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "[request id: n2] All input dimensions should be specified for "
                           "input 'INPUT0' for model 'simple', got [-1,16]")

    # An unknown datatype name reads '<invalid>', as TRITONSERVER_DataTypeString.
    req = simple_raw_request()
    req.inputs[0].datatype = "FOO"
    code, msg = rpc_error(stub.ModelInfer, req)
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "[request id: <id_unknown>] inference input 'INPUT0' data-type is "
                           "'<invalid>', but model 'simple' expects 'INT32'")

    # The model is checked first, as in Triton.
    req = simple_raw_request()
    req.model_name = "nope"
    del req.raw_input_contents[:]
    assert rpc_error(stub.ModelInfer, req)[0] == grpc.StatusCode.NOT_FOUND


def test_version_strings_as_std_stol(stub):
    """Triton reads a version with std::stol: text after the digits is
    ignored, no digits or out of range is one message, a negative number
    another (observed on Triton 2.51)."""
    assert stub.ModelInfer(simple_raw_request(model_version="1x")).model_version == "1"
    assert stub.ModelInfer(simple_raw_request(model_version=" 1")).model_version == "1"
    for version in ("abc", "99999999999999999999"):
        code, msg = rpc_error(stub.ModelInfer, simple_raw_request(model_version=version))
        assert (code, msg) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0")
    code, msg = rpc_error(stub.ModelReady,
                          service_pb2.ModelReadyRequest(name="simple", version="x"))
    assert msg.startswith("failed to get model version from specified version string 'x'")
    code, msg = rpc_error(stub.ModelInfer, simple_raw_request(model_version="-3"))
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "invalid model version specified '-3' , version should be an "
                           "integral value > 0")


def bytes_request(model, elements, id=""):
    req = service_pb2.ModelInferRequest(model_name=model, id=id)
    req.inputs.append(tensor("INPUT0", "BYTES", [1, len(elements)]))
    return req


def test_bytes_elements_bounded_by_message_size(qa_server):
    """A million one-byte bytes_contents elements (3 MB on the wire)
    decode: the decoder's memory is bounded by the message, not by the
    number of elements (Triton takes ten million)."""
    n = 1_000_000
    req = bytes_request("simple_identity", [b"x"] * n)
    req.inputs[0].contents.bytes_contents.extend([b"x"] * n)
    opts = [("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(qa_server.grpc_url, options=opts) as ch:
        resp = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=60)
    assert list(resp.outputs[0].shape) == [1, n]
    assert resp.raw_output_contents[0] == b"\x01\x00\x00\x00x" * n


def test_incomplete_string_data(qa_stub):
    req = bytes_request("simple_identity", [None] * 2, id="s1")
    req.raw_input_contents.append(b"\x01\x00\x00\x00a\x05\x00\x00\x00ab")
    code, msg = rpc_error(qa_stub.ModelInfer, req)
    assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                           "incomplete string data for inference input 'INPUT0', expecting "
                           "string of length 5 but only 2 bytes available")


def test_request_parameters(stub):
    def with_param(key, **value):
        req = simple_raw_request()
        req.parameters[key].CopyFrom(service_pb2.InferParameter(**value))
        return req

    assert stub.ModelInfer(with_param("priority", uint64_param=1)).model_name == "simple"
    assert stub.ModelInfer(with_param("sequence_id", string_param="s")).model_name == "simple"
    assert stub.ModelInfer(with_param("custom", double_param=0.5)).model_name == "simple"
    for key, value, message in [
        ("priority", dict(string_param="x"),
         "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
        ("priority", dict(int64_param=-1), "invalid value for 'priority', expected value >= 0."),
        ("timeout", dict(bool_param=True),
         "invalid value type for 'timeout' parameter, expected int64_param."),
        ("sequence_id", dict(double_param=1.0),
         "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
        ("sequence_start", dict(int64_param=1),
         "invalid value type for 'sequence_start' parameter, expected bool_param."),
        ("custom", dict(uint64_param=1),
         "invalid value type for 'custom' parameter, expected int64_param, bool_param, "
         "or string_param."),
        ("triton_x", dict(bool_param=True),
         "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
         "following keys starting with 'triton_' are allowed: "
         "triton_enable_empty_final_response"),
    ]:
        code, msg = rpc_error(stub.ModelInfer, with_param(key, **value))
        assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT, message), key


def test_outputs_selected_and_duplicates_refused(stub):
    req = simple_raw_request()
    req.outputs.add(name="OUTPUT1")
    resp = stub.ModelInfer(req)
    assert [o.name for o in resp.outputs] == ["OUTPUT1"]
    assert len(resp.raw_output_contents) == 1
    # as current Triton (qa/L0_grpc python_unit_test.py), not 2.51
    req.outputs.add(name="OUTPUT1")
    code, msg = rpc_error(stub.ModelInfer, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "output 'OUTPUT1' already exists in request" in msg
    req = simple_raw_request()
    req.outputs.add(name="NOPE")
    code, msg = rpc_error(stub.ModelInfer, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "unexpected inference output 'NOPE' for model 'simple'" in msg


# ---- bad input at the transport ------------------------------------------------------


def test_malformed_and_unknown(models_server):
    for payload in (b"\xff\xff\xff", b"\x0a\x05ab", b"\x3a\x80\x80\x80\x80\x10"):
        code, msg, _ = raw_call(models_server, SERVICE + "ModelInfer", payload)
        assert (code, msg) == (grpc.StatusCode.INTERNAL, "Unable to parse request")
    code, msg, _ = raw_call(models_server, SERVICE + "ModelConfig", b"\x0a")
    assert (code, msg) == (grpc.StatusCode.INTERNAL, "Unable to parse request")
    # Every RPC parses its request, fieldless ones included, and a proto3
    # string that is not UTF-8 does not parse (C++ protobuf's rule).
    bad_utf8 = b"\x0a\x02\xff\xfe"  # field 1, a string on each method below
    for method in ("ServerLive", "ServerReady", "ServerMetadata", "ModelReady",
                   "ModelMetadata", "ModelConfig", "ModelStatistics", "ModelInfer",
                   "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
                   "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
                   "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
                   "TraceSetting", "LogSettings"):
        code, msg, _ = raw_call(models_server, SERVICE + method, b"\xff\xff")
        assert (code, msg) == (grpc.StatusCode.INTERNAL, "Unable to parse request"), method
        if method.startswith("Server"):
            continue  # no fields: field 1 is unknown and skipped
        code, msg, _ = raw_call(models_server, SERVICE + method, bad_utf8)
        assert (code, msg) == (grpc.StatusCode.INTERNAL, "Unable to parse request"), method
    code, _, _ = raw_call(models_server, SERVICE + "ServerLive", bad_utf8)
    assert code == grpc.StatusCode.OK
    # nested: an input tensor's name
    req = simple_raw_request()
    payload = req.SerializeToString().replace(b"INPUT1", b"INPUT\xc0")
    code, msg, _ = raw_call(models_server, SERVICE + "ModelInfer", payload)
    assert (code, msg) == (grpc.StatusCode.INTERNAL, "Unable to parse request")
    # well-formed multi-byte UTF-8 parses
    code, msg, _ = raw_call(models_server, SERVICE + "ModelReady",
                            service_pb2.ModelReadyRequest(name="mod\u00e8le").SerializeToString())
    assert code == grpc.StatusCode.OK
    code, msg, _ = raw_call(models_server, SERVICE + "NoSuchRpc", b"")
    assert code == grpc.StatusCode.UNIMPLEMENTED and "NoSuchRpc" in msg
    code, _, _ = raw_call(models_server, "/other.Service/Call", b"")
    assert code == grpc.StatusCode.UNIMPLEMENTED
    still_serving(models_server)


def test_oversize_message(start_server, example_repo_copy):
    srv = start_server(example_repo_copy, ["--grpc-max-message-size=1048576"])
    with grpc.insecure_channel(srv.grpc_url) as ch:
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name="identity_fp32")
        req.inputs.append(tensor("INPUT0", "FP32", [1, 1 << 19]))
        req.raw_input_contents.append(b"\x00" * (2 << 20))
        code, msg = rpc_error(s.ModelInfer, req)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, msg
        assert s.ModelInfer(simple_raw_request()).model_name == "simple"
    still_serving(srv)


def test_restricted_protocol(start_server, example_repo_copy):
    srv = start_server(example_repo_copy, [
        "--grpc-restricted-protocol=inference,model-config:infer-key=secret"])
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        assert c.is_server_ready()  # health is open
        a = np.ones((1, 4), np.float32)
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(a)
        with pytest.raises(InferenceServerException) as e:
            c.infer("identity_fp32", [inp])
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        assert e.value.message() == ("This protocol is restricted, expecting header "
                                     "'triton-grpc-protocol-infer-key'")
        with pytest.raises(InferenceServerException):
            c.infer("identity_fp32", [inp], headers={"triton-grpc-protocol-infer-key": "no"})
        r = c.infer("identity_fp32", [inp], headers={"triton-grpc-protocol-infer-key": "secret"})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a)
        with pytest.raises(InferenceServerException):
            c.get_model_config("simple")
    # HTTP is not restricted by the gRPC flag.
    assert requests.get(srv.url + "/v2/models/simple/config").status_code == 200


def test_bad_restricted_protocol_flag(tmp_path, example_repo_copy):
    srv = harness.OspreyServer(example_repo_copy, ["--grpc-restricted-protocol=bogus:k=v"],
                               workdir=tmp_path)
    assert srv.run_to_exit() == 2
    assert "unknown restricted protocol 'bogus'" in srv.log()


# ---- streams ------------------------------------------------------------------------------


def stream_requests(reqs, delay=0.0):
    for r in reqs:
        if delay:
            time.sleep(delay)
        yield r


def test_stream_in_band_errors_and_order(stub):
    bad = simple_raw_request(id="bad")
    del bad.raw_input_contents[1]
    reqs = [simple_raw_request(id="a"), bad,
            service_pb2.ModelInferRequest(model_name="nope", id="unknown"),
            simple_raw_request(id="b")]
    got = list(stub.ModelStreamInfer(stream_requests(reqs)))
    assert len(got) == 4
    by_id = {r.infer_response.id: r for r in got}
    assert by_id["a"].error_message == "" and by_id["b"].error_message == ""
    assert by_id["a"].infer_response.parameters["triton_final_response"].bool_param
    np.testing.assert_array_equal(
        np.frombuffer(by_id["b"].infer_response.raw_output_contents[0], np.int32),
        np.arange(16) + 1)
    assert by_id["bad"].error_message == (
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.")
    assert by_id["unknown"].error_message == "Request for unknown model: 'nope' is not found"


def test_stream_triton_grpc_error_mode(stub):
    bad = simple_raw_request(id="bad")
    del bad.raw_input_contents[1]
    it = stub.ModelStreamInfer(stream_requests([simple_raw_request(id="a"), bad]),
                               metadata=[("triton_grpc_error", "true")])
    with pytest.raises(grpc.RpcError) as e:
        for _ in it:
            pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_stream_many_in_flight(qa_server):
    """Requests overlap on one stream and are answered as they finish: a
    quick request sent after two slow ones (300 ms each, another model)
    comes back first."""
    with grpc.insecure_channel(qa_server.grpc_url) as ch:
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        reqs = []
        for i in range(2):
            r = service_pb2.ModelInferRequest(model_name="identity_delay", id=f"slow{i}")
            r.inputs.append(tensor("INPUT0", "FP32", [1, 1], fp32_contents=[float(i)]))
            reqs.append(r)
        reqs.append(simple_raw_request(id="fast"))
        got = [r.infer_response.id for r in s.ModelStreamInfer(stream_requests(reqs))]
    assert got[0] == "fast" and sorted(got) == ["fast", "slow0", "slow1"]


def test_cancel_and_disconnect_mid_stream(qa_server):
    for _ in range(3):
        ch = grpc.insecure_channel(qa_server.grpc_url)
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        reqs = []
        for i in range(4):
            r = service_pb2.ModelInferRequest(model_name="identity_delay", id=str(i))
            r.inputs.append(tensor("INPUT0", "FP32", [1, 1], fp32_contents=[1.0]))
            reqs.append(r)
        call = s.ModelStreamInfer(stream_requests(reqs))
        # Cancelled once requests wait in the server (behind the model's
        # only instance; a former round's may count too: any moment is
        # a valid one to cancel at, this one is mid-stream).
        harness.wait_for(lambda: harness.pending_requests(qa_server, "identity_delay") >= 3,
                         "queued stream requests")
        call.cancel()
        ch.close()
    # A unary call cut off by a closed channel, once it waits in the server
    # behind what the streams left.
    ch = grpc.insecure_channel(qa_server.grpc_url)
    before = harness.pending_requests(qa_server, "identity_delay")
    fut = service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer.future(
        service_pb2.ModelInferRequest(
            model_name="identity_delay",
            inputs=[tensor("INPUT0", "FP32", [1, 1], fp32_contents=[1.0])]))
    harness.wait_for(lambda: harness.pending_requests(qa_server, "identity_delay") != before,
                     "the unary call to reach the server")
    ch.close()
    with pytest.raises(Exception):
        fut.result()
    # The core finishes the abandoned requests: a request queued behind
    # them on the model's only instance is answered after them.
    with grpcclient.InferenceServerClient(qa_server.grpc_url) as c:
        inp = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        inp.set_data_from_numpy(np.ones((1, 1), np.float32))
        c.infer("identity_delay", [inp])
    still_serving(qa_server)


# ---- shared memory --------------------------------------------------------------------


def test_shared_memory_rpcs_disabled(stub):
    assert len(stub.SystemSharedMemoryStatus(
        service_pb2.SystemSharedMemoryStatusRequest()).regions) == 0
    disabled = ("Client shared memory is disabled. Start the server with "
                "'--allow-client-shm=true' to enable.")
    code, msg = rpc_error(stub.SystemSharedMemoryRegister,
                          service_pb2.SystemSharedMemoryRegisterRequest(name="r", key="/k",
                                                                        byte_size=8))
    assert (code, msg) == (grpc.StatusCode.UNIMPLEMENTED, disabled)
    assert len(stub.CudaSharedMemoryStatus(service_pb2.CudaSharedMemoryStatusRequest()).regions) == 0
    code, msg = rpc_error(stub.CudaSharedMemoryStatus,
                          service_pb2.CudaSharedMemoryStatusRequest(name="x"))
    assert (code, msg) == (grpc.StatusCode.NOT_FOUND,
                           "Unable to find cuda shared memory region: 'x'")


def test_system_shared_memory_inference(start_server, example_repo_copy):
    """simple_grpc_shm_client.py's flow: inputs and outputs in regions."""
    import tritonclient.utils.shared_memory as shm
    srv = start_server(example_repo_copy, ["--allow-client-shm=true"])
    key = f"/osprey_grpc_{srv.pid}"
    handle = shm.create_shared_memory_region("io", key, 256)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.int32)
        shm.set_shared_memory_region(handle, [a, b])
        with grpcclient.InferenceServerClient(srv.grpc_url) as c:
            assert "system_shared_memory" in c.get_server_metadata().extensions
            c.register_system_shared_memory("io", key, 256)
            status = c.get_system_shared_memory_status()
            assert status.regions["io"].byte_size == 256 and status.regions["io"].key == key
            ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                   grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
            ins[0].set_shared_memory("io", 64)
            ins[1].set_shared_memory("io", 64, offset=64)
            outs = [grpcclient.InferRequestedOutput("OUTPUT0"),
                    grpcclient.InferRequestedOutput("OUTPUT1")]
            outs[0].set_shared_memory("io", 64, offset=128)
            outs[1].set_shared_memory("io", 64, offset=192)
            r = c.infer("simple", ins, outputs=outs)
            assert list(r.get_response().raw_output_contents) == [b"", b""]
            s0 = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128)
            s1 = shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=192)
            np.testing.assert_array_equal(s0, a + b)
            np.testing.assert_array_equal(s1, a - b)
            with pytest.raises(InferenceServerException) as e:
                c.register_system_shared_memory("io", key, 256)
            assert e.value.status() == "StatusCode.ALREADY_EXISTS"
            with pytest.raises(InferenceServerException) as e:
                c.register_cuda_shared_memory("g", b"\x00" * 64, 0, 8)
            assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert e.value.message() == ("failed to register CUDA shared memory region: "
                                         "'g', GPUs not supported")
            c.unregister_system_shared_memory()
            assert len(c.get_system_shared_memory_status().regions) == 0
    finally:
        shm.destroy_shared_memory_region(handle)


# ---- model repository -------------------------------------------------------------------


def test_repository_rpcs(start_server, example_repo_copy):
    srv = start_server(example_repo_copy, ["--model-control-mode=explicit",
                                           "--load-model=simple"])
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        index = {m.name: m for m in c.get_model_repository_index().models}
        assert index["simple"].state == "READY" and index["simple"].version == "1"
        assert index["identity_fp32"].state == "" and index["identity_fp32"].version == ""
        # A config override (ModelConfig JSON) plus a file: stands in for the folder.
        cfg = c.get_model_config("simple", as_json=True)["config"]
        cfg["max_batch_size"] = 4
        c.load_model("simple", config=json.dumps(cfg), files={"file:1/notes.txt": b"hi"})
        assert c.get_model_config("simple").config.max_batch_size == 4
        with pytest.raises(InferenceServerException) as e:
            c.load_model("no_such_model")
        assert e.value.status() == "StatusCode.INTERNAL"
        assert e.value.message() == ("failed to load 'no_such_model', failed to poll from "
                                     "model repository")
        c.unload_model("identity_fp32")  # not loaded: OK
        c.unload_model("simple", unload_dependents=True)
        assert not c.is_model_ready("simple")
    with grpc.insecure_channel(srv.grpc_url) as ch:
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        code, msg = rpc_error(s.RepositoryIndex,
                              service_pb2.RepositoryIndexRequest(repository_name="r"))
        assert (code, msg) == (grpc.StatusCode.UNIMPLEMENTED,
                               "'repository_name' specification is not supported")
        req = service_pb2.RepositoryModelLoadRequest(model_name="simple")
        req.parameters["weird"].string_param = "x"
        code, msg = rpc_error(s.RepositoryModelLoad, req)
        assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT,
                               "unrecognized load parameter 'weird'.")
        req = service_pb2.RepositoryModelLoadRequest(model_name="simple")
        req.parameters["config"].bytes_param = b"{}"
        code, msg = rpc_error(s.RepositoryModelLoad, req)
        assert msg == "invalid value type for load parameter 'config', expected string_param."


def test_load_refused_without_explicit_mode(stub):
    code, msg = rpc_error(stub.RepositoryModelLoad,
                          service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    assert (code, msg) == (grpc.StatusCode.UNAVAILABLE,
                           "explicit model load / unload is not allowed if polling is enabled")


# ---- trace (gRPC half of qa/L0_trace/trace_endpoint_test.py) --------------------------------

INITIAL = {"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"], "trace_count": ["-1"],
           "log_frequency": ["0"], "trace_file": ["global_unittest.log"],
           "trace_mode": ["triton"]}
CLEAR = {"trace_level": None, "trace_rate": None, "trace_count": None, "log_frequency": None}


def settings_of(resp):
    return {k: list(v.value) for k, v in resp.settings.items()}


@pytest.fixture(scope="module")
def trace_server(tmp_path_factory):
    repo = harness.make_repo(tmp_path_factory.mktemp("grpc_trace_repo"), ["simple"])
    work = tmp_path_factory.mktemp("grpc_trace_srv")
    srv = harness.OspreyServer(repo, [
        "--trace-config=triton,file=global_unittest.log", "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1"], workdir=work).start()
    yield srv
    assert srv.stop() == 0
    assert srv.clean_exit_problems() == []


@pytest.fixture
def tclient(trace_server):
    with grpcclient.InferenceServerClient(trace_server.grpc_url) as c:
        yield c
        c.update_trace_settings(model_name="simple", settings=CLEAR)
        c.update_trace_settings(settings=CLEAR)


def test_grpc_get_settings(tclient):
    assert settings_of(tclient.get_trace_settings(model_name="simple")) == INITIAL
    assert settings_of(tclient.get_trace_settings()) == INITIAL
    with pytest.raises(InferenceServerException) as e:
        tclient.get_trace_settings(model_name="does-not-exist")
    assert "Request for unknown model : does-not-exist" in e.value.message()
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_grpc_update_settings(tclient):
    with pytest.raises(InferenceServerException) as e:
        tclient.update_trace_settings(model_name="simple", settings={"trace_file": "model.log"})
    assert e.value.message() == "trace file location can not be updated through network protocol"
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    expected = dict(INITIAL, trace_level=["TIMESTAMPS", "TENSORS"])
    assert settings_of(tclient.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})) == expected
    assert settings_of(tclient.get_trace_settings(model_name="simple")) == expected


def test_grpc_clear_settings(tclient):
    tclient.update_trace_settings(model_name="simple",
                                  settings={"trace_rate": "12", "log_frequency": "34"})
    tclient.update_trace_settings(settings={"trace_rate": "56", "trace_count": "78",
                                            "trace_level": ["OFF"]})
    assert settings_of(tclient.get_trace_settings(model_name="simple")) == dict(
        INITIAL, trace_level=["OFF"], trace_rate=["12"], trace_count=["78"],
        log_frequency=["34"])
    assert settings_of(tclient.update_trace_settings(
        settings={"trace_rate": None, "trace_count": None})) == dict(INITIAL, trace_level=["OFF"])
    assert settings_of(tclient.get_trace_settings(model_name="simple")) == dict(
        INITIAL, trace_level=["OFF"], trace_rate=["12"], log_frequency=["34"])
    assert settings_of(tclient.update_trace_settings(
        model_name="simple", settings={"trace_rate": None, "trace_level": None})) == dict(
        INITIAL, trace_level=["OFF"], log_frequency=["34"])


def test_grpc_update_errors(trace_server):
    with grpc.insecure_channel(trace_server.grpc_url) as ch:
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        for key, values, message in [
            ("trace_rate", ["1", "2"], "expect only 1 value for 'trace_rate'"),
            ("trace_count", ["-5"], "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"),
            ("trace_rate", ["x"], "Unable to parse 'trace_rate', got: x"),
            ("log_frequency", ["10000000000"],
             "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: "
             "10000000000"),
            ("trace_level", ["OFF", "TIMESTAMPS"], "Expect only one trace level 'OFF' is specified"),
        ]:
            req = service_pb2.TraceSettingRequest()
            req.settings[key].value.extend(values)
            code, msg = rpc_error(s.TraceSetting, req)
            assert (code, msg) == (grpc.StatusCode.INVALID_ARGUMENT, message), key


def test_grpc_requests_are_traced(start_server, tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["simple"])
    srv = start_server(repo, ["--trace-config=triton,file=trace.log",
                              "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"])
    with grpcclient.InferenceServerClient(srv.grpc_url) as c:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
               grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        c.infer("simple", ins, request_id="unary")
        done = queue.Queue()
        c.start_stream(lambda result, error: done.put((result, error)))
        c.async_stream_infer("simple", ins, request_id="streamed")
        assert done.get(timeout=10)[1] is None
        c.stop_stream()
    assert srv.stop() == 0
    records = json.loads((srv.workdir / "trace.log").read_text())
    traces = {}
    for r in records:
        traces.setdefault(r["id"], []).append(r)
    assert len(traces) == 2
    for trace in traces.values():
        names = [r["timestamps"][0]["name"] for r in trace if "timestamps" in r]
        assert names[:2] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
        assert names[-2:] == ["GRPC_SEND_START", "GRPC_SEND_END"]
        assert "REQUEST_START" in names and "COMPUTE_END" in names
        times = [r["timestamps"][0]["ns"] for r in trace if "timestamps" in r]
        assert times == sorted(times)
    assert sorted(r["request_id"] for r in records if "request_id" in r) == ["streamed", "unary"]


# ---- logging -------------------------------------------------------------------------------


def test_log_settings(stub):
    def get(resp):
        return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in resp.settings.items()}

    now = get(stub.LogSettings(service_pb2.LogSettingsRequest()))
    assert now == {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                   "log_verbose_level": 0, "log_format": "default"}
    req = service_pb2.LogSettingsRequest()
    req.settings["log_verbose_level"].uint32_param = 1
    assert get(stub.LogSettings(req))["log_verbose_level"] == 1
    req.settings["log_verbose_level"].uint32_param = 0
    assert get(stub.LogSettings(req))["log_verbose_level"] == 0
    for key, value, code, message in [
        ("log_file", dict(string_param="x.log"), grpc.StatusCode.UNIMPLEMENTED,
         "log file location can not be updated through network protocol"),
        ("log_info", dict(string_param="yes"), grpc.StatusCode.INVALID_ARGUMENT,
         "expect boolean for 'log_info'"),
        ("log_verbose_level", dict(bool_param=True), grpc.StatusCode.INVALID_ARGUMENT,
         "expect int32 for 'log_verbose_level'"),
        ("log_format", dict(string_param="fancy"), grpc.StatusCode.INVALID_ARGUMENT,
         "invalid argument for log_format, got: fancy"),
    ]:
        req = service_pb2.LogSettingsRequest()
        req.settings[key].CopyFrom(service_pb2.LogSettingsRequest.SettingValue(**value))
        assert rpc_error(stub.LogSettings, req) == (code, message), key


# ---- shutdown --------------------------------------------------------------------------------


def test_sigterm_drains_calls_and_streams(tmp_path):
    repo = harness.make_repo(tmp_path / "repo", ["identity_delay"])
    srv = harness.OspreyServer(repo, [], workdir=tmp_path / "srv").start()
    try:
        ch = grpc.insecure_channel(srv.grpc_url)
        s = service_pb2_grpc.GRPCInferenceServiceStub(ch)

        def req(i):
            r = service_pb2.ModelInferRequest(model_name="identity_delay", id=str(i))
            r.inputs.append(tensor("INPUT0", "FP32", [1, 1], fp32_contents=[float(i)]))
            return r

        unary = s.ModelInfer.future(req(0))
        gate = threading.Event()

        def requests_then_wait():
            yield req(1)
            yield req(2)
            gate.wait(10)  # the client keeps its side open

        stream = s.ModelStreamInfer(requests_then_wait())
        got = []
        reader = threading.Thread(target=lambda: got.extend(stream), daemon=True)
        reader.start()
        # All three are in the server: one runs on the model's only
        # instance (300 ms), two wait for it.
        harness.wait_pending(srv, "identity_delay", 2)
        srv.proc.send_signal(signal.SIGTERM)
        assert unary.result(timeout=10).id == "0"
        reader.join(10)
        gate.set()
        assert sorted(r.infer_response.id for r in got) == ["1", "2"]
        assert all(r.error_message == "" for r in got)
        assert srv.wait_exit(timeout=20) == 0
        assert srv.clean_exit_problems() == []
        ch.close()
    finally:
        srv.kill()
