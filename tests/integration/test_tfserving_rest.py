"""The TensorFlow Serving REST surface (/v1/models/...), driven over raw
sockets against the real binary: the §7 vectors of
../shared/protocols/tfserving-rest.md (tags [H], [U], [P], [R], [C], and the
[J]/[V] vectors that go through the wire), the status and metadata replies
of §2, CORS, gzip bodies, NaN/Infinity, malformed bodies, the shared
statistics, and the curl commands of TF Serving's g3doc/api_rest.md.

Models: `half_plus_two` (the reference's "A", also standing for "default"
D: version 123, label Version_Label -> 123, six signatures) and
`saved_model_half_plus_three` (H3, version 123) from models/; the [J]/[V]
cases use a temporary repository of `identity` models whose default
serving_default signature takes the config's inputs (keys = input names).

Error bodies are compared byte for byte: `{\\n    "error": "<msg>"\\n}` with
rapidjson's escaping, Content-Type application/json. Where the reference
gives reply bytes they are compared exactly; otherwise replies are compared
as parsed JSON (Python's json accepts NaN/Infinity), order-insensitively.
Messages that quote the request (`JSON Value: <doc> ...`) are rebuilt with
`rj_pretty`, a copy of rapidjson's PrettyWriter with kFormatSingleLineArray.
"""

import base64
import gzip
import json
import shutil
import subprocess

import pytest
import requests

import harness

A = "half_plus_two"
H3 = "saved_model_half_plus_three"

# ---- tiny shared helpers -------------------------------------------------------


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body  # bytes

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Reply {self.status} {self.headers} {self.body[:400]!r}>"


def raw(srv, method, path, body=b"", headers=None):
    """One request on a fresh connection, the path sent exactly as given.
    body: bytes, str, or a dict/list (json.dumps). -> Reply."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    hdrs = dict(headers or {})
    if method in ("POST", "PUT", "PATCH") and not any(
            k.lower() in ("content-length", "transfer-encoding") for k in hdrs):
        hdrs["Content-Length"] = str(len(body))
    with harness.RawConnection(srv.host, srv.port, timeout=120) as c:
        r = c.request(method, path, hdrs, body)
    return Reply(r.status, r.headers, r.body)


def get(srv, path, **kw):
    return raw(srv, "GET", path, **kw)


def post(srv, path, body=b"", **kw):
    return raw(srv, "POST", path, body, **kw)


def rj_string(s):
    """A JSON string as rapidjson's Writer escapes it: '"', '\\' and the
    control characters; '/' and non-ASCII left as they are."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
             "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in s:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rj_double(x):
    """rapidjson Writer::Double for the values these tests use."""
    if x == int(x) and abs(x) < 1e21:
        return f"{int(x)}.0" if not (x == 0 and str(x).startswith("-")) else "-0.0"
    s = repr(x)
    assert "e" not in s and "inf" not in s and "nan" not in s, s  # keep tests simple
    return s


def rj_pretty(value):
    """rapidjson PrettyWriter (4-space indent, kFormatSingleLineArray) of a
    parsed document: objects span lines, arrays stay on one line (even the
    objects inside them open on the array's line)."""
    out = []
    stack = []  # [in_array, value_count]

    def prefix():
        if not stack:
            return
        level = stack[-1]
        if level[0]:
            if level[1] > 0:
                out.append(", ")
        else:
            if level[1] > 0:
                out.append(",\n" if level[1] % 2 == 0 else ": ")
            else:
                out.append("\n")
            if level[1] % 2 == 0:
                out.append(" " * (4 * len(stack)))
        level[1] += 1

    def write(v):
        prefix()
        if isinstance(v, dict):
            out.append("{")
            stack.append([False, 0])
            for k, item in v.items():
                prefix()
                out.append(rj_string(k))
                write(item)
            level = stack.pop()
            if level[1]:
                out.append("\n" + " " * (4 * len(stack)))
            out.append("}")
        elif isinstance(v, list):
            out.append("[")
            stack.append([True, 0])
            for item in v:
                write(item)
            stack.pop()
            out.append("]")
        elif v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(rj_double(v))
        else:
            out.append(rj_string(v))

    write(value)
    return "".join(out)


def error_body(message):
    return ('{\n    "error": ' + rj_string(message) + "\n}").encode()


def check_json_ct(r):
    assert r.headers.get("content-type") == "application/json", r


def check_error(r, status, message):
    """Status, Content-Type and the whole error body, byte for byte."""
    assert r.status == status, (status, message, r)
    check_json_ct(r)
    assert r.body == error_body(message), (message, r.body[:2000])


def error_text(r, status):
    """The error message of a well-formed /v1 error reply."""
    assert r.status == status, r
    check_json_ct(r)
    doc = r.json()
    assert list(doc) == ["error"], r
    assert r.body == error_body(doc["error"]), r.body[:2000]
    return doc["error"]


def check_ok(r, expected):
    """200, application/json, and the body equal to `expected` as parsed
    JSON (order-insensitive; NaN compares equal to NaN)."""
    assert r.status == 200, r
    check_json_ct(r)
    assert canon(r.json()) == canon(expected), r.body[:2000]


def check_bytes(r, expected):
    assert r.status == 200, r
    check_json_ct(r)
    assert r.body == expected.encode(), (r.body, expected)


def canon(doc):
    return json.dumps(doc, sort_keys=True)


def malformed(method, path):
    return f"Malformed request: {method} {path}"


def wrapped(i, msg, code="INVALID_ARGUMENT"):
    return f"Failed to process element: {i} of 'instances' list. Error: {code}: {msg}"


def wrapped_key(i, key, msg):
    return (f"Failed to process element: {i} key: {key} of 'instances' list. "
            f"Error: INVALID_ARGUMENT: {msg}")


def b64(s):
    return {"b64": base64.b64encode(s).decode()}


def live(srv):
    return requests.get(srv.url + "/v2/health/live", timeout=10).status_code == 200


# ---- servers ---------------------------------------------------------------------


def _stop_and_check(server):
    server.stop()
    problems = server.clean_exit_problems()
    if problems:
        pytest.fail("server did not shut down cleanly: " + "; ".join(problems)
                    + "\n--- server log (tail) ---\n" + server.log_tail(), pytrace=False)


class _Holder:
    """A module server restarted if a test kills it; the test that killed
    it fails with the log."""

    def __init__(self, factory):
        self.factory = factory
        self.server = None

    def get(self):
        if self.server is None or not self.server.alive():
            try:
                self.server = self.factory()
            except harness.ServerStartError as e:
                pytest.fail(str(e), pytrace=False)
        return self.server


def _use(holder):
    server = holder.get()
    yield server
    if not server.alive():
        rc = server.stop()
        pytest.fail(f"the server died during this test (exit status {rc})\n"
                    "--- server log (tail) ---\n" + server.log_tail(), pytrace=False)


@pytest.fixture(scope="module")
def _tfs_holder(tmp_path_factory):
    repo = tmp_path_factory.mktemp("tfs_models") / "models"
    shutil.copytree(harness.EXAMPLE_MODELS, repo)
    runs = {"n": 0}

    def factory():
        runs["n"] += 1
        work = tmp_path_factory.mktemp(f"tfs-run{runs['n']}")
        return harness.OspreyServer(repo, ["--model-control-mode=none"], workdir=work).start()

    holder = _Holder(factory)
    yield holder
    if holder.server is not None:
        _stop_and_check(holder.server)


@pytest.fixture
def srv(_tfs_holder):
    """The server on a copy of models/ (half_plus_two, H3, simple, ...)."""
    yield from _use(_tfs_holder)


