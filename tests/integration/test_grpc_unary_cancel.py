"""A gRPC ModelInfer call cancelled while its request waits in the server's
queue, as Triton cancels one (its infer handler watches the call's close
and cancels the core request): the request is answered CANCELLED without
running, the failure is counted with reason CANCELED, and the batch it
would have joined forms without it.

The queued request waits in a dynamic batcher that wants two requests
(preferred batch size 2, a 10-minute delay), so nothing depends on timing:
without the cancellation the cancelled request and the next one would form
the batch and the third would wait ten minutes."""

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


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("unary_cancel_repo")
    harness.write_model(repo, MODEL, harness.identity_config(
        MODEL, "TYPE_FP32", [1], max_batch_size=2, extra=PAIR_BATCHING))
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
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
