"""pb_utils.InferenceRequest's `parameters` and `timeout` in BLS calls, as
Triton passes them: the parameters (a dict of str, int and bool values,
or here the text of such a JSON object) reach the called model as its
request's parameters, on the region path (exec) and the inline one
(exec(decoupled=True)); anything else is refused with Triton's messages
when the request is built. The timeout (microseconds) is the called
request's timeout in its model's queue: py_queued holds a request for 3 s
and times it out after 2, or after the request's own shorter timeout."""

import json
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from test_python_backend import http_input, served_python_models

SERVED = ["py_bls_options", "py_params", "py_queued"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_python_models(tmp_path_factory, "bls-opts", SERVED)


def call(srv, mode):
    result = httpclient.InferenceServerClient(srv.hostport).infer(
        "py_bls_options", [http_input("MODE", np.array([mode], np.int32), "INT32")])
    return result.as_numpy("OUT")[0].decode()


def test_parameters_reach_the_called_model(srv):
    assert json.loads(call(srv, 0)) == {"b": True, "i": -7, "s": "text"}


def test_parameters_as_json_text_reach_it_through_the_inline_path(srv):
    assert json.loads(call(srv, 1)) == {"k": "v", "n": 3}


def test_bad_parameters_and_timeouts_are_refused_with_tritons_words(srv):
    assert call(srv, 2).split(" | ") == [
        "Expect parameters keys to have type str, found type <class 'int'>",
        "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        "Expect parameters values to have type bool/int/str, found type <class 'list'>",
        "parameters given as a string must be a JSON object: Expecting value: "
        "line 1 column 1 (char 0)",
        "parameters given as a string must be a JSON object, found <class 'list'>",
        "Expect parameters to be a dict, found type <class 'int'>",
        "parameter 'big': 18446744073709551616 does not fit a 64-bit integer",
        "timeout must be a non-negative integer of microseconds, got -1",
        "timeout must be a non-negative integer of microseconds, got 1.5",
        "timeout must be a non-negative integer of microseconds, got '7'",
    ]


@pytest.mark.parametrize("mode", [3, 4], ids=["exec", "exec_decoupled"])
def test_the_timeout_applies_in_the_called_models_queue(srv, mode):
    start = time.monotonic()
    out = call(srv, mode)
    elapsed = time.monotonic() - start
    assert out == "error: Request timeout expired"
    assert elapsed < 1.5  # its own 0.1 s, not the queue's 2 s default