def _ident(inputs, max_batch_size=0):
    """An identity model whose outputs are named like its inputs (output i
    is input i). inputs: [(name, TYPE, dims)]."""
    return lambda n: harness.model_config(n, "identity", inputs, inputs, max_batch_size)


# max_batch_size 0 everywhere: the request shape is the whole shape, so the
# core accepts whatever rank the JSON gives (dims are all -1).
ID_MODELS = {
    "i32_r1": _ident([("x", "TYPE_INT32", [-1])]),
    "i32_r2": _ident([("x", "TYPE_INT32", [-1, -1])]),
    "i32_r3": _ident([("int_tensor", "TYPE_INT32", [-1, -1, -1])]),
    "i64_r1": _ident([("x", "TYPE_INT64", [-1])]),
    "bool_r1": _ident([("x", "TYPE_BOOL", [-1])]),
    "f32_r1": _ident([("x", "TYPE_FP32", [-1])]),
    "f32_r2": _ident([("float_tensor", "TYPE_FP32", [-1, -1])]),
    "f16_r1": _ident([("x", "TYPE_FP16", [-1])]),
    "str_r1": _ident([("x", "TYPE_STRING", [-1])]),
    "str_r2": _ident([("x", "TYPE_STRING", [-1, -1])]),
    "str_default_r3": _ident([("default", "TYPE_STRING", [-1, -1, -1])]),
    "bytes_r2": _ident([("str_tensor_bytes", "TYPE_STRING", [-1, -1])]),
    "two_in": _ident([("int_tensor", "TYPE_INT32", [-1]),
                      ("str_tensor", "TYPE_STRING", [-1])]),
    "multi4": _ident([("int_tensor", "TYPE_INT32", [-1, -1, -1]),
                      ("str_tensor", "TYPE_STRING", [-1, -1]),
                      ("float_tensor", "TYPE_FP32", [-1, -1]),
                      ("dbl_tensor", "TYPE_FP64", [-1, -1])]),
    "multi5": _ident([("int_tensor", "TYPE_INT32", [-1, -1, -1]),
                      ("str_tensor", "TYPE_STRING", [-1, -1]),
                      ("float_tensor", "TYPE_FP32", [-1, -1]),
                      ("double_scalar_tensor", "TYPE_FP64", [-1]),
                      ("str_tensor_bytes", "TYPE_STRING", [-1, -1])]),
}


@pytest.fixture(scope="module")
def _id_holder(tmp_path_factory):
    repo = tmp_path_factory.mktemp("tfs_identity")
    for name, cfg in ID_MODELS.items():
        harness.write_model(repo, name, cfg(name))
    runs = {"n": 0}

    def factory():
        runs["n"] += 1
        work = tmp_path_factory.mktemp(f"tfs-id-run{runs['n']}")
        return harness.OspreyServer(repo, ["--model-control-mode=none"], workdir=work).start()

    holder = _Holder(factory)
    yield holder
    if holder.server is not None:
        _stop_and_check(holder.server)


@pytest.fixture
def idsrv(_id_holder):
    """The identity models of ID_MODELS."""
    yield from _use(_id_holder)


# ---- §1.2 / §1.3 routing: [H] 01-14, [U] 33-34, [C] 107-108 ---------------------


@pytest.mark.parametrize("method,path,message", [
    ("GET", "/v1/foo", None),                                                  # 01
    ("POST", "/v1/foo", None),                                                 # 02
    ("GET", "/v1/models", "Missing model name in request."),                   # 03
    ("GET", "/v1/models/debug/model_name", None),                              # 04
    ("POST", "/v1/models", None),                                              # 05
    ("GET", "/v1/models/foo:predict", None),                                   # 06
    ("GET", "/v1/models/foo/version/50:predict", None),                        # 07
    ("POST", "/v1/models/foo/version/50:regress", None),                       # 08
    ("POST", "/v1/models/foo/versions/HELLO:regress", None),                   # 09
    ("POST", "/v1/models/foo/versions/18446744073709551615:regress",
     "Failed to convert version: 18446744073709551615 to numeric."),          # 10
    ("POST", "/v1/models/foo/metadata", None),                                 # 11
    ("POST", "/v1/models/foo/label/some_label:regress", None),                 # 12
    ("POST", "/v1/models/foo/versions/50/labels/some_label:regress", None),    # 13
    ("POST", "/v1/models/foo/versions/some_label:regress", None),              # 14
    # §1.2 edge cases
    ("GET", "/v1/models/versions/5", "Missing model name in request."),
    ("GET", "/v1/models/labels/x", "Missing model name in request."),
    ("GET", "/v1/models/foo/", None),
    ("GET", "/v1/models/foo/versions/-1", None),
    ("GET", "/v1/models/foo/versions/1/labels/a", None),
    ("GET", "/v1/models/foo/metadata/x", None),
    ("POST", "/v1/models/foo/", None),
    ("POST", "/v1/models/foo:explain", None),
    ("POST", "/v1/models/foo:predict/", None),
])
def test_routing_errors(srv, method, path, message):
    r = raw(srv, method, path)
    check_error(r, 400, message or malformed(method, path))


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_other_methods_malformed(srv, method):
    # 108: DELETE /v1/models/A -> 400 Malformed request: DELETE /v1/models/A
    for path in (f"/v1/models/{A}", f"/v1/models/{A}:predict", "/v1/foo"):
        r = raw(srv, method, path, b'{"instances": [1.0]}')
        check_error(r, 400, malformed(method, path))


def test_head_is_400_without_body(srv):
    r = raw(srv, "HEAD", f"/v1/models/{A}")
    assert r.status == 400, r
    assert r.body == b""
    check_json_ct(r)


def test_case_insensitive_paths_and_method_trap(srv):
    # 107: the regex is (?i) but the method/subresource compare is exact.
    path = f"/V1/MODELS/{A}:PREDICT"
    check_error(post(srv, path, {"instances": [1.0]}), 400, malformed("POST", path))
    r = get(srv, f"/v1/models/{A}/METADATA")
    check_ok(r, STATUS_123)  # a status reply, not metadata
    check_ok(get(srv, f"/V1/MODELS/{A}/VERSIONS/123"), STATUS_123)
    r = post(srv, f"/V1/Models/{A}/Versions/123:predict", {"instances": [1.0, 2.0]})
    check_ok(r, {"predictions": [2.5, 3.0]})
    # the model name keeps its case; names are case-sensitive
    r = post(srv, "/v1/models/HALF_PLUS_TWO:predict", {"instances": [1.0]})
    check_error(r, 404, "Servable not found for request: Latest(HALF_PLUS_TWO)")


def test_query_string_is_part_of_the_path(srv):
    # §1.1.4 / 107
    path = f"/v1/models/{A}:predict?x=1"
    check_error(post(srv, path, {"instances": [1.0]}), 400, malformed("POST", path))
    check_error(get(srv, f"/v1/models/{A}?x=1"), 404,
                f"Could not find any versions of model {A}?x=1")


def test_version_leading_zeros(srv):
    r = post(srv, f"/v1/models/{A}/versions/00123:predict", {"instances": [1.0, 2.0]})
    check_ok(r, {"predictions": [2.5, 3.0]})
    check_ok(get(srv, f"/v1/models/{A}/versions/0123"), STATUS_123)


DECODED = "modelname!#$%&'()*+,/:;=?@[]"
ENCODED = "modelname%21%23%24%25%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D"


