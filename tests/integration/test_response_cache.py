"""The response cache: --cache-config=local,size=BYTES and
`response_cache { enable: true }` as Triton's docs write them, driven by
tritonclient over HTTP and gRPC: hit and miss counters in statistics and
in the nv_cache_* metrics, byte-identical outputs on a hit without running
the model, least-recently-used eviction, the models Triton refuses, and a
0-byte cache refused at start."""

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness

CACHE_ON = "response_cache {\n  enable: true\n}\n"


def cached(config):
    return config + CACHE_ON


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "simple", cached(harness.add_sub_config("simple")))
    harness.write_model(repo, "simple_nocache", harness.add_sub_config("simple_nocache"))
    harness.write_model(repo, "echo", cached(harness.identity_config("echo", "TYPE_FP32", [-1])))
    return repo


def simple_inputs(mod, a, b):
    i0 = mod.InferInput("INPUT0", [1, 16], "INT32")
    i1 = mod.InferInput("INPUT1", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(b)
    return [i0, i1]


def stats(srv, name):
    r = requests.get(f"{srv.url}/v2/models/{name}/stats", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["model_stats"][0]


def counts(srv, name):
    s = stats(srv, name)
    i = s["inference_stats"]
    return (i["cache_hit"]["count"], i["cache_miss"]["count"], i["success"]["count"],
            s["execution_count"])


def raw_infer(srv, model, body):
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", json=body, timeout=10)
    assert r.status_code == 200, r.text
    return r.content


def test_a_repeated_request_is_answered_from_the_cache(start_server, repo):
    srv = start_server(repo, ["--cache-config=local,size=1048576"])
    body = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16}]}
    first = raw_infer(srv, "simple", body)
    assert counts(srv, "simple") == (0, 1, 1, 1)
    second = raw_infer(srv, "simple", body)
    assert second == first  # byte for byte
    # The hit counts as a success and (as in a running Triton) as queued,
    # not as an execution, an inference or a compute.
    assert counts(srv, "simple") == (1, 1, 2, 1)
    s = stats(srv, "simple")
    assert s["inference_stats"]["queue"]["count"] == 2
    assert s["inference_count"] == 1
    assert s["inference_stats"]["compute_infer"]["count"] == 1
    assert s["inference_stats"]["cache_hit"]["ns"] > 0

    # Other data, or other requested outputs, is another key.
    body2 = {"inputs": body["inputs"][:1] + [dict(body["inputs"][1], data=[4] * 16)]}
    raw_infer(srv, "simple", body2)
    raw_infer(srv, "simple", dict(body, outputs=[{"name": "OUTPUT1"}]))
    assert counts(srv, "simple") == (1, 3, 4, 3)

    # A model without response_cache is never cached.
    raw_infer(srv, "simple_nocache", body)
    raw_infer(srv, "simple_nocache", body)
    assert counts(srv, "simple_nocache") == (0, 0, 2, 2)


def test_hits_over_grpc_and_http_match_the_model(start_server, repo):
    srv = start_server(repo, ["--cache-config=local,size=1048576"])
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), -2, dtype=np.int32)
    grpc = grpcclient.InferenceServerClient(srv.grpc_url)
    http = httpclient.InferenceServerClient(srv.hostport)
    runs = [grpc.infer("simple", simple_inputs(grpcclient, a, b)) for _ in range(3)]
    runs.append(http.infer("simple", simple_inputs(httpclient, a, b)))
    for r in runs:
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert counts(srv, "simple") == (3, 1, 4, 1)

    metrics = requests.get(srv.metrics_url + "/metrics", timeout=10).text
    assert 'nv_cache_num_hits_per_model{model="simple",version="1"} 3' in metrics
    assert 'nv_cache_num_misses_per_model{model="simple",version="1"} 1' in metrics
    assert 'nv_cache_hit_duration_per_model{model="simple",version="1"}' in metrics
    assert 'nv_cache_miss_duration_per_model{model="simple",version="1"}' in metrics
    assert 'nv_cache_num_hits_per_model{model="simple_nocache"' not in metrics
    # Triton's order of the per-model families, then the cache's gauges.
    names = [line.split()[2] for line in metrics.splitlines() if line.startswith("# TYPE nv_cache")]
    assert names == ["nv_cache_num_hits_per_model", "nv_cache_hit_duration_per_model",
                     "nv_cache_num_misses_per_model", "nv_cache_miss_duration_per_model",
                     "nv_cache_util", "nv_cache_num_entries", "nv_cache_num_hits",
                     "nv_cache_num_misses", "nv_cache_num_lookups", "nv_cache_num_evictions",
                     "nv_cache_lookup_duration", "nv_cache_insertion_duration"]
    assert "nv_cache_num_entries 1\n" in metrics
    assert "nv_cache_num_hits 3\n" in metrics and "nv_cache_num_lookups 4\n" in metrics


def echo(srv, value, n=1000):
    client = httpclient.InferenceServerClient(srv.hostport)
    x = np.full((1, n), value, dtype=np.float32)
    i = httpclient.InferInput("INPUT0", [1, n], "FP32")
    i.set_data_from_numpy(x)
    out = client.infer("echo", [i]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x)


