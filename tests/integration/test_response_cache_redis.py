"""The redis response cache (--cache-config=redis,...; Triton's redis
cache): two Osprey replicas sharing one redis-server (started here on a
free loopback port) answer each other's repeated requests from it, with
the hit in the statistics and metrics of the replica that did not run the
model; a server whose Redis cannot be reached starts and serves every
request as a miss; the settings and their refusals; the password never in
a log."""

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

import harness
from queue_util import RedisServer, free_port

CACHE_ON = "response_cache {\n  enable: true\n}\n"


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    harness.write_model(repo, "simple", harness.add_sub_config("simple") + CACHE_ON)
    harness.write_model(repo, "plain", harness.add_sub_config("plain"))
    return repo


@pytest.fixture
def redis():
    server = RedisServer()
    yield server
    server.stop()


def infer(srv, model, k):
    client = httpclient.InferenceServerClient(srv.hostport)
    a = np.full((1, 16), k, dtype=np.int32)
    b = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(x)
        inputs.append(i)
    r = client.infer(model, inputs)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    return r


def counts(srv, name):
    r = requests.get(f"{srv.url}/v2/models/{name}/stats", timeout=10)
    assert r.status_code == 200, r.text
    s = r.json()["model_stats"][0]
    i = s["inference_stats"]
    return (i["cache_hit"]["count"], i["cache_miss"]["count"], i["success"]["count"],
            s["execution_count"])


def redis_flags(redis, *extra):
    return [f"--cache-config=redis,host=127.0.0.1,port={redis.port}"
            ",connect_timeout=1000,socket_timeout=1000", *extra]


def test_a_response_computed_by_one_replica_is_a_hit_on_another(start_server, repo, redis):
    # Replica A with Triton's one-key-per-flag form, B with the shorthand.
    a = start_server(repo, ["--cache-config", "redis,host=127.0.0.1",
                            "--cache-config", f"redis,port={redis.port}",
                            "--cache-config", "redis,socket_timeout=1000"])
    b = start_server(repo, redis_flags(redis, "--cache-config=redis,pool_size=4"))
    infer(a, "simple", 1)
    assert counts(a, "simple") == (0, 1, 1, 1)
    first = infer(b, "simple", 1)
    # B answered from Redis: a hit, and its model never ran.
    assert counts(b, "simple") == (1, 0, 1, 0)
    assert first.get_response()["model_name"] == "simple"
    # And the other way round.
    infer(b, "simple", 2)
    infer(a, "simple", 2)
    assert counts(a, "simple") == (1, 1, 2, 1)
    assert counts(b, "simple") == (1, 1, 2, 1)
    # A model without response_cache stays out of it.
    infer(a, "plain", 1)
    infer(b, "plain", 1)
    assert counts(b, "plain") == (0, 0, 1, 1)

    metrics = requests.get(b.metrics_url + "/metrics", timeout=10).text
    assert 'nv_cache_num_hits_per_model{model="simple",version="1"} 1' in metrics
    assert 'nv_cache_num_misses_per_model{model="simple",version="1"} 1' in metrics
    assert "nv_cache_num_hits 1\n" in metrics and "nv_cache_num_lookups 2\n" in metrics
    assert "nv_cache_util 0\n" in metrics  # Redis' maxmemory bounds it
    assert "connected (pool of 4)" in b.log()


def test_a_server_whose_redis_is_unreachable_still_serves(start_server, repo):
    port = free_port()  # nothing listens there
    srv = start_server(repo, ["--cache-config", "redis,host=127.0.0.1",
                              "--cache-config", f"redis,port={port}",
                              "--cache-config", "redis,connect_timeout=500",
                              "--cache-config", "redis,socket_timeout=500"])
    for _ in range(5):
        infer(srv, "simple", 3)
    # Every request a miss that ran the model; the outage logged once.
    assert counts(srv, "simple") == (0, 5, 5, 5)
    log = srv.log()
    assert log.count("is unavailable") == 1, log
    assert f"redis response cache at 127.0.0.1:{port} is unavailable" in log
    assert "Failed to insert key" not in log


def test_the_password_authenticates_and_never_shows(start_server, repo, tmp_path,
                                                    monkeypatch):
    redis = RedisServer(["--requirepass", "pw,with=comma"])
    try:
        # A comma and '=' inside a value stay in it.
        srv = start_server(repo, redis_flags(redis, "--cache-config=redis,password=pw,with=comma"))
        infer(srv, "simple", 4)
        infer(srv, "simple", 4)
        assert counts(srv, "simple")[:2] == (1, 1)
        assert "pw,with=comma" not in srv.log()
        # From Triton's environment variable, the flag not given.
        monkeypatch.setenv("TRITONCACHE_REDIS_PASSWORD", "pw,with=comma")
        env_srv = start_server(repo, redis_flags(redis))
        infer(env_srv, "simple", 4)
        assert counts(env_srv, "simple")[:2] == (1, 0)
        # A wrong one: AUTH refused, logged without it, requests served.
        monkeypatch.delenv("TRITONCACHE_REDIS_PASSWORD")
        wrong = start_server(repo, redis_flags(redis, "--cache-config=redis,password=not-it-9"))
        infer(wrong, "simple", 4)
        assert counts(wrong, "simple")[:2] == (0, 1)
        assert "AUTH refused" in wrong.log() and "not-it-9" not in wrong.log()
    finally:
        redis.stop()


@pytest.mark.parametrize("flags,message", [
    (["--cache-config=redis,host=127.0.0.1"],
     "Failed to initialize RedisCache, didn't specify address. Must at a minimum "
     "specify 'host' and 'port' in the configuration"),
    (["--cache-config=redis,host=127.0.0.1,port=6379,tls_enabled=true"],
     "redis tls_enabled=true is not supported"),
    (["--cache-config=redis,host=127.0.0.1,port=70000"],
     "redis port is a whole number from 1 to 65535, got '70000'"),
    (["--cache-config=redis,host=127.0.0.1,port=1,pool_size=0"],
     "redis pool_size is a whole number from 1 to 1024"),
    (["--cache-config=redis,colour=blue,host=h,port=1"],
     "unknown redis cache key 'colour'"),
    (["--cache-config=redis,port=1,host=h", "--cache-config=local,size=100"],
     "error: creating server: Invalid argument - found multiple cache "
     "configurations, but only a single cache is currently supported"),
    (["--cache-config=memcached,host=h"],
     "the caches are local (local,size=<bytes>) and redis"),
])
def test_bad_settings_are_refused_at_start(repo, tmp_path, flags, message):
    srv = harness.OspreyServer(repo, flags, workdir=tmp_path / "w")
    assert srv.run_to_exit() == 2
    assert message in srv.log()


def test_an_invalid_setting_never_echoes_the_password(repo, tmp_path):
    srv = harness.OspreyServer(
        repo, ["--cache-config=redis,host=h,password=hunter2-x,port=oops"],
        workdir=tmp_path / "w")
    assert srv.run_to_exit() == 2
    log = srv.log()
    assert "redis port is a whole number" in log
    assert "hunter2-x" not in log