def test_percent_decoded_model_name(srv):
    # 33: the name is percent-decoded after matching
    check_error(get(srv, f"/v1/models/{ENCODED}"), 404,
                f"Could not find any versions of model {DECODED}")
    check_error(post(srv, f"/v1/models/{ENCODED}:predict", {"instances": [1]}), 404,
                f"Servable not found for request: Latest({DECODED})")
    # %5F is '_': the decoded name is the real model's
    check_ok(get(srv, "/v1/models/half%5Fplus%5Ftwo"), STATUS_123)
    # '+' is not a space
    check_error(get(srv, "/v1/models/a+b"), 404, "Could not find any versions of model a+b")


def test_label_of_an_unknown_model(srv):
    # TF Serving resolves the label before the servable
    for verb, body in ((":predict", {"instances": [1.0]}), (":regress", {"examples": [{}]}),
                       (":classify", {"examples": [{}]})):
        check_error(post(srv, f"/v1/models/nope/labels/stable{verb}", body),
                    400, "Unrecognized servable version label: stable")
    check_error(get(srv, "/v1/models/nope/labels/stable/metadata"), 400,
                "Unrecognized servable version label: stable")


def test_predict_through_the_x2_signatures(srv):
    """half_plus_two's regress_x2_to_y3 and classify_x2_to_y3 take x2:0, a
    DT_FLOAT tensor inside the graph, which :predict feeds directly."""
    for sig, key in (("regress_x2_to_y3", "outputs"), ("classify_x2_to_y3", "scores")):
        r = post(srv, f"/v1/models/{A}:predict",
                 {"signature_name": sig, "instances": [[1.0], [2.0]]})
        assert r.status == 200, r
        assert r.json() == {"predictions": [[3.5], [4.0]]}
        r = post(srv, f"/v1/models/{A}:predict",
                 {"signature_name": sig, "inputs": {"inputs": [[1.0], [2.0]]}})
        assert (r.status, r.json()) == (200, {"outputs": [[3.5], [4.0]]}), (sig, key)
    # :regress through it still reads the x2 feature of each example
    r = post(srv, f"/v1/models/{A}:regress",
             {"signature_name": "regress_x2_to_y3", "examples": [{"x2": 1.0}, {}]})
    assert (r.status, r.json()) == (200, {"results": [3.5, 3.0]})


def test_label_and_version_captures(srv):
    # 34: label "latest" + metadata subresource; version 99 on POST
    check_error(get(srv, f"/v1/models/{A}/labels/latest/metadata"), 400,
                "Unrecognized servable version label: latest")
    check_error(post(srv, f"/v1/models/{A}/versions/99:predict", {"instances": [1.0]}), 404,
                f"Servable not found for request: Specific({A}, 99)")
    r = get(srv, f"/v1/models/{A}/labels/Version_Label/metadata")
    assert r.status == 200, r
    check_json_ct(r)
    assert r.json()["model_spec"] == {"name": A, "signature_name": "", "version": "123"}


# ---- [H] 15-32 -------------------------------------------------------------------


def test_servable_not_found(srv):
    check_error(post(srv, "/v1/models/foo:predict", {"instances": [1]}), 404,        # 15
                "Servable not found for request: Latest(foo)")
    check_error(post(srv, "/v1/models/foo/versions/50:predict", {"instances": [1]}),  # 16
                404, "Servable not found for request: Specific(foo, 50)")
    check_error(post(srv, f"/v1/models/{A}99:predict", {"instances": [1]}), 404,      # 17
                f"Servable not found for request: Latest({A}99)")


def test_body_parsed_before_model_lookup(srv):
    # §1.3: an unknown model with a bad body gives the parse error
    check_error(post(srv, "/v1/models/foo:predict", b"{"), 400,
                "JSON Parse error: Missing a name for object member. at offset: 1")


def test_parse_errors(srv):
    p = f"/v1/models/{A}:predict"
    check_error(post(srv, p, b""), 400, "JSON Parse error: The document is empty")        # 18
    check_error(post(srv, p, "instances = [1, 2]"), 400,                                  # 19
                "JSON Parse error: Invalid value. at offset: 0")
    check_error(post(srv, p, b"   "), 400, "JSON Parse error: The document is empty. at offset: 3")
    check_error(post(srv, p, '{"a":1,}'), 400,
                "JSON Parse error: Missing a name for object member. at offset: 7")
    check_error(post(srv, p, '{"instances": [1e400]}'), 400,
                "JSON Parse error: Number too big to be stored in double. at offset: 15")
    for bad in ('{"instances": [.5]}', '{"instances": [+1]}', '{"instances": [1,]}',
                '{"instances": [nan]}', '{"instances": [inf]}', '{"instances": [infinity]}'):
        msg = error_text(post(srv, p, bad), 400)
        assert msg.startswith("JSON Parse error: Invalid value. at offset: "), (bad, msg)
    check_error(post(srv, p, '{"instances": [01]}'), 400,
                "JSON Parse error: Missing a comma or ']' after an array element. at offset: 16")


def test_type_error_and_label_errors(srv):
    check_error(post(srv, f"/v1/models/{A}:predict", {"instances": ["x", "y"]}), 400,   # 20
                "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
                "JSON Value: \"x\" Type: String is not of expected type: float")
    check_error(post(srv, f"/v1/models/{A}/labels/Version_Nonexistent:predict",          # 21
                     {"instances": ["x", "y"]}), 400,
                "Unrecognized servable version label: Version_Nonexistent")
    check_error(post(srv, f"/v1/models/{A}:predict", {"signature_name": 100}), 400,     # 22
                'JSON Value: {\n    "signature_name": 100\n} not formatted correctly. '
                "'signature_name' key must be a string value.")


def test_predict_a(srv):
    check_bytes(post(srv, f"/v1/models/{A}:predict",                                   # 23
                     {"instances": [[1.0, 2.0], [3.0, 4.0]]}),
                '{\n    "predictions": [[2.5, 3.0], [3.5, 4.0]\n    ]\n}')
    check_bytes(post(srv, f"/v1/models/{A}/versions/123:predict",                      # 24
                     {"instances": [1.0, 2.0]}),
                '{\n    "predictions": [2.5, 3.0\n    ]\n}')
    check_bytes(post(srv, f"/v1/models/{A}/labels/Version_Label:predict",              # 25
                     {"instances": [1.0, 2.0]}),
                '{\n    "predictions": [2.5, 3.0\n    ]\n}')
    check_ok(post(srv, f"/v1/models/{A}/versions/123:predict",                         # 26
                  {"signature_name": "serving_default", "instances": [3.0, 4.0]}),
             {"predictions": [3.5, 4.0]})
    r = post(srv, f"/v1/models/{A}/versions/123:predict",                              # 27
             {"signature_name": "serving_default", "inputs": [3.0, 4.0]})
    check_bytes(r, '{\n    "outputs": [\n        3.5,\n        4.0\n    ]\n}')
    # an empty signature_name means serving_default
    check_ok(post(srv, f"/v1/models/{A}:predict", {"signature_name": "", "instances": [0.0]}),
             {"predictions": [2.0]})


@pytest.mark.parametrize("prefix", ["", "/versions/123", "/labels/Version_Label"])
def test_regress_a(srv, prefix):
    r = post(srv, f"/v1/models/{A}{prefix}:regress",                                    # 28
             {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]})
    check_bytes(r, '{\n    "results": [42.0]\n}')


def test_classify_a(srv):
    r = post(srv, f"/v1/models/{A}:classify",                                           # 29
             {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]})
    check_bytes(r, '{\n    "results": [[["", 12.0]]\n    ]\n}')
    r = post(srv, f"/v1/models/{A}/labels/Version_Label:classify",                      # 30
             {"signature_name": "classify_x_to_y", "examples": [{"x": 10.0}]})
    check_ok(r, {"results": [[["", 7.0]]]})


# ---- §2 status and metadata: 31, 32, 39, 40, 41, 104-106 ---------------------------