def test_the_least_recently_used_entry_is_evicted(start_server, repo):
    # Room for two 4000-byte responses, not three.
    srv = start_server(repo, ["--cache-config=local,size=10000"])
    echo(srv, 1.0)        # miss: [A]
    echo(srv, 2.0)        # miss: [A, B]
    echo(srv, 1.0)        # hit: A is the most recent now
    assert counts(srv, "echo") == (1, 2, 3, 2)
    echo(srv, 3.0)        # miss: evicts B
    echo(srv, 1.0)        # hit
    assert counts(srv, "echo") == (2, 3, 5, 3)
    echo(srv, 2.0)        # B was evicted: a miss that runs the model
    assert counts(srv, "echo") == (2, 4, 6, 4)
    # A response larger than the whole cache is never kept.
    echo(srv, 4.0, n=3000)
    echo(srv, 4.0, n=3000)
    assert counts(srv, "echo") == (2, 6, 8, 6)


def test_without_the_flag_nothing_is_cached(start_server, repo):
    srv = start_server(repo)
    echo(srv, 1.0)
    echo(srv, 1.0)
    assert counts(srv, "echo") == (0, 0, 2, 2)
    assert "nv_cache_" not in requests.get(srv.metrics_url + "/metrics", timeout=10).text


def test_a_zero_byte_cache_is_refused(repo, tmp_path):
    srv = harness.OspreyServer(repo, ["--cache-config=local,size=0"], workdir=tmp_path / "w")
    assert srv.run_to_exit() == 2
    assert "the local cache needs a size greater than 0" in srv.log()


def test_a_response_larger_than_the_cache_is_logged_and_not_kept(start_server, repo):
    srv = start_server(repo, ["--cache-config=local,size=200"])
    echo(srv, 3.0)
    echo(srv, 3.0)
    assert counts(srv, "echo")[:2] == (0, 2)
    log = srv.log()
    assert "Failed to insert key [" in log
    assert "] into response cache: the response is larger than the whole cache" in log


def test_the_older_byte_size_flag_is_a_local_cache(start_server, repo):
    srv = start_server(repo, ["--response-cache-byte-size=8192"])
    echo(srv, 2.0)
    echo(srv, 2.0)
    assert counts(srv, "echo")[:2] == (1, 1)


@pytest.mark.parametrize("flags,message", [
    (["--response-cache-byte-size=12345", "--cache-config=local,size=67890"],
     "Error: Incompatible flags --response-cache-byte-size and --cache-config "
     "both provided. Please provide one or the other."),
    (["--cache-config=local,size=8192", "--cache-config=redis,key=value"],
     "error: creating server: Invalid argument - found multiple cache "
     "configurations, but only a single cache is currently supported"),
])
def test_two_caches_are_refused_in_tritons_words(repo, tmp_path, flags, message):
    srv = harness.OspreyServer(repo, flags, workdir=tmp_path / "w")
    assert srv.run_to_exit() == 2
    assert message in srv.log()


def test_a_decoupled_model_with_the_cache_is_refused(start_server, repo):
    harness.write_model(repo, "decoupled", cached(harness.identity_config(
        "decoupled", "TYPE_FP32", [-1],
        extra="model_transaction_policy { decoupled: true }\n")))
    srv = start_server(repo, ["--cache-config=local,size=1048576",
                              "--model-control-mode=explicit"])
    # As a running Triton 2.51: refused when the repository is polled.
    r = requests.post(f"{srv.url}/v2/repository/models/decoupled/load", timeout=30)
    assert (r.status_code, r.json()["error"]) == (
        500, "failed to load 'decoupled', failed to poll from model repository")
    assert ("Poll failed for model directory 'decoupled': Response Cache does not "
            "currently support model decoupled with 'decoupled' transaction policy. "
            "Please disable the response cache.") in srv.log()
    index = requests.post(f"{srv.url}/v2/repository/index", json={}, timeout=10).json()
    assert {"name": "decoupled"} in index


def test_an_ensemble_caches_its_own_responses(start_server, repo):
    harness.write_model(repo, "ens", (
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "ensemble_scheduling { step [ { model_name: \"echo\" model_version: -1\n"
        '  input_map { key: "INPUT0" value: "X" }\n'
        '  output_map { key: "OUTPUT0" value: "Y" } } ] }\n' + CACHE_ON))
    srv = start_server(repo, ["--cache-config=local,size=1048576"])
    client = httpclient.InferenceServerClient(srv.hostport)
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    for _ in range(2):
        i = httpclient.InferInput("X", [1, 8], "FP32")
        i.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("ens", [i]).as_numpy("Y"), x)
    assert counts(srv, "ens")[:3] == (1, 1, 2)
    assert stats(srv, "echo")["execution_count"] == 1


def test_concurrent_identical_requests_get_whole_answers(start_server, repo):
    import concurrent.futures
    srv = start_server(repo, ["--cache-config=local,size=1048576"])

    def one(k):
        client = httpclient.InferenceServerClient(srv.hostport)
        a = np.full((1, 16), k % 4, dtype=np.int32)
        b = np.arange(16, dtype=np.int32).reshape(1, 16)
        r = client.infer("simple", simple_inputs(httpclient, a, b))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(200)))
    hits, misses, success, executions = counts(srv, "simple")
    # Four keys: each missed at least once; concurrent misses may each run.
    assert success == 200 and hits + misses == 200
    assert misses >= 4 and executions == misses
