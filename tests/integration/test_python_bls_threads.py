"""BLS from a decoupled python model's own threads, after execute returned,
as Triton allows between initialize and finalize: py_bls_threads starts a
thread per request that calls other models (exec, async_exec gathered,
exec(decoupled=True) iterated, and cancelled) and streams each result
through its response sender over gRPC. Two streams at once share the instance's stub;
a stub that dies while a BLS call is in the core fails its request with
Triton's message and a fresh stub serves on.
"""

import threading

import numpy as np
import pytest

from test_decoupled import Stream, final_flag, grpc_input
from test_python_backend import served_python_models, wait_for

SERVED = ["py_bls_threads", "py_add_sub", "py_square", "py_slow", "py_stream_gate"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_python_models(tmp_path_factory, "bls-threads", SERVED)


def inputs(mode, count, x, gate=""):
    return [grpc_input("MODE", np.array([mode], np.int32), "INT32"),
            grpc_input("COUNT", np.array([count], np.int32), "INT32"),
            grpc_input("X", np.asarray(x, np.float32), "FP32"),
            grpc_input("GATE", np.array([gate.encode()], np.object_), "BYTES")]


def collect(stream):
    """The (INDEX, OUT) of each response of one request, up to its final
    flag (an empty final response ends it too)."""
    got = []
    while True:
        result, error = stream.next()
        assert error is None, error
        if result.as_numpy("OUT") is not None:
            got.append((int(result.as_numpy("INDEX")[0]), result.as_numpy("OUT")))
        if final_flag(result):
            return got


def run(srv, mode, count, x):
    stream = Stream(srv)
    try:
        stream.send("py_bls_threads", inputs(mode, count, x),
                    enable_empty_final_response=True)
        return collect(stream)
    finally:
        stream.close()


def test_a_thread_calls_exec_after_execute_returned_and_streams_each_result(srv):
    x = np.array([1, 2, 3, 4], np.float32)
    got = run(srv, 0, 5, x)
    assert [i for i, _ in got] == list(range(5))
    for i, out in got:
        np.testing.assert_array_equal(out, x + i)


def test_async_exec_calls_gathered_in_a_thread_all_come_back(srv):
    x = np.array([5, 6, 7, 8], np.float32)
    got = run(srv, 1, 8, x)
    assert [i for i, _ in got] == list(range(8))
    for i, out in got:
        np.testing.assert_array_equal(out, x + i)


def test_a_thread_iterates_exec_decoupled_as_responses_come(srv):
    x = np.array([1, -1, 2, 0], np.float32)
    got = run(srv, 2, 3, x)
    assert [i for i, _ in got] == [0, 1, 2]
    for _, out in got:
        np.testing.assert_array_equal(out, x * 3)
    assert run(srv, 2, 0, x) == []  # py_square sends the final flag alone


def test_two_streams_at_once_each_get_their_own_results(srv):
    streams = [Stream(srv) for _ in range(2)]
    xs = [np.full(4, 100, np.float32), np.full(4, -100, np.float32)]
    results = [None, None]
    try:
        for stream, x in zip(streams, xs):
            stream.send("py_bls_threads", inputs(0, 30, x),
                        enable_empty_final_response=True)

        def read(k):
            results[k] = collect(streams[k])
        readers = [threading.Thread(target=read, args=(k,)) for k in range(2)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        for stream in streams:
            stream.close()
    for got, x in zip(results, xs):
        assert [i for i, _ in got] == list(range(30))
        for i, out in got:
            np.testing.assert_array_equal(out, x + i)


def test_a_thread_cancels_exec_decoupled_and_the_called_model_sees_it(srv, tmp_path):
    gate = tmp_path / "stream"
    stream = Stream(srv)
    try:
        stream.send("py_bls_threads", inputs(7, 2, np.zeros(4), str(gate)),
                    enable_empty_final_response=True)
        got = collect(stream)
    finally:
        stream.close()
    assert len(got) == 1 and got[0][0] >= 1  # the final response at least
    wait_for(tmp_path.joinpath("stream.cancelled").exists,
             "py_stream_gate to see is_cancelled()")


def test_exec_from_execute_itself_still_works(srv):
    x = np.array([0, 1, 2, 3], np.float32)
    got = run(srv, 6, 10, x)
    assert len(got) == 1
    np.testing.assert_array_equal(got[0][1], x + 10)


def test_errors_of_bls_calls_and_of_initialize_reach_the_client(srv):
    for mode, text in ((4, "no_such_model"),
                       (5, "BLS is only supported during the 'execute' function.")):
        stream = Stream(srv)
        try:
            stream.send("py_bls_threads", inputs(mode, 0, np.zeros(4)))
            _, error = stream.next()
            assert error is not None and text in str(error)
        finally:
            stream.close()


def test_a_stub_that_dies_mid_bls_fails_its_request_and_a_fresh_stub_serves(srv, tmp_path):
    gate = str(tmp_path / "gate")
    stream = Stream(srv)
    try:
        stream.send("py_bls_threads", inputs(3, 0, np.zeros(4), gate))
        _, error = stream.next()
        assert error is not None
        assert "Stub process 'py_bls_threads_0_0' is not healthy." in str(error)
    finally:
        stream.close()
    # The fresh stub's call ids start again; the dead stub's call, still in
    # py_slow, ends now and its answer must not reach the new stub.
    x = np.array([9, 8, 7, 6], np.float32)
    first = Stream(srv)
    try:
        first.send("py_bls_threads", inputs(0, 20, x), enable_empty_final_response=True)
        open(gate, "w").close()
        got = collect(first)
    finally:
        first.close()
    assert [i for i, _ in got] == list(range(20))
    for i, out in got:
        np.testing.assert_array_equal(out, x + i)