STATUS_123 = {"model_version_status": [
    {"version": "123", "state": "AVAILABLE",
     "status": {"error_code": "OK", "error_message": ""}}]}


def check_status_format(r):
    """protobuf MessageToJsonString with add_whitespace: 1-space indent.
    Re-printing the parsed reply with indent=1 (keeping the server's key
    order) must give the same text."""
    text = r.body.decode()
    assert text.startswith('{\n "model_version_status": [\n  {\n   "'), text
    assert json.dumps(json.loads(text), indent=1) == text.rstrip("\n"), text


@pytest.mark.parametrize("suffix", ["", "/versions/123", "/labels/Version_Label"])
def test_status_a(srv, suffix):
    r = get(srv, f"/v1/models/{A}{suffix}")                                             # 31, 39
    check_ok(r, STATUS_123)
    check_status_format(r)


def test_status_ignores_body_and_label(srv):
    # GET ignores any body; a label is ignored by the status API (106)
    r = raw(srv, "GET", f"/v1/models/{A}", b"not json", {"Content-Length": "8"})
    check_ok(r, STATUS_123)
    check_ok(get(srv, f"/v1/models/{A}/labels/bogus"), STATUS_123)
    check_error(get(srv, f"/v1/models/{A}/labels/bogus/metadata"), 400,
                "Unrecognized servable version label: bogus")


def test_status_errors(srv):
    check_error(get(srv, f"/v1/models/{A}/versions/999"), 404,                         # 104
                f"Could not find version 999 of model {A}")
    check_error(get(srv, "/v1/models/nope"), 404, "Could not find any versions of model nope")
    check_error(get(srv, f"/v1/models/{A}/versions/999/metadata"), 404,                # 105
                f"Servable not found for request: Specific({A}, 999)")
    check_error(get(srv, "/v1/models/nope/metadata"), 404,
                "Servable not found for request: Latest(nope)")
    # /v1/models/metadata is a model named "metadata" (§1.2)
    check_error(get(srv, "/v1/models/metadata"), 404,
                "Could not find any versions of model metadata")


def _ti(dtype, name, shape=(-1, 1)):
    if shape is None:
        ts = {"dim": [], "unknown_rank": True}
    else:
        ts = {"dim": [{"size": str(d), "name": ""} for d in shape], "unknown_rank": False}
    return {"dtype": dtype, "tensor_shape": ts, "name": name}


def _sig(method, inputs, outputs):
    return {"inputs": inputs, "outputs": outputs,
            "method_name": "tensorflow/serving/" + method, "defaults": {}}


_EXAMPLE = _ti("DT_STRING", "tf_example:0", None)
A_SIGNATURES = {  # testdata/saved_model_half_plus_two_2_versions_metadata.json
    "serving_default": _sig("predict", {"x": _ti("DT_FLOAT", "x:0")},
                            {"y": _ti("DT_FLOAT", "y:0")}),
    "classify_x_to_y": _sig("classify", {"inputs": _EXAMPLE},
                            {"scores": _ti("DT_FLOAT", "y:0")}),
    "regress_x_to_y": _sig("regress", {"inputs": _EXAMPLE},
                           {"outputs": _ti("DT_FLOAT", "y:0")}),
    "regress_x_to_y2": _sig("regress", {"inputs": _EXAMPLE},
                            {"outputs": _ti("DT_FLOAT", "y2:0")}),
    "regress_x2_to_y3": _sig("regress", {"inputs": _ti("DT_FLOAT", "x2:0")},
                             {"outputs": _ti("DT_FLOAT", "y3:0")}),
    "classify_x2_to_y3": _sig("classify", {"inputs": _ti("DT_FLOAT", "x2:0")},
                              {"scores": _ti("DT_FLOAT", "y3:0")}),
}


def check_metadata_framing(r):
    """§2.2: concatenated by hand around 1-space protobuf prints."""
    text = r.body.decode()
    assert text.startswith('{\n"model_spec":'), text[:200]
    assert ',\n"metadata": {"signature_def": ' in text, text[:400]
    assert text.endswith("}\n}\n"), text[-40:]


@pytest.mark.parametrize("suffix", ["", "/versions/123", "/labels/Version_Label"])
def test_metadata_a(srv, suffix):
    r = get(srv, f"/v1/models/{A}{suffix}/metadata")                                   # 32, 40
    check_ok(r, {"model_spec": {"name": A, "signature_name": "", "version": "123"},
                 "metadata": {"signature_def": {"signature_def": A_SIGNATURES}}})
    check_metadata_framing(r)
    spec = r.body.decode().split('"model_spec":', 1)[1].split(',\n"metadata"', 1)[0]
    assert spec.startswith('{\n "'), spec  # 1-space indent inside


def test_status_h3(srv):
    r = get(srv, f"/v1/models/{H3}")                                                    # 41
    check_ok(r, STATUS_123)
    check_status_format(r)


