"""STRING tensors (ONNX tensor(string), Triton's TYPE_STRING / BYTES) in
Osprey's ONNX runtime, through the real server: a graph taking and giving
strings (Cast both ways, Equal against a STRING initializer, Identity),
compared with onnxruntime over HTTP and gRPC; Triton's QA `*_object`
sequence model (qa/common/gen_qa_sequence_models.py: STRING INPUT, Cast to
INT32, Add START, Mul READY, Cast back to STRING) driven as a sequence; a
sequence model whose TYPE_STRING CORRID reaches the graph; malformed BYTES
and text that is no number answered 400; auto-complete's TYPE_STRING; the
movement ops (Gather, GatherElements, Concat, Slice, Split, Expand, Tile,
Transpose, Where) and STRING Constants against onnxruntime."""

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


def _ints(name, values, dims=None):
    return helper.make_tensor(name, TensorProto.INT64,
                              [len(values)] if dims is None else dims, values)


def moves_graph():
    """The movement ops on strings, as tokenizer-side graphs and label
    lookups use them: TEXT (STRING [-1, 4]), IDX (INT64 [-1]) and COND
    (BOOL [-1, 4]) in; one STRING output per op. Strings come from the
    request (TEXT), an initializer (labels, lookup), Constant nodes
    (value tensor, value_strings, value_string; WORDS is one, folded at
    load) and a Cast to STRING."""
    n = helper.make_node
    labels = helper.make_tensor("labels", S, [1, 4], [b"cat", b"dog", b"", b"h\xc3\xa9"])
    lookup = helper.make_tensor("lookup", S, [3], [b"zero", b"one", b"two"])
    nodes = [
        n("Gather", ["TEXT", "IDX"], ["GATHER"], axis=0),
        n("Gather", ["TEXT", "i20"], ["GATHER1"], axis=1),
        n("Gather", ["lookup", "IDX"], ["LOOKUP"]),
        n("GatherElements", ["TEXT", "ge_idx"], ["GELEM"], axis=1),
        n("Constant", [], ["words"], value_strings=["x", "yy", "", "z"]),
        n("Unsqueeze", ["words", "zero"], ["words_row"]),
        n("Constant", [], ["row"], value=helper.make_tensor(
            "row", S, [1, 4], [b"a", b"bb", b"ccc", b"\0"])),
        n("Concat", ["TEXT", "labels", "words_row", "row"], ["CONCAT"], axis=0),
        n("Slice", ["TEXT", "starts", "ends", "axes", "steps"], ["SLICE"]),
        n("Split", ["TEXT", "split"], ["SPLIT_A", "SPLIT_B"], axis=1),
        n("Expand", ["TEXT", "eshape"], ["EXPAND"]),
        n("Tile", ["TEXT", "reps"], ["TILE"]),
        n("Transpose", ["TEXT"], ["TRANSPOSE"], perm=[1, 0]),
        n("Where", ["COND", "TEXT", "labels"], ["WHERE"]),
        n("Constant", [], ["question"], value_string="?"),
        n("Where", ["COND", "question", "TEXT"], ["WHERE_SCALAR"]),
        n("Cast", ["IDX"], ["idx_text"], to=S),
        n("Concat", ["idx_text", "idx_text"], ["IDX_TEXT"], axis=0),
        n("Identity", ["words"], ["WORDS"]),
    ]
    outputs = [("GATHER", [None, 4]), ("GATHER1", [None, 2]), ("LOOKUP", [None]),
               ("GELEM", [1, 4]), ("CONCAT", [None, 4]), ("SLICE", [None, 2]),
               ("SPLIT_A", [None, 1]), ("SPLIT_B", [None, 3]),
               ("EXPAND", [2, None, 4]), ("TILE", [None, 8]),
               ("TRANSPOSE", [4, None]), ("WHERE", [None, 4]),
               ("WHERE_SCALAR", [None, 4]), ("IDX_TEXT", [None]), ("WORDS", [4])]
    return _model(
        nodes,
        [vi("TEXT", S, [None, 4]), vi("IDX", TensorProto.INT64, [None]),
         vi("COND", TensorProto.BOOL, [None, 4])],
        [vi(o, S, d) for o, d in outputs],
        [labels, lookup, _ints("i20", [2, 0]), _ints("ge_idx", [3, 0, -1, 1], [1, 4]),
         _ints("zero", [0]), _ints("starts", [0, 3]), _ints("ends", [9, -9]),
         _ints("axes", [0, 1]), _ints("steps", [1, -2]), _ints("split", [1, 3]),
         _ints("eshape", [2, 1, 1]), _ints("reps", [1, 2])])


