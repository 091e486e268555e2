"""STRING tensors (ONNX tensor(string), Triton's TYPE_STRING / BYTES) in
Osprey's ONNX runtime, through the real server: a graph taking and giving
strings (Cast both ways, Equal against a STRING initializer, Identity),
compared with onnxruntime over HTTP and gRPC; Triton's QA `*_object`
sequence model (qa/common/gen_qa_sequence_models.py: STRING INPUT, Cast to
INT32, Add START, Mul READY, Cast back to STRING) driven as a sequence; a
sequence model whose TYPE_STRING CORRID reaches the graph; malformed BYTES
and text that is no number answered 400; auto-complete's TYPE_STRING."""

import json
import struct

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

import harness

S, F32, I32 = TensorProto.STRING, TensorProto.FLOAT, TensorProto.INT32
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, initializers=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def strings_graph():
    """TEXT (STRING [-1]) and NUM (FP32 [-1]) in; TEXT as FP32 and NUM as
    STRING out."""
    return _model(
        [helper.make_node("Cast", ["TEXT"], ["AS_FLOAT"], to=F32),
         helper.make_node("Cast", ["NUM"], ["AS_TEXT"], to=S)],
        [vi("TEXT", S, [None]), vi("NUM", F32, [None])],
        [vi("AS_FLOAT", F32, [None]), vi("AS_TEXT", S, [None])])


def words_graph():
    """TEXT (STRING [-1]) in; TEXT itself (through a Reshape to [-1, 1]
    and back) and TEXT == "yes" (a STRING initializer) out."""
    yes = helper.make_tensor("yes", S, [1], [b"yes"])
    col = helper.make_tensor("col", TensorProto.INT64, [2], [-1, 1])
    flat = helper.make_tensor("flat", TensorProto.INT64, [1], [-1])
    return _model(
        [helper.make_node("Reshape", ["TEXT", "col"], ["as_col"]),
         helper.make_node("Reshape", ["as_col", "flat"], ["ECHO"]),
         helper.make_node("Equal", ["TEXT", "yes"], ["IS_YES"])],
        [vi("TEXT", S, [None])],
        [vi("ECHO", S, [None]), vi("IS_YES", TensorProto.BOOL, [None])],
        [yes, col, flat])


def qa_object_graph():
    """create_onnx_modelfile of Triton's gen_qa_sequence_models.py for
    dtype object, batching: OUTPUT = str((int(INPUT) + START) * READY)."""
    b = [None]
    return _model(
        [helper.make_node("Cast", ["INPUT"], ["_INPUT"], to=I32),
         helper.make_node("Add", ["_INPUT", "START"], ["add"]),
         helper.make_node("Mul", ["READY", "add"], ["CAST"]),
         helper.make_node("Cast", ["CAST"], ["OUTPUT"], to=S)],
        [vi("INPUT", S, b + [1]), vi("START", I32, b + [1]), vi("READY", I32, b + [1])],
        [vi("OUTPUT", S, b + [1])])


def corrid_graph():
    """OUTPUT = INPUT, CORRID_OUT = the CORRID the sequence batcher fed."""
    b = [None]
    return _model(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"]),
         helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"])],
        [vi("INPUT", I32, b + [1]), vi("CORRID", S, b + [1])],
        [vi("OUTPUT", I32, b + [1]), vi("CORRID_OUT", S, b + [1])])


QA_CONTROLS = (
    '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
    "        int32_false_true: [ 0, 1 ] } ] },\n"
    '    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY\n'
    "        int32_false_true: [ 0, 1 ] } ] }")
CORRID_CONTROL = (
    '    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID\n'
    "        data_type: TYPE_STRING } ] }")


