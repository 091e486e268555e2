"""Cancelled requests of a sequence, as Triton 2.51's sequence batcher
treats them (core sequence_batch_scheduler.cc): a cancelled request that
is next to run ends its sequence early (it and every request queued
behind it are answered CANCELLED without running, the batch slot frees at
once and the id is forgotten), and a sequence waiting for a batch slot
with a cancelled request among its queued ones is cancelled the same way
when a slot frees. The clients cancel by closing a gRPC stream
(tritonclient's stop_stream(cancel_requests=True)).

Every model here has a 10-minute max_sequence_idle_microseconds: without
early release the freed slots would stay held past the tests' deadlines.
The requests to be cancelled are made to wait (a batch that waits for a
second ready sequence, or a slot held by another sequence), so nothing
depends on timing."""

import queue

import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import harness
import sequence_models

IDLE_US = 600000000


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cancel_repo")
    # direct: a batch waits (10 min) until 2 of its 4 slots have a request
    harness.write_model(repo, "cancel_direct", sequence_models.accumulator_config(
        "cancel_direct", "direct { max_queue_delay_microseconds: 600000000\n"
        "    minimum_slot_utilization: 0.5 }", max_batch_size=4, idle_us=IDLE_US))
    # oldest: a batch waits (10 min) for its preferred size of 2
    harness.write_model(repo, "cancel_oldest", sequence_models.accumulator_config(
        "cancel_oldest", "oldest { max_candidate_sequences: 4\n"
        "    preferred_batch_size: [ 2 ]\n"
        "    max_queue_delay_microseconds: 600000000 }", max_batch_size=4,
        idle_us=IDLE_US))
    # one batch slot: later sequences wait for it
    harness.write_model(repo, "cancel_one", sequence_models.accumulator_config(
        "cancel_one", sequence_models.DIRECT, max_batch_size=1, idle_us=IDLE_US))
    server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                  workdir=tmp_path_factory.mktemp("cancel_work")).start()
    yield server
    server.stop()
    problems = server.clean_exit_problems()
    assert not problems, "; ".join(problems) + "\n" + server.log_tail()


CANCEL_SEEN = "gRPC ModelStreamInfer: the stream's requests are cancelled"


def grpc_inputs(value):
    return [sequence_models.accumulator_input(grpcclient, value)]


def http_inputs(value):
    return [sequence_models.accumulator_input(httpclient, value)]


def async_step(client, model, seq, value, start=False, end=False):
    return client.async_infer(model, http_inputs(value), sequence_id=seq,
                              sequence_start=start, sequence_end=end)


def output(handle):
    return int(handle.get_result(timeout=30 * harness.timeout_scale())
               .as_numpy("OUTPUT").reshape(-1)[0])


def failures(server, model, reason):
    """nv_inference_request_failure of `model` for `reason`."""
    text = requests.get(server.metrics_url + "/metrics", timeout=10).text
    want = (f'nv_inference_request_failure{{model="{model}",reason="{reason}",'
            f'version="1"}} ')
    for line in text.splitlines():
        if line.startswith(want):
            return int(float(line[len(want):]))
    return 0


def inference_count(client, model):
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_count"])


def send_and_cancel(server, model, seq, n_steps, pending_after):
    """Sends a START and n_steps-1 more requests of sequence `seq` on a gRPC
    stream, waits until the server holds `pending_after` requests of the
    model, then cancels the stream and waits until the server has seen the
    cancellation (its verbose log line), so that what the test sends next
    finds the requests cancelled."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    for i in range(n_steps):
        client.async_stream_infer(model, grpc_inputs(1), sequence_id=seq,
                                  sequence_start=i == 0)
    harness.wait_pending(server, model, pending_after)
    harness.log_verbose(server, 1)
    since = len(server.log())
    client.stop_stream(cancel_requests=True)
    client.close()
    harness.wait_for(lambda: CANCEL_SEEN in server.log()[since:],
                     "the server to see the stream cancelled")
    return answers


def needs_start(client, model, seq):
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, http_inputs(1), sequence_id=seq)
    assert e.value.message() == (
        f"inference request for sequence {seq} to model '{model}' must specify "
        "the START flag on the first request of the sequence")


@pytest.mark.parametrize("model", ["cancel_direct", "cancel_oldest"])
def test_cancelled_next_request_ends_its_sequence(srv, model):
    """Sequence 1's START waits in its instance's batch (a second sequence
    is needed), its two later requests behind it. The stream is cancelled;
    when the batcher next looks (sequence 2's START arrives) the START is
    dropped and the sequence ends: `direct` because its slot's request is
    cancelled, `oldest` because the next request of the sequence is. The
    three are answered CANCELLED and never run, the slot is free, and
    sequence 1 is forgotten."""
    c = httpclient.InferenceServerClient(srv.hostport, concurrency=4)
    before = failures(srv, model, "CANCELED")
    send_and_cancel(srv, model, 1, 3, pending_after=3)
    b = async_step(c, model, 2, 20, start=True)
    harness.wait_for(lambda: failures(srv, model, "CANCELED") == before + 3,
                     "three CANCELED failures")
    d = async_step(c, model, 3, 30, start=True)  # fills the batch with 2's
    assert (output(b), output(d)) == (20, 30)
    assert harness.pending_requests(srv, model) == 0
    assert inference_count(c, model) == 2  # sequence 1 never ran
    needs_start(c, model, 1)
    # its slot serves a new sequence 1 (the 4 slots: 1, 2, 3 and one more)
    e = async_step(c, model, 1, 5, start=True)
    f = async_step(c, model, 4, 6, start=True)
    assert (output(e), output(f)) == (5, 6)
    c.close()


def test_cancelled_sequence_waiting_for_a_slot_gives_it_up(srv):
    """Sequence 11 holds the only slot; sequence 12 (two requests, on a
    stream) and then 13 wait for it. 12's stream is cancelled. When 11
    ends, 12 is cancelled instead of taking the slot (both its requests
    CANCELLED, unrun), and 13 gets the slot."""
    model = "cancel_one"
    c = httpclient.InferenceServerClient(srv.hostport, concurrency=4)
    assert output(async_step(c, model, 11, 1, start=True)) == 1
    before = failures(srv, model, "CANCELED")
    send_and_cancel(srv, model, 12, 2, pending_after=2)
    waiting = async_step(c, model, 13, 7, start=True)
    harness.wait_pending(srv, model, 3)
    assert output(async_step(c, model, 11, 1, end=True)) == 2
    assert output(waiting) == 7
    assert failures(srv, model, "CANCELED") == before + 2
    needs_start(c, model, 12)
    assert output(async_step(c, model, 13, 1, end=True)) == 8
    assert harness.pending_requests(srv, model) == 0
    c.close()
