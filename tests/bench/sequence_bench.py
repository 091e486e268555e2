#!/usr/bin/env python3
"""Sequence batcher benchmark (issue 22): the stateful accumulator model at
64 concurrent sequences, with the `oldest` strategy (max_batch_size 16,
preferred_batch_size 16) against the same model without batching
(max_batch_size 0, `direct`), on the CPU device.

Each model has execute_delay_us (default 2000) of cost per batch, however
many requests it holds: the accumulator's own arithmetic is nothing, so the
delay stands for a model whose cost is per execution (a kernel launch, a
weight read). Each of --sequences client threads (spread over --procs
processes, one tritonclient.http client each) runs one sequence after
another: START, steps, END, checking every running sum. Plain and batched
runs alternate --repeat times; the script prints a markdown table of
infer/s of each side (median run), their ratio (goal >= 3x), and the mean
batch size of the batched runs (inference_count / execution_count from
the statistics endpoint over the measured runs). Nothing is asserted on
times; the exit status is 1 when a request failed or a sum was wrong.
Needs the test venv (tritonclient).
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
import sequence_models  # noqa: E402

OLDEST = ("oldest {{ max_candidate_sequences: {n} preferred_batch_size: [ 16 ]\n"
          "    max_queue_delay_microseconds: {delay} }}")


def write_repo(root, args):
    delay = ('parameters [ { key: "execute_delay_us" value: { string_value: "%d" } } ]\n'
             % args.execute_delay_us)
    harness.write_model(root, "seq_plain", sequence_models.accumulator_config(
        "seq_plain", sequence_models.DIRECT, max_batch_size=0, corrid=None,
        idle_us=60000000, extra=delay))
    harness.write_model(root, "seq_batched", sequence_models.accumulator_config(
        "seq_batched", OLDEST.format(n=args.sequences, delay=args.queue_delay_us),
        max_batch_size=16, corrid=None, idle_us=60000000, extra=delay))


def client_proc(url, model, first_id, n_threads, duration, steps, out):
    import numpy as np
    import tritonclient.http as httpclient

    batching = model != "seq_plain"
    done, errors = [0] * n_threads, []
    started = time.monotonic()  # after the imports: only requests count
    stop_at = started + duration

    def run(t):
        c = httpclient.InferenceServerClient(url)
        seq_id = first_id + t * 1000000
        while time.monotonic() < stop_at:
            seq_id += 1
            total = 0
            for step in range(steps):
                v = step + 1
                total += v
                data = np.array([[v]] if batching else [v], dtype=np.int32)
                inp = httpclient.InferInput("INPUT", list(data.shape), "INT32")
                inp.set_data_from_numpy(data)
                try:
                    r = c.infer(model, [inp], sequence_id=seq_id,
                                sequence_start=step == 0, sequence_end=step == steps - 1,
                                outputs=[httpclient.InferRequestedOutput("OUTPUT")])
                except Exception as e:  # reported by the parent
                    errors.append(repr(e))
                    return
                if r.as_numpy("OUTPUT").reshape(-1)[0] != total:
                    errors.append(f"sequence {seq_id} step {step}: wrong sum")
                    return
                done[t] += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sum(done) / (time.monotonic() - started), errors))


def stats(client, model):
    s = client.get_inference_statistics(model)["model_stats"][0]
    return s["inference_count"], s["execution_count"]


def run_side(server, model, args, round_no):
    q = multiprocessing.Queue()
    per = args.sequences // args.procs
    procs = [multiprocessing.Process(
        target=client_proc,
        args=(server.hostport, model, (round_no * args.procs + p + 1) * 10**9, per,
              args.duration, args.steps, q)) for p in range(args.procs)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [e for r in results for e in r[1]]
    return sum(r[0] for r in results), errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--execute-delay-us", type=int, default=2000)
    ap.add_argument("--queue-delay-us", type=int, default=500)
    args = ap.parse_args()
    import tritonclient.http as httpclient

    with tempfile.TemporaryDirectory(prefix="seq_bench_") as tmp:
        repo = os.path.join(tmp, "models")
        os.makedirs(repo)
        write_repo(repo, args)
        server = harness.OspreyServer(repo, ["--model-control-mode=none"],
                                      workdir=os.path.join(tmp, "work")).start()
        try:
            c = httpclient.InferenceServerClient(server.hostport)
            rates = {"seq_plain": [], "seq_batched": []}
            inferences = executions = 0
            failed = []
            for r in range(args.repeat):
                for model in ("seq_plain", "seq_batched"):
                    before = stats(c, model)
                    rate, errors = run_side(server, model, args, r)
                    after = stats(c, model)
                    failed += errors
                    rates[model].append(rate)
                    if model == "seq_batched":
                        inferences += after[0] - before[0]
                        executions += after[1] - before[1]
                    print(f"round {r} {model}: {rate:.0f} infer/s", file=sys.stderr)
        finally:
            server.stop()
        plain = statistics.median(rates["seq_plain"])
        batched = statistics.median(rates["seq_batched"])
        print(f"| {args.sequences} sequences, {args.execute_delay_us} µs per batch | infer/s |")
        print("|---|---|")
        print(f"| no batching (max_batch_size 0, direct) | {plain:.0f} |")
        print(f"| oldest (max_batch_size 16, preferred 16, "
              f"max_queue_delay {args.queue_delay_us} µs) | {batched:.0f} |")
        print(f"| ratio oldest / none (goal >= 3) | {batched / plain:.2f} |")
        print(f"| mean batch size (oldest) | {inferences / max(executions, 1):.2f} |")
        if failed:
            print("errors:", failed[:5], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
