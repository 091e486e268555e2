"""A gRPC ModelInfer call cancelled while its request waits in the server's
queue, as Triton cancels one (its infer handler watches the call's close
and cancels the core request): the request is answered CANCELLED without
running, the failure is counted with reason CANCELED, and the batch it
would have joined forms without it. A call cancelled while a python model
runs it turns the request's is_cancelled() true, as Triton's python
backend asks the server.

The queued request waits in a dynamic batcher that wants two requests
(preferred batch size 2, a 10-minute delay), so nothing depends on timing:
without the cancellation the cancelled request and the next one would form
the batch and the third would wait ten minutes."""

import sys
import textwrap

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness

MODEL = "pair_batcher"
PAIR_BATCHING = (
    "dynamic_batching {\n"
    "  preferred_batch_size: [ 2 ]\n"
    "  max_queue_delay_microseconds: 600000000\n"
    "}\n")


# Answers at once unless INPUT0 is 1: then polls is_cancelled() until the
# client has gone (a deadline keeps a broken run from hanging).
WAITS_FOR_CANCEL = textwrap.dedent("""
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                seen = request.is_cancelled()
                if x[0] == 1:
                    pb_utils.Logger.log_info("waiting for the client to cancel")
                    deadline = time.monotonic() + 60
                    while not seen and time.monotonic() < deadline:
                        time.sleep(0.005)
                        seen = request.is_cancelled()
                    pb_utils.Logger.log_info("is_cancelled() saw it: %s" % seen)
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", np.array([float(seen)], np.float32))]))
            return responses
    """)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("unary_cancel_repo")
    harness.write_model(repo, MODEL, harness.identity_config(
        MODEL, "TYPE_FP32", [1], max_batch_size=2, extra=PAIR_BATCHING))
    harness.write_model(repo, "py_waits_for_cancel", harness.model_config(
        "py_waits_for_cancel", "python", [("INPUT0", "TYPE_FP32", [1])],
        [("OUTPUT0", "TYPE_FP32", [1])], max_batch_size=0),
        files={"model.py": WAITS_FOR_CANCEL.encode()})
    server = harness.OspreyServer(repo, ["--model-control-mode=none",
                                         "--backend-config=python,python-executable="
                                         + sys.executable],
                                  workdir=tmp_path_factory.mktemp("unary_cancel_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


def canceled_failures(server):
    text = requests.get(server.metrics_url + "/metrics", timeout=10).text
    want = (f'nv_inference_request_failure{{model="{MODEL}",reason="CANCELED",'
            'version="1"} ')
    for line in text.splitlines():
        if line.startswith(want):
            return int(float(line[len(want):]))
    return 0


def value_input(module, value):
    inp = module.InferInput("INPUT0", [1, 1], "FP32")
    inp.set_data_from_numpy(np.full((1, 1), value, np.float32))
    return inp


def test_cancelled_unary_call_leaves_the_queue(srv):
    harness.log_verbose(srv, 1)
    since = len(srv.log())
    with grpcclient.InferenceServerClient(srv.grpc_url) as client:
        answers = []
        call = client.async_infer(MODEL, [value_input(grpcclient, 1.0)],
                                  callback=lambda result, error: answers.append(error))
        harness.wait_pending(srv, MODEL, 1)
        call.cancel()
        harness.wait_for(lambda: "gRPC ModelInfer: the call is cancelled" in srv.log()[since:],
                         "the server to see the call cancelled")
        harness.wait_for(lambda: answers, "the cancelled call's callback")
        assert answers[0] is not None  # the client's own "cancelled" error

    # The next two requests make the batch of two: the cancelled one is
    # answered CANCELLED as the batcher takes them, and never ran.
    http = httpclient.InferenceServerClient(srv.hostport, concurrency=2)
    handles = [http.async_infer(MODEL, [value_input(httpclient, v)]) for v in (2.0, 3.0)]
    got = sorted(float(h.get_result(timeout=30 * harness.timeout_scale())
                       .as_numpy("OUTPUT0").reshape(-1)[0]) for h in handles)
    assert got == [2.0, 3.0]
    assert canceled_failures(srv) == 1
    stats = http.get_inference_statistics(MODEL)["model_stats"][0]
    assert int(stats["inference_count"]) == 2
    assert int(stats["execution_count"]) == 1
    http.close()


def test_a_python_model_sees_the_cancellation_while_it_runs(srv):
    since = len(srv.log())
    with grpcclient.InferenceServerClient(srv.grpc_url) as client:
        inp = grpcclient.InferInput("INPUT0", [1], "FP32")
        inp.set_data_from_numpy(np.ones(1, np.float32))
        call = client.async_infer("py_waits_for_cancel", [inp], callback=lambda result, error: None)
        harness.wait_for(lambda: "waiting for the client to cancel" in srv.log()[since:],
                         "execute to start waiting")
        call.cancel()
        harness.wait_for(lambda: "is_cancelled() saw it:" in srv.log()[since:],
                         "execute to end")
    assert "is_cancelled() saw it: True" in srv.log()[since:]
    # A request whose client stays is not cancelled.
    http = httpclient.InferenceServerClient(srv.hostport)
    inp = httpclient.InferInput("INPUT0", [1], "FP32")
    inp.set_data_from_numpy(np.zeros(1, np.float32))
    assert http.infer("py_waits_for_cancel", [inp]).as_numpy("OUTPUT0")[0] == 0.0
    http.close()
