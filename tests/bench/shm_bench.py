#!/usr/bin/env python3
"""System shared memory against the binary HTTP path: identity_fp32 with one
16 MiB FP32 tensor ([1, 4194304]) at concurrency 1, in one server started
with --allow-client-shm=true, both sides driven by tritonclient.http from
this one process.

  binary  the input as binary_data_size bytes after the JSON header, the
          output as a binary part of the response (the python client's
          default); the client serializes the array and parses the reply.
  shm     the input written into a registered region
          (set_shared_memory_region) and the output read back out of
          another (get_contents_as_numpy, copied) on every request: only
          the JSON header and a JSON reply go over HTTP.

Both sides hand the client a fresh copy of the output, so they do the same
work for the caller. Runs alternate (binary, shm, binary, ...) --repeat
times; each run counts requests for --duration seconds after one warm-up
request. Prints infer/s and MB/s (input bytes, 10^6 B) of each side's
median run and the ratio shm / binary. Every output is checked against the
input once per run. Nothing is asserted on times; the exit status is 1 when
the server failed or a request got an error.

Needs the test venv (tritonclient[http], numpy).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ELEMENTS = 4 * 1024 * 1024  # 16 MiB of FP32
BYTES = ELEMENTS * 4


class BinarySide:
    def __init__(self, client, x):
        self.client = client
        self.x = x
        self.outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]

    def once(self):
        inp = httpclient.InferInput("INPUT0", [1, ELEMENTS], "FP32")
        inp.set_data_from_numpy(self.x, binary_data=True)
        result = self.client.infer("identity_fp32", [inp], outputs=self.outputs)
        return np.array(result.as_numpy("OUTPUT0"))


class ShmSide:
    def __init__(self, client, x):
        self.client = client
        self.x = x
        pid = os.getpid()
        self.in_handle = shm.create_shared_memory_region(
            "bench_in", "/osprey_bench_in_%d" % pid, BYTES)
        self.out_handle = shm.create_shared_memory_region(
            "bench_out", "/osprey_bench_out_%d" % pid, BYTES)
        client.register_system_shared_memory("bench_in", "/osprey_bench_in_%d" % pid, BYTES)
        client.register_system_shared_memory("bench_out", "/osprey_bench_out_%d" % pid, BYTES)
        self.inp = httpclient.InferInput("INPUT0", [1, ELEMENTS], "FP32")
        self.inp.set_shared_memory("bench_in", BYTES)
        self.out = httpclient.InferRequestedOutput("OUTPUT0")
        self.out.set_shared_memory("bench_out", BYTES)

    def once(self):
        shm.set_shared_memory_region(self.in_handle, [self.x])
        self.client.infer("identity_fp32", [self.inp], outputs=[self.out])
        return np.array(shm.get_contents_as_numpy(
            self.out_handle, np.float32, [1, ELEMENTS]))

    def close(self):
        try:
            self.client.unregister_system_shared_memory()
        finally:
            shm.destroy_shared_memory_region(self.in_handle)
            shm.destroy_shared_memory_region(self.out_handle)


def run(side, x, duration):
    """Requests per second over `duration` s, after one checked request."""
    got = side.once()
    if not np.array_equal(got, x):
        raise RuntimeError("%s: output differs from input" % type(side).__name__)
    n = 0
    start = time.monotonic()
    while True:
        side.once()
        n += 1
        elapsed = time.monotonic() - start
        if elapsed >= duration:
            return n / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--osprey", default=None, help="server binary")
    ap.add_argument("--model-repository", default=os.path.join(ROOT, "models"))
    ap.add_argument("--repeat", type=int, default=5, help="runs per side")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per run")
    args = ap.parse_args()

    osprey_bin = args.osprey or os.path.join(args.build_dir, "osprey")
    if not os.access(osprey_bin, os.X_OK):
        sys.exit("shm_bench: %s is missing; build first" % osprey_bin)
    log_dir = tempfile.mkdtemp(prefix="osprey-shm-bench-")
    argv = [osprey_bin, "--model-repository=" + args.model_repository,
            "--model-control-mode=none", "--http-port=0",
            "--http-address=127.0.0.1", "--allow-metrics=false",
            "--allow-client-shm=true"]
    x = np.random.default_rng(0).standard_normal((1, ELEMENTS)).astype(np.float32)
    server = http_bench.Server("osprey", argv, log_dir)
    status = 0
    shm_side = None
    try:
        server.wait_started(60)
        http_bench.wait_ready(server.address, ["/v2/health/ready",
                                               "/v2/models/identity_fp32/ready"], 60)
        client = httpclient.InferenceServerClient(server.address,
                                                  network_timeout=120,
                                                  connection_timeout=120)
        binary_side = BinarySide(client, x)
        shm_side = ShmSide(client, x)
        rates = {"binary": [], "shm": []}
        for i in range(args.repeat):
            rates["binary"].append(run(binary_side, x, args.duration))
            rates["shm"].append(run(shm_side, x, args.duration))
            print("run %d: binary %.1f infer/s, shm %.1f infer/s" %
                  (i + 1, rates["binary"][-1], rates["shm"][-1]), file=sys.stderr)
        b = statistics.median(rates["binary"])
        s = statistics.median(rates["shm"])
        mb = BYTES / 1e6
        print("identity_fp32, one [1,%d] FP32 tensor (16 MiB), concurrency 1, "
              "median of %d runs of %.1f s\n" % (ELEMENTS, args.repeat, args.duration))
        print("| path | infer/s | MB/s |")
        print("|---|---|---|")
        print("| binary HTTP | %.1f | %.0f |" % (b, b * mb))
        print("| system shared memory | %.1f | %.0f |" % (s, s * mb))
        print("\nratio shm / binary: %.2fx" % (s / b))
    except Exception as e:  # the server's failure or a request error
        print("shm_bench: %s\n%s" % (e, server.log_tail()), file=sys.stderr)
        status = 1
    finally:
        if shm_side is not None:
            try:
                shm_side.close()
            except Exception as e:
                print("shm_bench: cleanup: %s" % e, file=sys.stderr)
                status = 1
        rc = server.stop()
        if rc != 0:
            print("shm_bench: server exit status %s (log in %s)" % (rc, log_dir),
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