def test_status_and_metadata_of_a_plain_osprey_model(srv):
    # every Osprey model has a default serving_default built from its config
    r = get(srv, "/v1/models/simple")
    assert r.status == 200, r
    check_status_format(r)
    st = r.json()["model_version_status"]
    assert [s["state"] for s in st] == ["AVAILABLE"] * len(st)
    versions = [int(s["version"]) for s in st]
    assert versions == sorted(versions, reverse=True)
    r = get(srv, "/v1/models/simple/metadata")
    assert r.status == 200, r
    check_metadata_framing(r)
    doc = r.json()
    assert doc["model_spec"]["name"] == "simple"
    assert doc["model_spec"]["signature_name"] == ""
    sig = doc["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert sig["defaults"] == {}
    assert sorted(sig["inputs"]) == ["INPUT0", "INPUT1"]
    assert sorted(sig["outputs"]) == ["OUTPUT0", "OUTPUT1"]
    for ti in list(sig["inputs"].values()) + list(sig["outputs"].values()):
        assert ti["dtype"] == "DT_INT32"
        assert ti["tensor_shape"] == {"dim": [{"size": "-1", "name": ""},
                                              {"size": "16", "name": ""}],
                                      "unknown_rank": False}
    # and predict goes through it (add_sub: OUTPUT0 = sum, OUTPUT1 = difference)
    seq = list(range(1, 17))
    r = post(srv, "/v1/models/simple:predict",
             {"instances": [{"INPUT0": seq, "INPUT1": seq}]})
    check_ok(r, {"predictions": [{"OUTPUT0": [2 * x for x in seq], "OUTPUT1": [0] * 16}]})
    r = post(srv, "/v1/models/simple:predict", {"inputs": {"INPUT0": [seq], "INPUT1": [seq]}})
    check_ok(r, {"outputs": {"OUTPUT0": [[2 * x for x in seq]], "OUTPUT1": [[0] * 16]}})


# ---- [P] 35-38, [R] 42-44 --------------------------------------------------------


def test_default_model_vectors(srv):
    check_ok(post(srv, f"/v1/models/{A}:classify",                                      # 35
                  {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}),
             {"results": [[["", 3.0]]]})
    check_ok(post(srv, f"/v1/models/{A}:regress",                                       # 36
                  {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}),
             {"results": [3.0]})
    check_ok(post(srv, f"/v1/models/{A}:predict", {"instances": [2.0, 3.0, 4.0]}),       # 37
             {"predictions": [3.0, 3.5, 4.0]})
    check_ok(post(srv, f"/v1/models/{A}:predict", {"inputs": [2.0, 3.0, 4.0]}),          # 38
             {"outputs": [3.0, 3.5, 4.0]})


def test_half_plus_three_vectors(srv):
    check_ok(post(srv, f"/v1/models/{H3}:predict", {"instances": [1.0, 2.0, 5.0]}),      # 42
             {"predictions": [3.5, 4.0, 5.5]})
    check_ok(post(srv, f"/v1/models/{H3}:regress",                                      # 43
                  {"signature_name": "tensorflow/serving/regress",
                   "examples": [{"x": 1.0}, {"x": 2.0}]}),
             {"results": [3.5, 4.0]})
    check_error(post(srv, "/v1/models/half:predict", {"instances": [1.0, 5.0]}), 404,   # 44
                "Servable not found for request: Latest(half)")


# ---- [C] 103, 109-113 -----------------------------------------------------------


def test_signature_errors(srv):
    check_error(post(srv, f"/v1/models/{A}:predict",                                    # 103
                     {"signature_name": "nope", "instances": [1.0]}), 400,
                'Serving signature name: "nope" not found in signature def')
    msg = error_text(post(srv, f"/v1/models/{A}:regress", {"examples": [{"x": 1.0}]}), 400)  # 109
    assert msg.startswith("No regression inputs found in SignatureDef: "), msg
    msg = error_text(post(srv, f"/v1/models/{A}:classify",
                          {"signature_name": "nope", "examples": [{"x": 1.0}]}), 400)
    assert msg == "No signature was found with the name: nope", msg


def test_regress_c_vectors(srv):
    check_ok(post(srv, f"/v1/models/{A}:regress",                                       # 110
                  {"signature_name": "regress_x_to_y2", "examples": [{"x": 2.0}]}),
             {"results": [4.0]})
    check_ok(post(srv, f"/v1/models/{A}:regress",                                       # 111
                  {"signature_name": "regress_x_to_y", "context": {"x": 4.0},
                   "examples": [{}, {}]}),
             {"results": [4.0, 4.0]})
    # the example wins over the context on the same key
    check_ok(post(srv, f"/v1/models/{A}:regress",
                  {"signature_name": "regress_x_to_y", "context": {"x": 4.0},
                   "examples": [{"x": 0.0}, {}]}),
             {"results": [2.0, 4.0]})
    msg = error_text(post(srv, f"/v1/models/{A}:regress",                               # 112
                          {"signature_name": "regress_x_to_y", "examples": [{"x": 80}]}), 400)
    assert "Data types don't match" in msg, msg


def test_duplicate_key_first_wins(srv):
    r = post(srv, f"/v1/models/{A}:predict", '{"instances": [1.0], "instances": [9.0]}')  # 113
    check_ok(r, {"predictions": [2.5]})


# ---- [V] through half_plus_two (x: float, elementwise) ----------------------------


def test_v_vectors_on_a(srv):
    p = f"/v1/models/{A}:predict"
    check_ok(post(srv, p, '{"instances": [1]} garbage'), {"predictions": [2.5]})         # 84
    check_bytes(post(srv, p, {"inputs": 3.0}), '{\n    "outputs": 3.5\n}')              # 85
    for body in ({"inputs": {"y": [1]}}, {"inputs": {}}):                               # 86
        check_error(post(srv, p, body), 400, "Missing named input: x in 'inputs' object.")
    check_ok(post(srv, p, {"inputs": {"x": [1.0], "ignored": 5}}), {"outputs": [2.5]})
    check_error(post(srv, p, {"instances": []}), 400,                                   # 87
                'JSON Value: {\n    "instances": []\n} No values in \'instances\' array')
    check_error(post(srv, p, {"instances": 1.0}), 400,                                  # 88
                'JSON Value: {\n    "instances": 1.0\n} Expecting \'instances\' to be an list/array')
    check_error(post(srv, p, {"signature_name": "serving_default"}), 400,               # 89
                "Missing 'inputs' or 'instances' key")
    check_error(post(srv, p, [1, 2]), 400, "JSON Value: [1, 2] Is not object")           # 90
    check_error(post(srv, p, {"instances": [[1, 2], [3]]}), 400,                        # 91
                wrapped(1, "Expecting tensor size: 2 but got: 1"))
    check_error(post(srv, p, {"instances": [[[1, 2], [3]]]}), 400,                      # 92
                wrapped(0, "Encountered list at unexpected size: 1 at level: 1 expected size: 2"))
    check_error(post(srv, p, {"instances": [[[1, 2], 5]]}), 400,                        # 93
                wrapped(0, "JSON Value: 5 found at incorrect level: 2 in the JSON DOM. "
                           "Expected at level: 2"))
    check_error(post(srv, p, {"instances": [[1, [2]]]}), 400,                           # 94
                wrapped(0, "Encountered list at unexpected level: 1 expected < 1"))
    check_error(post(srv, p, {"instances": [{"x": 1.0}, {"y": 2.0}]}), 400,              # 95
                wrapped_key(1, "y", "JSON object: does not have named input: y"))
    check_ok(post(srv, p, {"instances": [{"x": 1.0}, {"x": 2.0}]}),
             {"predictions": [2.5, 3.0]})
    body = {"instances": [[1, 2]], "inputs": [[1, 2]]}                                  # 55
    check_error(post(srv, p, body), 400,
                "JSON Value: " + rj_pretty(body) + " Not formatted correctly expecting only "
                "one of 'inputs' or 'instances' keys to exist ")
    check_error(post(srv, p, {"instances": [1.0], "signature_name": None}), 400,
                'JSON Value: {\n    "instances": [1.0],\n    "signature_name": null\n} '
                "not formatted correctly. 'signature_name' key must be a string value.")


def test_nan_and_infinity_in_and_out(srv):
    # 102 through A: NaN (sign ignored), Inf and Infinity both accepted
    r = post(srv, f"/v1/models/{A}:predict",
             '{"instances": [NaN, -NaN, Inf, -Inf, Infinity, -Infinity]}')
    check_bytes(r, '{\n    "predictions": [NaN, NaN, Infinity, -Infinity, Infinity, -Infinity'
                   '\n    ]\n}')
    check_error(post(srv, f"/v1/models/{A}:predict", '{"v":[nan]}'), 400,
                "JSON Parse error: Invalid value. at offset: 7")
    check_error(post(srv, f"/v1/models/{A}:predict", '{"v":[Nan]}'), 400,
                "JSON Parse error: Invalid value. at offset: 8")
    check_ok(post(srv, f"/v1/models/{A}:regress",
                  '{"signature_name": "regress_x_to_y", "examples": [{"x": -Infinity}]}'),
             {"results": [float("-inf")]})


# ---- classify/regress parsing ([J] 73-80) through half_plus_two ---------------------


def test_examples_parse_errors(srv):
    p = f"/v1/models/{A}:regress"
    body = {"signature_name": ["hello"], "examples": [{"x": 1.0}]}                      # 75
    check_error(post(srv, p, body), 400,
                "JSON Value: " + rj_pretty(body) +
                " not formatted correctly. 'signature_name' key must be a string value.")
    check_error(post(srv, p, {"context": [{"names": ["foo", "bar"]}]}), 400,            # 76
                "Example must be JSON object but got JSON Array")
    body = {"examples": {"names": ["foo", "bar"]}}                                      # 77
    check_error(post(srv, p, body), 400,
                "JSON Value: " + rj_pretty(body) + " Expecting 'examples' value to be an list/array")
    check_error(post(srv, p, {"examples": [[{"names": ["foo"]}]]}), 400,
                "Example must be JSON object but got JSON Array")
    check_error(post(srv, p, {"examples": [5]}), 400,
                "Example must be JSON object but got JSON Number")
    for val, kind in (([10, None], "Null"), ([10, {"test": 10}], "Object"),              # 78
                      ([[10], 20], "Array")):
        check_error(post(srv, p, {"examples": [{"names": val}]}), 400,
                    f"Feature: names has element with unexpected JSON type: {kind}")
    check_error(post(srv, p, {"examples": [{"names": [10, 10.0]}]}), 400,               # 79
                "Unexpected element type in feature: names expecting type: int64")
    check_error(post(srv, p, '{"examples": [{"names": [20, 18446744073709551603]}]}'),   # 80
                400, "Feature: names has uint64_t element. Only int64_t is supported.")
    body = {"signature_name": "regress_x_to_y"}
    check_error(post(srv, p, body), 400,
                "JSON Value: " + rj_pretty(body) +
                " When method is classify, key 'examples' is expected and was not found")
    body = {"examples": []}
    check_error(post(srv, p, body), 400,
                "JSON Value: " + rj_pretty(body) + " 'examples' value is an empty array")
    check_error(post(srv, f"/v1/models/{A}:classify", b""), 400,
                "JSON Parse error: The document is empty")


# ---- [J]/[V] through identity models -----------------------------------------------


def pred(idsrv, model, body):
    return post(idsrv, f"/v1/models/{model}:predict", body)


def test_j_row_int32(idsrv):
    check_ok(pred(idsrv, "i32_r2", {"instances": [[1, 2], [3, 4], [5, 6]]}),            # 45
             {"predictions": [[1, 2], [3, 4], [5, 6]]})
    check_bytes(pred(idsrv, "i32_r1", {"instances": [1, 2, 3, 4, 5]}),                  # 65
                '{\n    "predictions": [1, 2, 3, 4, 5\n    ]\n}')
    check_ok(pred(idsrv, "i32_r1", {"inputs": [1, 2, 3, 4, 5]}), {"outputs": [1, 2, 3, 4, 5]})


def test_j_float_values(idsrv):
    check_bytes(pred(idsrv, "f32_r1", {"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}),  # 46
                '{\n    "predictions": [1.0, 2.0, 3.0, 4.0, 5.003, 0.007, 0.0\n    ]\n}')
    check_bytes(pred(idsrv, "f32_r1", '{"instances": [1435774380, 1435774380.0]}'),      # 47
                '{\n    "predictions": [1.43577434e+09, 1.43577434e+09\n    ]\n}')
    check_bytes(pred(idsrv, "f32_r1",                                                    # 48
                     '{"instances": [1.79769e+308, -1.79769e+308, 2.22507e-308, -2.22507e-308]}'),
                '{\n    "predictions": [Infinity, -Infinity, 0.0, -0.0\n    ]\n}')
    check_bytes(pred(idsrv, "f32_r2",                                                    # 67
                     {"instances": [[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]]}),
                '{\n    "predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]\n    ]\n}')
    check_bytes(pred(idsrv, "f32_r2",                                                    # 68
                     '{"instances": [[NaN, Infinity], [3.0, -Infinity]]}'),
                '{\n    "predictions": [[NaN, Infinity], [3.0, -Infinity]\n    ]\n}')
    # §4 WriteDecimal examples
    check_bytes(pred(idsrv, "f32_r1", '{"instances": [0.1, 1234567, 1e10, 16777216, -0.0]}'),
                '{\n    "predictions": [0.1, 1234567.0, 1e+10, 16777216.0, -0.0\n    ]\n}')


def test_j_strings(idsrv):
    two = [b64(b"hello"), b64(b"world")]
    check_ok(pred(idsrv, "str_r1", {"instances": two}),                                 # 49
             {"predictions": ["hello", "world"]})
    check_ok(pred(idsrv, "str_r2", {"instances": [[two[0]], [two[1]]]}),
             {"predictions": [["hello"], ["world"]]})
    check_ok(pred(idsrv, "str_default_r3",                                              # 50
                  {"instances": [{"default": [[two[0]], [two[1]]]}]}),
             {"predictions": [[["hello"], ["world"]]]})
    # 66: an output whose name ends in _bytes is written as {"b64": ...}
    check_ok(pred(idsrv, "bytes_r2", {"instances": [["hello", "world"], ["tf", "serving"]]}),
             {"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
                              [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]})
    # padding optional, whitespace skipped (§3.3)
    check_ok(pred(idsrv, "str_r1", {"instances": [{"b64": "aGVsbG8"}, {"b64": "aGVs bG8="}]}),
             {"predictions": ["hello", "hello"]})


def test_j_multi_input_row(idsrv):
    body = ('{"instances": ['                                                            # 51
            '{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"], '
            '"float_tensor": [1.0, NaN], "dbl_tensor": [1.0]}, '
            '{"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"], '
            '"float_tensor": [2.0, Infinity], "dbl_tensor": [2.0]}]}')
    check_ok(pred(idsrv, "multi4", body), {"predictions": [
        {"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"],
         "float_tensor": [1.0, float("nan")], "dbl_tensor": [1.0]},
        {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"],
         "float_tensor": [2.0, float("inf")], "dbl_tensor": [2.0]}]})


def test_j_columnar_int(idsrv):
    for body in ({"inputs": {"int_tensor": [[[1, 2], [3, 4], [5, 6]]]}},                # 52
                 {"inputs": [[[1, 2], [3, 4], [5, 6]]]}):
        check_ok(pred(idsrv, "i32_r3", body), {"outputs": [[[1, 2], [3, 4], [5, 6]]]})
    rows = [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]                          # 64
    check_ok(pred(idsrv, "i32_r3", {"instances": rows}), {"predictions": rows})
    check_ok(pred(idsrv, "i32_r3", {"inputs": rows}), {"outputs": rows})


FIVE = [
    {"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"], "float_tensor": [1.0],
     "double_scalar_tensor": 8.0, "str_tensor_bytes": ["hello", "world"]},
    {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"], "float_tensor": [2.0],
     "double_scalar_tensor": 9.0, "str_tensor_bytes": ["tf", "serving"]},
]


def test_j_five_outputs_row_and_columnar(idsrv):
    out = []                                                                            # 70
    for inst in FIVE:
        o = dict(inst)
        o["str_tensor_bytes"] = [b64(s.encode()) for s in inst["str_tensor_bytes"]]
        out.append(o)
    check_ok(pred(idsrv, "multi5", {"instances": FIVE}), {"predictions": out})
    cols = {k: [inst[k] for inst in FIVE] for k in FIVE[0]}                              # 71
    expected = dict(cols)
    expected["str_tensor_bytes"] = [[b64(s.encode()) for s in row]
                                    for row in cols["str_tensor_bytes"]]
    check_ok(pred(idsrv, "multi5", {"inputs": cols}), {"outputs": expected})


def test_j_predict_errors(idsrv):
    body = {"signature_name": 5, "instances": [[1, 2]]}                                # 54
    check_error(pred(idsrv, "i32_r2", body), 400,
                "JSON Value: " + rj_pretty(body) +
                " not formatted correctly. 'signature_name' key must be a string value.")
    body = {"instances": [[1, 2]], "inputs": [[1, 2]]}                                  # 55
    check_error(pred(idsrv, "i32_r2", body), 400,
                "JSON Value: " + rj_pretty(body) + " Not formatted correctly expecting only "
                "one of 'inputs' or 'instances' keys to exist ")
    check_error(pred(idsrv, "i32_r2", {"instances": [[1, 2], [3, 4], [5, 6, 7]]}), 400,  # 56
                wrapped(2, "Expecting tensor size: 2 but got: 3"))
    check_error(pred(idsrv, "i32_r2", {"instances": [[1, 2], [3, 4], [[5, 6]]]}), 400,   # 57
                wrapped(2, "Expecting shape [2] but got: [1,2]"))
    check_error(pred(idsrv, "i32_r1", {"instances": [1, [1]]}), 400,                     # 58
                wrapped(1, "Expecting shape [] but got: [1]"))
    check_error(pred(idsrv, "i32_r2", {"instances": [[1, 2], ["a", "b"]]}), 400,         # 59
                wrapped(1, 'JSON Value: "a" Type: String is not of expected type: int32'))


def test_j_objects_errors(idsrv):
    a = {"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]}
    b = {"int_tensor": [[[7, 8], [9, 0], [1, 2]]], "str_tensor": ["baz", "bat"]}
    check_error(pred(idsrv, "two_in", {"instances": [a, b]}), 400,                      # 60
                wrapped_key(1, "int_tensor", "Expecting shape [3,2] but got: [1,3,2]"))
    a4 = {"int_tensor": [[1, 2], [3, 4], [5, 6], [7, 8]], "str_tensor": ["foo", "bar"]}
    check_error(pred(idsrv, "two_in", {"instances": [a4, a]}), 400,                     # 61
                wrapped_key(1, "int_tensor", "Expecting tensor size: 8 but got: 6"))
    check_error(pred(idsrv, "two_in", {"instances": [a, [1, 20, 30], a]}), 400,         # 62
                "Expecting object but got list at item 1 of input list")
    check_error(pred(idsrv, "str_r1",                                                  # 63
                     {"instances": [["baz", "bar"], {"x": ["baz", "bat"]}]}), 400,
                "Expecting value/list but got object at item 1 of input list")
    check_error(pred(idsrv, "two_in", {"instances": [{"int_tensor": [1]}]}), 400,        # 96
                "Failed to process element: 0 of 'instances' list. JSON object: "
                '{\n    "int_tensor": [1]\n} keys must be equal to: int_tensor,str_tensor')
    check_error(pred(idsrv, "two_in", {"instances": [[1, 2]]}), 400,                    # 97
                "instances is a plain list, but expecting list of objects as multiple input "
                "tensors required as per tensorinfo_map")
    check_error(pred(idsrv, "two_in", {"inputs": [1]}), 400,
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map")
    check_error(pred(idsrv, "two_in", {"inputs": {"int_tensor": [1]}}), 400,
                "Missing named input: str_tensor in 'inputs' object.")
    r = pred(idsrv, "two_in",                                                           # 98
             {"inputs": {"int_tensor": [1], "str_tensor": ["a", "b"], "ignored": 5}})
    check_ok(r, {"outputs": {"int_tensor": [1], "str_tensor": ["a", "b"]}})
    r = pred(idsrv, "two_in", {"instances": [{"int_tensor": 1, "str_tensor": "a"},
                                             {"str_tensor": "b", "int_tensor": 2}]})
    check_ok(r, {"predictions": [{"int_tensor": 1, "str_tensor": "a"},
                                 {"int_tensor": 2, "str_tensor": "b"}]})


def test_v_dtype_errors(idsrv):
    check_error(pred(idsrv, "i32_r1", {"instances": [1.0]}), 400,                       # 99
                wrapped(0, "JSON Value: 1.0 Type: Number is not of expected type: int32"))
    check_error(pred(idsrv, "i32_r1", {"instances": [3000000000]}), 400,
                wrapped(0, "JSON Value: 3000000000 Type: Number is not of expected type: int32"))
    check_error(pred(idsrv, "i32_r1", '{"instances": [1e2]}'), 400,
                wrapped(0, "JSON Value: 100.0 Type: Number is not of expected type: int32"))
    check_error(pred(idsrv, "i64_r1", '{"instances": [9223372036854775808]}'), 400,
                wrapped(0, "JSON Value: 9223372036854775808 Type: Number is not of expected "
                           "type: int64"))
    check_error(pred(idsrv, "bool_r1", {"instances": [1]}), 400,
                wrapped(0, "JSON Value: 1 Type: Number is not of expected type: bool"))
    check_error(pred(idsrv, "i32_r1", {"instances": [None]}), 400,
                wrapped(0, "JSON Value: null Type: Null is not of expected type: int32"))
    check_error(pred(idsrv, "f32_r1", {"inputs": ["a"]}), 400,
                'JSON Value: "a" Type: String is not of expected type: float')
    check_error(pred(idsrv, "str_r1", {"instances": [{"b64": "a-b"}]}), 400,            # 100
                wrapped(0, "Unable to base64 decode"))
    check_error(pred(idsrv, "str_r1", {"instances": [{"b64": "aGk=="}]}), 400,
                wrapped(0, "Unable to base64 decode"))
    obj = {"b64": "aGk=", "x": 1}
    check_error(pred(idsrv, "str_r2", {"instances": [[obj]]}), 400,
                wrapped(0, "JSON Value: " + rj_pretty(obj) + " not formatted correctly for base64 data"))
    check_error(pred(idsrv, "f16_r1", {"inputs": [1.0]}), 501,                          # 101
                "Conversion of JSON Value: 1.0 to type: half")
    check_error(pred(idsrv, "f16_r1", {"instances": [1.0]}), 400,
                wrapped(0, "Conversion of JSON Value: 1.0 to type: half", code="UNIMPLEMENTED"))


def test_v_wide_ints_and_bools_out(idsrv):
    # int64 is a bare JSON number, not a string (§4)
    check_bytes(pred(idsrv, "i64_r1", '{"instances": [9223372036854775807, -9223372036854775808]}'),
                '{\n    "predictions": [9223372036854775807, -9223372036854775808\n    ]\n}')
    check_ok(pred(idsrv, "bool_r1", {"instances": [True, False]}), {"predictions": [True, False]})


# ---- CORS (§1.1.6) ---------------------------------------------------------------


CORS = {"access-control-allow-origin": "*",
        "access-control-allow-methods": "POST, GET",
        "access-control-allow-headers": "Content-Type"}


def _cors_headers(r):
    return {k: v for k, v in r.headers.items() if k.startswith("access-control-")}


def _preflight(s, origin=None):
    h = {"Access-Control-Request-Method": "POST"}
    if origin is not None:
        h["Origin"] = origin
    return raw(s, "OPTIONS", f"/v1/models/{A}:predict", headers=h)


def test_options_preflight(srv):
    for origin in ("http://example.com", "https://example.com:8443", "xhttp://a"):
        r = _preflight(srv, origin)
        assert r.status == 200, (origin, r)
        assert r.body == b"", r
    for origin in (None, "ftp://example.com", "example.com", ""):
        r = _preflight(srv, origin)                                                      # 108
        assert r.status == 400, (origin, r)
        assert r.body == b"", r
    # without the flag no reply carries CORS headers
    assert _cors_headers(get(srv, f"/v1/models/{A}")) == {}
    r = post(srv, f"/v1/models/{A}:predict", {"instances": [1.0]},
             headers={"Origin": "http://example.com"})
    assert r.status == 200 and _cors_headers(r) == {}, r


def test_cors_headers_with_flag(start_server, example_repo_copy):
    s = start_server(example_repo_copy,
                     ["--model-control-mode=none", "--rest-api-enable-cors-support"])
    for r in (get(s, f"/v1/models/{A}"),
              get(s, f"/v1/models/{A}/metadata"),
              post(s, f"/v1/models/{A}:predict", {"instances": [1.0]}),
              post(s, f"/v1/models/{A}:regress",
                   {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}]}),
              post(s, "/v1/models/foo:predict", {"instances": [1.0]}),
              get(s, "/v1/foo")):
        check_json_ct(r)
        assert _cors_headers(r) == CORS, r
    check_ok(post(s, f"/v1/models/{A}:predict", {"instances": [1.0]}), {"predictions": [2.5]})
    r = _preflight(s, "http://example.com")
    assert r.status == 200 and r.body == b"", r
    r = _preflight(s)
    assert r.status == 400 and r.body == b"", r


# ---- gzip bodies (§1.1.5) -------------------------------------------------------------


def test_gzip_request_body(srv):
    body = gzip.compress(json.dumps({"instances": [1.0, 2.0]}).encode())
    r = post(srv, f"/v1/models/{A}:predict", body, headers={"Content-Encoding": "gzip"})
    check_bytes(r, '{\n    "predictions": [2.5, 3.0\n    ]\n}')
    body = gzip.compress(json.dumps({"signature_name": "regress_x_to_y",
                                     "examples": [{"x": 80.0}]}).encode())
    r = post(srv, f"/v1/models/{A}:regress", body, headers={"Content-Encoding": "gzip"})
    check_ok(r, {"results": [42.0]})
    # a body that does not gunzip becomes empty
    r = post(srv, f"/v1/models/{A}:predict", b'{"instances": [1.0]}',
             headers={"Content-Encoding": "gzip"})
    check_error(r, 400, "JSON Parse error: The document is empty")


# ---- bad input never hurts the server ----------------------------------------------


def test_malformed_bodies_then_normal_predict(srv):
    p = f"/v1/models/{A}:predict"
    deep = b'{"ignored": ' + b"[" * 500000 + b"]" * 500000 + b"}"
    check_error(post(srv, p, deep), 400, "Missing 'inputs' or 'instances' key")
    deep_cls = (b'{"ignored": ' + b"[" * 500000 + b"]" * 500000
                + b', "signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}')
    check_ok(post(srv, f"/v1/models/{A}:regress", deep_cls), {"results": [42.0]})
    bad = [
        b'{"ignored": ' + b"[" * 500000,                 # never closed
        b"[" * 200000,
        b'{"instances": [' + b"{" * 1000,
        b'{"instances": [1.0, 2',                        # truncated
        b'{"instances": [1.0, 2.0]',
        b'{"instances": "',
        b'{"instances": [1' + b"0" * 400 + b"]}",         # huge numbers
        b'{"instances": [1e99999999999]}',
        b'{"instances": [-1e400]}',
        b"\x00\xff\xfe\x80garbage\x01\x02",              # binary garbage
        bytes(range(256)) * 16,
        b'{"instances": ["\xff\xfe\xc3"]}',              # invalid UTF-8 (not validated)
        b'{"instances": ["\\ud800"]}',                   # lone surrogate
        b'{"instances": [' + b"1," * 100000 + b"]}",
        b'{"instances": [' + b'{"x": ' * 5000 + b"1" + b"}" * 5000 + b"]}",
    ]
    for body in bad:
        r = post(srv, p, body)
        assert r.status == 400, (body[:60], r)
        check_json_ct(r)
        # the message may quote invalid UTF-8 from the body: not parsed here
        assert r.body.startswith(b'{\n    "error": "') and r.body.endswith(b'"\n}'), r
    for body in bad[:4]:
        msg = error_text(post(srv, f"/v1/models/{A}:classify", body), 400)
        assert msg.startswith("JSON Parse error: "), msg
    # odd but valid: a 5000-digit fraction is 0 as a float
    check_ok(post(srv, p, b'{"instances": [0.' + b"0" * 5000 + b"1]}"), {"predictions": [2.0]})
    # rank 10000: any well-formed reply, as long as the server survives
    r = post(srv, p, b'{"inputs": {"x": ' + b"[" * 10000 + b"1" + b"]" * 10000 + b"}}")
    check_json_ct(r)
    assert r.status in (200, 400, 413, 500, 501), r
    assert r.body.startswith(b"{\n") and r.body.endswith(b"}"), r.body[:200]
    check_ok(post(srv, p, {"instances": [1.0, 2.0]}), {"predictions": [2.5, 3.0]})
    assert live(srv)


def test_concurrent_clients(srv):
    import concurrent.futures as cf

    def one(i):
        r = post(srv, f"/v1/models/{A}:predict", {"instances": [float(i)]})
        assert r.status == 200, r
        return r.json()["predictions"][0]

    with cf.ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(64)))
    assert got == [0.5 * i + 2 for i in range(64)]