MOVES_OUTPUTS = ["GATHER", "GATHER1", "LOOKUP", "GELEM", "CONCAT", "SLICE",
                 "SPLIT_A", "SPLIT_B", "EXPAND", "TILE", "TRANSPOSE", "WHERE",
                 "WHERE_SCALAR", "IDX_TEXT", "WORDS"]


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
        repo, "pad_strings",
        harness.model_config("pad_strings", "onnxruntime",
                             [("TEXT", "TYPE_STRING", [-1])],
                             [("PADDED", "TYPE_STRING", [-1])], 0),
        files={"model.onnx": _model(
            [helper.make_node("Pad", ["TEXT", "pads"], ["PADDED"], name="p")],
            [vi("TEXT", S, [None])], [vi("PADDED", S, [None])],
            [helper.make_tensor("pads", TensorProto.INT64, [2], [1, 0])])})
    dims = {"GATHER": [-1, 4], "GATHER1": [-1, 2], "LOOKUP": [-1], "GELEM": [1, 4],
            "CONCAT": [-1, 4], "SLICE": [-1, 2], "SPLIT_A": [-1, 1],
            "SPLIT_B": [-1, 3], "EXPAND": [2, -1, 4], "TILE": [-1, 8],
            "TRANSPOSE": [4, -1], "WHERE": [-1, 4], "WHERE_SCALAR": [-1, 4],
            "IDX_TEXT": [-1], "WORDS": [4]}
    harness.write_model(
        repo, "moves",
        harness.model_config(
            "moves", "onnxruntime",
            [("TEXT", "TYPE_STRING", [-1, 4]), ("IDX", "TYPE_INT64", [-1]),
             ("COND", "TYPE_BOOL", [-1, 4])],
            [(o, "TYPE_STRING", dims[o]) for o in MOVES_OUTPUTS], 0,
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"),
        files={"model.onnx": moves_graph()})
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
    """An op the runtime does not run on strings (Pad) fails the request
    naming the node, its opset and the STRING tensor; the model stays
    loaded."""
    c = httpclient.InferenceServerClient(srv.hostport)
    t = httpclient.InferInput("TEXT", [2], "BYTES")
    t.set_data_from_numpy(np.array([b"a", b"b"], dtype=object))
    with pytest.raises(InferenceServerException) as e:
        c.infer("pad_strings", [t])
    assert ("node 'p' (Pad, opset 13): input 0: dtype STRING is not supported"
            in e.value.message()), e.value.message()
    assert c.is_model_ready("pad_strings")


def _moves_inputs(mod, text, idx, cond):
    ins = [mod.InferInput("TEXT", list(text.shape), "BYTES"),
           mod.InferInput("IDX", list(idx.shape), "INT64"),
           mod.InferInput("COND", list(cond.shape), "BOOL")]
    for i, v in zip(ins, [text, idx, cond]):
        i.set_data_from_numpy(v)
    return ins


MOVES_CASES = [
    (np.array([["a", "bb", "c\0d", "héllo"], ["", "x", "yy", "zzz"],
               ["1", "2", "3", "4"]], dtype=object),
     np.array([2, 0, -1, 1], np.int64),
     np.array([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]], bool)),
    (np.array([["only", "one", "row", "here"]], dtype=object),
     np.array([0], np.int64),
     np.array([[0, 1, 0, 1]], bool)),
]


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_movement_ops_on_strings_match_onnxruntime(srv, proto):
    """Gather (request, initializer and Cast strings), GatherElements,
    Concat (with STRING Constants), Slice (reversed), Split, Expand, Tile,
    Transpose and Where (STRING X/Y, broadcast, a scalar value_string)
    give onnxruntime's strings byte for byte, run after run with other
    shapes. Gather on axis 0 is checked against numpy: onnxruntime 1.32's
    Gather of strings copies only the first element of each row (inner
    size > 1) and leaves the rest empty."""
    mod, url = (httpclient, srv.hostport) if proto == "http" else (grpcclient, srv.grpc_url)
    c = mod.InferenceServerClient(url)
    ref = ort.InferenceSession(moves_graph(), providers=["CPUExecutionProvider"])
    for text, idx, cond in MOVES_CASES:
        want = dict(zip(MOVES_OUTPUTS,
                        ref.run(MOVES_OUTPUTS, {"TEXT": text, "IDX": idx, "COND": cond})))
        want["GATHER"] = np.take(text, idx, axis=0)
        wire = np.array([[w.encode() for w in row] for row in text], dtype=object)
        r = c.infer("moves", _moves_inputs(mod, wire, idx, cond),
                    outputs=[mod.InferRequestedOutput(o) for o in MOVES_OUTPUTS])
        for o in MOVES_OUTPUTS:
            got = r.as_numpy(o)
            assert got.shape == want[o].shape, o
            assert [x.decode() for x in got.reshape(-1)] == list(want[o].reshape(-1)), o


def test_gather_of_strings_out_of_range_is_400(srv):
    """A Gather index outside the axis fails the request (400) naming the
    index; the model serves on."""
    c = httpclient.InferenceServerClient(srv.hostport)
    text, idx, cond = MOVES_CASES[1]
    wire = np.array([[w.encode() for w in row] for row in text], dtype=object)
    with pytest.raises(InferenceServerException) as e:
        c.infer("moves", _moves_inputs(httpclient, wire, np.array([5], np.int64), cond))
    assert e.value.status() == "400"
    assert "index 5" in e.value.message(), e.value.message()
    r = c.infer("moves", _moves_inputs(httpclient, wire, idx, cond))
    assert list(r.as_numpy("LOOKUP")) == [b"zero"]
