"""The queue scenario list (PAI-EAS reference §6, steps 1-33) through the
real eas-prediction SDK from PyPI, on both stores. The SDK runs in a child
interpreter (queue_sdk_scenario.py) with the protobuf it pins; see
queue_util.sdk_python_env()."""

import subprocess
import sys

import harness
import queue_util as qu


def test_sdk_scenario_steps_1_to_33(start_server, tmp_path, queue_store, request):
    qu.require_sdk()
    redis = request.getfixturevalue("redis_server") if queue_store == "redis" else None
    server = start_server(qu.empty_repo(tmp_path),
                          ["--queue-service=svc"] + qu.queue_args(queue_store, redis))
    script = harness.ROOT / "tests" / "integration" / "queue_sdk_scenario.py"
    env = qu.sdk_python_env()
    env["OSPREY_TIMEOUT_SCALE"] = str(harness.timeout_scale())
    run = subprocess.run(
        [sys.executable, str(script), server.hostport, qu.TOKEN,
         str(qu.MAX_PAYLOAD), str(qu.MAX_LENGTH)],
        env=env, capture_output=True, text=True,
        timeout=180 * harness.timeout_scale())
    assert run.returncode == 0 and "all steps ok" in run.stdout, (
        run.stdout[-3000:] + "\n--- stderr ---\n" + run.stderr[-6000:])