# ---- the core is shared: statistics ------------------------------------------------


def _inference_count(s, model):
    r = requests.get(f"{s.url}/v2/models/{model}/stats", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["model_stats"][0]["inference_count"]


def test_tfserving_requests_in_model_statistics(srv):
    before = _inference_count(srv, A)
    check_ok(post(srv, f"/v1/models/{A}:predict", {"instances": [1.0, 2.0, 3.0]}),
             {"predictions": [2.5, 3.0, 3.5]})
    mid = _inference_count(srv, A)
    assert mid > before, (before, mid)
    check_ok(post(srv, f"/v1/models/{A}:regress",
                  {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}),
             {"results": [3.0]})
    assert _inference_count(srv, A) > mid
    # an error before the core counts nothing
    after = _inference_count(srv, A)
    post(srv, f"/v1/models/{A}:predict", {"instances": []})
    assert _inference_count(srv, A) == after


def test_kserve_surface_unaffected(srv):
    r = requests.get(srv.url + f"/v2/models/{A}", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == A
    assert "123" in r.json()["versions"]


# ---- the curl commands of g3doc/api_rest.md -----------------------------------------


def _curl(*args):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: the api_rest.md commands need the curl binary")
    p = subprocess.run(["curl", "-sS", *args], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_api_rest_md_curl_commands(srv):
    base = f"http://localhost:{srv.port}/v1/models/{H3}"
    assert _curl(base) == STATUS_123
    meta = _curl(base + "/metadata")
    assert meta["model_spec"] == {"name": H3, "signature_name": "", "version": "123"}
    sigs = meta["metadata"]["signature_def"]["signature_def"]
    assert sigs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert sigs["tensorflow/serving/regress"]["method_name"] == "tensorflow/serving/regress"
    assert _curl("-d", '{"instances": [1.0,2.0,5.0]}', "-X", "POST", base + ":predict") == \
        {"predictions": [3.5, 4.0, 5.5]}
    assert _curl("-d", '{"signature_name": "tensorflow/serving/regress", '
                       '"examples": [{"x": 1.0}, {"x": 2.0}]}',
                 "-X", "POST", base + ":regress") == {"results": [3.5, 4.0]}
    # curl -d sends application/x-www-form-urlencoded: the type is never checked
    assert _curl("-d", '{"inputs": [1.0]}', base + ":predict") == {"outputs": [3.5]}


def test_status_after_unload_is_end_with_ok(start_server, tmp_path):
    """An unloaded version is END with an OK status, as in TF Serving; only a
    version that failed to load carries an error."""
    repo = tmp_path / "models"
    shutil.copytree(harness.EXAMPLE_MODELS, repo)
    s = start_server(repo, ["--model-control-mode=explicit", "--load-model=half_plus_two"])
    r = requests.post(s.url + "/v2/repository/models/half_plus_two/unload", timeout=30)
    assert r.status_code == 200, r.text
    r = get(s, "/v1/models/half_plus_two")
    assert r.status == 200, r
    assert json.loads(r.body) == {"model_version_status": [{
        "version": "123", "state": "END",
        "status": {"error_code": "OK", "error_message": ""}}]}


def test_bare_v1_gets_tf_servings_html_404(srv):
    """Outside /v1/ TF Serving's server answers libevent's HTML page; on the
    shared port that is /v1 itself (/v2 belongs to KServe)."""
    for path in ("/v1", "/V1"):
        r = get(srv, path)
        assert r.status == 404, r
        assert r.body == (b"<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n"
                          b"<H1>Not Found</H1>\n</BODY></HTML>\n")