def _sequence(controls):
    return ("sequence_batching {\n"
            "  max_sequence_idle_microseconds: 5000000\n"
            "  oldest { max_candidate_sequences: 8 }\n"
            f"  control_input [\n{controls}\n  ]\n"
            "}\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("strings_repo")
    harness.write_model(
        repo, "strings",
        harness.model_config(
            "strings", "onnxruntime",
            [("TEXT", "TYPE_STRING", [-1]), ("NUM", "TYPE_FP32", [-1])],
            [("AS_FLOAT", "TYPE_FP32", [-1]), ("AS_TEXT", "TYPE_STRING", [-1])], 0),
        files={"model.onnx": strings_graph()})
    harness.write_model(
        repo, "words",
        harness.model_config(
            "words", "onnxruntime", [("TEXT", "TYPE_STRING", [-1])],
            [("ECHO", "TYPE_STRING", [-1]), ("IS_YES", "TYPE_BOOL", [-1])], 0),
        files={"model.onnx": words_graph()})
    harness.write_model(
        repo, "onnx_sequence_object",
        harness.model_config("onnx_sequence_object", "onnxruntime",
                             [("INPUT", "TYPE_STRING", [1])],
                             [("OUTPUT", "TYPE_STRING", [1])], 8,
                             _sequence(QA_CONTROLS)),
        files={"model.onnx": qa_object_graph()})
    harness.write_model(
        repo, "string_corrid",
        harness.model_config("string_corrid", "onnxruntime",
                             [("INPUT", "TYPE_INT32", [1])],
                             [("OUTPUT", "TYPE_INT32", [1]),
                              ("CORRID_OUT", "TYPE_STRING", [1])], 8,
                             _sequence(CORRID_CONTROL)),
        files={"model.onnx": corrid_graph()})
    harness.write_model(
        repo, "gather_strings",
        harness.model_config("gather_strings", "onnxruntime",
                             [("TEXT", "TYPE_STRING", [-1])],
                             [("FIRST", "TYPE_STRING", [1])], 0),
        files={"model.onnx": _model(
            [helper.make_node("Gather", ["TEXT", "zero"], ["FIRST"], name="g")],
            [vi("TEXT", S, [None])], [vi("FIRST", S, [1])],
            [helper.make_tensor("zero", TensorProto.INT64, [1], [0])])})
    auto = repo / "strings_auto" / "1"
    auto.mkdir(parents=True)
    (auto / "model.onnx").write_bytes(_model(
        [helper.make_node("Cast", ["TEXT"], ["AS_FLOAT"], to=F32)],
        [vi("TEXT", S, ["batch", 2])], [vi("AS_FLOAT", F32, ["batch", 2])]))
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                  workdir=tmp_path_factory.mktemp("strings_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


TEXT = np.array(["1.5", "yes", " 2", "-7e3", "NaN", "", "héllo", "yes\0x"], dtype=object)
TEXT_NUMERIC = np.array(["1.5", " 2", "-7e3", "inf", "0x10", "3abc"], dtype=object)
NUM = np.array([0.1, 1e20, -0.0, np.inf, -np.inf, 1 / 3, 123456789, 3], np.float32)


def _reference(text, num):
    s = ort.InferenceSession(strings_graph(), providers=["CPUExecutionProvider"])
    return dict(zip(["AS_FLOAT", "AS_TEXT"], s.run(None, {"TEXT": text, "NUM": num})))


def _infer(client_mod, url, text, num, outputs):
    c = client_mod.InferenceServerClient(url)
    t = client_mod.InferInput("TEXT", list(text.shape), "BYTES")
    t.set_data_from_numpy(text)
    n = client_mod.InferInput("NUM", list(num.shape), "FP32")
    n.set_data_from_numpy(num)
    r = c.infer("strings", [t, n],
                outputs=[client_mod.InferRequestedOutput(o) for o in outputs])
    return {o: r.as_numpy(o) for o in outputs}


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_strings_in_and_out_match_onnxruntime(srv, proto):
    """Cast STRING->FLOAT and FLOAT->STRING give onnxruntime's results;
    views and Equal against a STRING initializer keep strings byte for
    byte (UTF-8, an embedded NUL, the empty string)."""
    mod, url = (httpclient, srv.hostport) if proto == "http" else (grpcclient, srv.grpc_url)
    got = _infer(mod, url, TEXT_NUMERIC, NUM, ["AS_FLOAT", "AS_TEXT"])
    want = _reference(TEXT_NUMERIC, NUM)
    np.testing.assert_array_equal(got["AS_FLOAT"], want["AS_FLOAT"])
    assert [x.decode() for x in got["AS_TEXT"]] == list(want["AS_TEXT"])

    c = mod.InferenceServerClient(url)
    words = np.array([w.encode() for w in TEXT], dtype=object)
    t = mod.InferInput("TEXT", [len(words)], "BYTES")
    t.set_data_from_numpy(words)
    r = c.infer("words", [t])
    assert list(r.as_numpy("ECHO")) == list(words)
    np.testing.assert_array_equal(r.as_numpy("IS_YES"), [w == "yes" for w in TEXT])


def test_text_that_is_no_number_is_400(srv):
    """Cast of 'abc' to FLOAT fails the request (400) naming node and
    element, as onnxruntime refuses it; the server serves on."""
    c = httpclient.InferenceServerClient(srv.hostport)
    t = httpclient.InferInput("TEXT", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"1", b"abc"], dtype=object))
    n = httpclient.InferInput("NUM", [1], "FP32")
    n.set_data_from_numpy(np.array([1], np.float32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("strings", [t, n])
    assert e.value.status() == "400"
    assert "element 1 of input 0: 'abc' is not a number" in e.value.message()
    assert _infer(httpclient, srv.hostport, TEXT_NUMERIC, NUM, ["AS_TEXT"])


def test_malformed_bytes_input_is_400(srv):
    """A BYTES element whose length runs past the end of the tensor: 400
    with a message naming the input; the server serves on."""
    data = struct.pack("<I", 100) + b"abcd"
    header = json.dumps({"inputs": [
        {"name": "TEXT", "shape": [1], "datatype": "BYTES",
         "parameters": {"binary_data_size": len(data)}},
        {"name": "NUM", "shape": [1], "datatype": "FP32", "data": [1.0]}]}).encode()
    host, port = srv.hostport.split(":")
    with harness.RawConnection(host, int(port)) as conn:
        r = conn.request("POST", "/v2/models/strings/infer",
                         {"Inference-Header-Content-Length": str(len(header)),
                          "Content-Type": "application/octet-stream"},
                         header + data)
    assert r.status == 400, r.body
    assert b"TEXT" in r.body
    assert _infer(httpclient, srv.hostport, TEXT_NUMERIC, NUM, ["AS_TEXT"])


def _qa_step(client_mod, client, seq_id, value, start=False, end=False):
    inp = client_mod.InferInput("INPUT", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[str(value).encode()]], dtype=object))
    r = client.infer("onnx_sequence_object", [inp], sequence_id=seq_id,
                     sequence_start=start, sequence_end=end)
    return r.as_numpy("OUTPUT").reshape(-1)[0]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_qa_object_sequence_model(srv, proto):
    """Triton's onnx_sequence_object: OUTPUT = str((int(INPUT) + START) *
    READY), so the START step shows INPUT + 1 and later steps INPUT."""
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(srv.hostport if proto == "http" else srv.grpc_url)
    seq = 41 if proto == "http" else 42
    assert _qa_step(mod, c, seq, 3, start=True) == b"4"
    assert _qa_step(mod, c, seq, -12) == b"-12"
    assert _qa_step(mod, c, seq, 100, end=True) == b"100"


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_string_corrid_reaches_the_graph(srv, proto):
    """A TYPE_STRING CORRID is a STRING graph input: the graph returns the
    string sequence id it was fed."""
    mod = httpclient if proto == "http" else grpcclient
    c = mod.InferenceServerClient(srv.hostport if proto == "http" else srv.grpc_url)
    sid = f"session-{proto}-ü"
    for step, (start, end) in enumerate([(True, False), (False, True)]):
        inp = mod.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[step]], np.int32))
        r = c.infer("string_corrid", [inp], sequence_id=sid,
                    sequence_start=start, sequence_end=end)
        assert r.as_numpy("OUTPUT").reshape(-1)[0] == step
        assert r.as_numpy("CORRID_OUT").reshape(-1)[0] == sid.encode()


def test_auto_complete_maps_strings_to_type_string(srv):
    """A model without config.pbtxt: tensor(string) becomes TYPE_STRING, as
    Triton's onnxruntime backend fills it in."""
    c = httpclient.InferenceServerClient(srv.hostport)
    cfg = c.get_model_config("strings_auto")
    types = {t["name"]: t["data_type"] for t in cfg["input"] + cfg["output"]}
    assert types == {"TEXT": "TYPE_STRING", "AS_FLOAT": "TYPE_FP32"}


def test_ops_without_strings_refuse_them_by_name(srv):
    """An op the runtime does not run on strings (Gather) fails the
    request naming the node, its opset and the STRING tensor; the model
    stays loaded."""
    c = httpclient.InferenceServerClient(srv.hostport)
    t = httpclient.InferInput("TEXT", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"a", b"b"], dtype=object))
    with pytest.raises(InferenceServerException) as e:
        c.infer("gather_strings", [t])
    assert ("node 'g' (Gather, opset 13): input 0: dtype STRING is not supported"
            in e.value.message()), e.value.message()
    assert c.is_model_ready("gather_strings")
