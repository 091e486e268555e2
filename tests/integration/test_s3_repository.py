"""Model repositories in S3 (s3://...), against moto in server mode: the
real S3 API on a loopback port, with request signatures checked.

One moto server for the module (moto is slow to start); each test uses
buckets of its own. Servers get their credentials from the environment,
or from shared files in the test's folder (never the user's ~/.aws).
"""

import concurrent.futures
import json
import os
import pathlib
import time
import uuid

import boto3
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import harness
import s3_util


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = s3_util.MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


def identity(name, extra=""):
    return harness.identity_config(name, "TYPE_FP32", [-1], extra=extra)


def new_bucket(moto):
    name = "osprey-" + uuid.uuid4().hex[:12]
    moto.s3.create_bucket(Bucket=name)
    return name


def put_model(moto, bucket, prefix, name, config=None, versions=(1,), files=None):
    """Uploads <prefix>/<name>/config.pbtxt and, per version, `files`
    ({name: bytes}; default a README) under <prefix>/<name>/<version>/."""
    base = f"{prefix}/{name}" if prefix else name
    moto.s3.put_object(Bucket=bucket, Key=f"{base}/config.pbtxt",
                       Body=(config or identity(name)).encode())
    for v in versions:
        for fname, data in (files or {"README": b"version %d\n" % v}).items():
            moto.s3.put_object(Bucket=bucket, Key=f"{base}/{v}/{fname}", Body=data)


def delete_prefix(moto, bucket, prefix):
    listed = moto.s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    for obj in listed.get("Contents", []):
        moto.s3.delete_object(Bucket=bucket, Key=obj["Key"])


@pytest.fixture
def aws_env(monkeypatch, tmp_path, moto):
    """The servers' AWS environment: moto's key, no shared files."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION",
                 "AWS_DEFAULT_REGION", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret)
    return monkeypatch


@pytest.fixture
def start_s3(tmp_path, aws_env):
    """start_s3(url, args, wait="ready") -> OspreyServer whose models come
    from `url`, caching under tmp_path/cache; stopped and checked at the
    end. Also .run_to_exit for servers that must refuse to start."""
    started = []
    cache = tmp_path / "cache"
    cache.mkdir()

    def make(url, args):
        work = tmp_path / f"server{len(started)}"
        server = harness.OspreyServer(tmp_path, [f"--repository-cache-dir={cache}"]
                                      + list(args), workdir=work)
        server.repo = url  # OspreyServer makes paths absolute
        started.append(server)
        return server

    def start(url, args=(), wait="ready"):
        try:
            return make(url, args).start(wait=wait)
        except harness.ServerStartError as e:
            pytest.fail(str(e), pytrace=False)

    start.make = make
    start.cache = cache
    yield start
    problems = []
    for server in started:
        if server.proc is None or server.returncode is not None:
            continue
        server.stop()
        problems += server.clean_exit_problems()
    # The cache folder each server made is gone with it.
    assert list(cache.iterdir()) == []
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def url_of(moto, bucket, prefix="", port=None):
    return f"s3://127.0.0.1:{port or moto.port}/{bucket}" + (f"/{prefix}" if prefix else "")


def index(server):
    r = requests.post(server.url + "/v2/repository/index", json={})
    assert r.status_code == 200, r.text
    return {(m["name"], m.get("version", "")): m.get("state", "") for m in r.json()}


def infer_ok(server, model):
    client = httpclient.InferenceServerClient(server.hostport)
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(data)
    out = client.infer(model, [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, data)


def wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout * harness.timeout_scale()
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.1)


# Triton's answer to a load whose files cannot be fetched; the reason is in
# the server's log.
POLL_FAILURE = "failed to load '{}', failed to poll from model repository"


def load(server, name):
    return requests.post(f"{server.url}/v2/repository/models/{name}/load")


def model_files(cache):
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


# ---- serving a bucket ----------------------------------------------------------


def test_serves_a_bucket_through_every_frontend(moto, start_s3):
    bucket = new_bucket(moto)
    labels = b"zero\none\ntwo\nthree\n"
    put_model(moto, bucket, "models/prod", "ident", versions=(1, 2),
              config=identity("ident", extra='version_policy { all { } }\n'))
    moto.s3.put_object(Bucket=bucket, Key="models/prod/ident/labels.txt", Body=labels)
    put_model(moto, bucket, "models/prod", "other")
    # Outside the prefix: not part of the repository.
    put_model(moto, bucket, "models/staging", "elsewhere")
    server = start_s3(url_of(moto, bucket, "models/prod/"))

    assert index(server) == {("ident", "1"): "READY", ("ident", "2"): "READY",
                             ("other", "1"): "READY"}
    infer_ok(server, "ident")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    assert g.is_model_ready("other")
    assert [m.name for m in g.get_model_repository_index().models].count("ident") == 2
    r = requests.get(server.url + "/v1/models/ident")
    assert r.status_code == 200 and len(r.json()["model_version_status"]) == 2
    # Backends read plain files from the cache, and no reply names it.
    files = model_files(start_s3.cache)
    assert any(f.endswith("ident/labels.txt") for f in files), files
    cached = next(start_s3.cache.rglob("labels.txt"))
    assert cached.read_bytes() == labels
    assert str(start_s3.cache) not in requests.get(
        server.url + "/v2/models/ident/config").text


def test_explicit_load_unload_and_override(moto, start_s3):
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "first")
    server = start_s3(url_of(moto, bucket), ["--model-control-mode=explicit"])
    assert index(server) == {("first", ""): ""}
    assert model_files(start_s3.cache) == []  # nothing downloaded yet

    # A model uploaded after the start loads on request.
    put_model(moto, bucket, "", "later")
    r = load(server, "later")
    assert r.status_code == 200, r.text
    infer_ok(server, "later")
    r = requests.post(f"{server.url}/v2/repository/models/later/unload")
    assert r.status_code == 200
    assert index(server)[("later", "1")] == "UNAVAILABLE"

    # A broken config's error names the file as the bucket has it.
    moto.s3.put_object(Bucket=bucket, Key="broken/config.pbtxt", Body=b"max_batch_size: x")
    moto.s3.put_object(Bucket=bucket, Key="broken/1/README", Body=b"")
    r = load(server, "broken")
    assert r.status_code == 400
    assert r.json()["error"].startswith("broken/config.pbtxt:"), r.text
    assert str(start_s3.cache) not in r.text + requests.post(
        server.url + "/v2/repository/index", json={}).text

    r = load(server, "missing")
    assert r.status_code == 500
    assert r.json()["error"] == POLL_FAILURE.format("missing")

    # A load override's files go to a local folder, never to the bucket.
    before = sorted(o["Key"] for o in moto.s3.list_objects_v2(Bucket=bucket)["Contents"])
    r = requests.post(f"{server.url}/v2/repository/models/first/load", json={
        "parameters": {"config": '{"backend": "identity", "max_batch_size": 8, '
                                 '"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}], '
                                 '"output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]}',
                       "file:3/README": "aGVsbG8="}})
    assert r.status_code == 200, r.text
    assert index(server)[("first", "3")] == "READY"
    after = sorted(o["Key"] for o in moto.s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert after == before


def test_concurrent_loads(moto, start_s3):
    bucket = new_bucket(moto)
    names = [f"m{i}" for i in range(6)]
    for n in names:
        put_model(moto, bucket, "repo", n, files={"weights.bin": os.urandom(200_000)})
    server = start_s3(url_of(moto, bucket, "repo"), ["--model-control-mode=explicit"])
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        replies = list(pool.map(lambda n: load(server, n), names))
    assert [r.status_code for r in replies] == [200] * len(names)
    for n in names:
        infer_ok(server, n)
        local = list(start_s3.cache.rglob(f"{n}/1/weights.bin"))
        remote = moto.s3.get_object(Bucket=bucket, Key=f"repo/{n}/1/weights.bin")["Body"].read()
        assert [p.read_bytes() == remote for p in local] == [True]


def test_poll_follows_the_bucket(moto, start_s3):
    bucket = new_bucket(moto)
    put_model(moto, bucket, "r", "kept")
    put_model(moto, bucket, "r", "goes")
    server = start_s3(url_of(moto, bucket, "r"),
                      ["--model-control-mode=poll", "--repository-poll-secs=1"])
    assert index(server) == {("kept", "1"): "READY", ("goes", "1"): "READY"}

    put_model(moto, bucket, "r", "kept", versions=(2,))
    delete_prefix(moto, bucket, "r/goes/")
    wait_for(lambda: index(server).get(("kept", "2")) == "READY", "version 2")
    wait_for(lambda: index(server).get(("goes", "1")) != "READY", "the unload")
    assert requests.get(server.url + "/v2/models/goes/ready").status_code != 200
    infer_ok(server, "kept")
    # A model whose files did not change is not reloaded.
    put_model(moto, bucket, "r", "new")
    wait_for(lambda: index(server).get(("new", "1")) == "READY", "a new model")
    assert server.log().count("successfully loaded 'kept'") == 2


def test_folders_and_buckets_together(moto, start_s3, tmp_path):
    bucket = new_bucket(moto)
    put_model(moto, bucket, "r", "from_bucket")
    put_model(moto, bucket, "r", "twice")
    local = tmp_path / "local"
    harness.write_model(local, "from_folder", identity("from_folder"))
    harness.write_model(local, "twice", identity("twice"))
    server = start_s3(url_of(moto, bucket, "r"), [f"--model-repository={local}"])
    # As Triton: a name in two repositories is not served.
    assert index(server) == {("from_bucket", "1"): "READY",
                             ("from_folder", "1"): "READY"}
    assert "failed to poll model 'twice': not unique across all model " \
        "repositories" in server.log()
    infer_ok(server, "from_bucket")
    infer_ok(server, "from_folder")
    assert requests.get(server.url + "/v2/models/twice/ready").status_code != 200


# ---- credentials -----------------------------------------------------------------


def test_credentials_from_a_profile_of_the_shared_files(moto, start_s3, aws_env, tmp_path):
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "m")
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    (tmp_path / "no-credentials").write_text(
        "[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n"
        f"[ci]\naws_access_key_id = {moto.key_id}\n"
        f"aws_secret_access_key = {moto.secret}\n")
    (tmp_path / "no-config").write_text("[profile ci]\nregion = us-east-1\n")
    aws_env.setenv("AWS_PROFILE", "ci")
    server = start_s3(url_of(moto, bucket))
    assert index(server) == {("m", "1"): "READY"}
    assert "credentials from the shared credentials file" in server.log()
    assert moto.secret not in server.log()


def test_temporary_credentials_with_a_session_token(moto, start_s3, aws_env):
    # Keys of an assumed role: moto refuses them without their token.
    role = moto.iam.create_role(
        RoleName="osprey-" + uuid.uuid4().hex[:8],
        AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                           "Action": "sts:AssumeRole"}]}))["Role"]
    moto.iam.put_role_policy(
        RoleName=role["RoleName"], PolicyName="all",
        PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    sts = boto3.client("sts", endpoint_url=moto.endpoint, region_name="us-east-1",
                       aws_access_key_id=moto.key_id,
                       aws_secret_access_key=moto.secret)
    creds = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="osprey-test")["Credentials"]
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "m")
    aws_env.setenv("AWS_ACCESS_KEY_ID", creds["AccessKeyId"])
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", creds["SecretAccessKey"])
    aws_env.setenv("AWS_SESSION_TOKEN", creds["SessionToken"])
    server = start_s3(url_of(moto, bucket))
    assert index(server) == {("m", "1"): "READY"}
    assert creds["SessionToken"] not in server.log()


def test_a_wrong_secret_is_a_clear_error_without_the_secret(moto, start_s3, aws_env):
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "m")
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-1234")
    server = start_s3.make(url_of(moto, bucket), [])
    assert server.run_to_exit() == 1
    log = server.log()
    assert ("access denied by " + url_of(moto, bucket) + " (SignatureDoesNotMatch): "
            "the secret access key from the environment does not match its key id") in log
    assert "not-the-secret-1234" not in log


def test_revoked_key_fails_loads_while_loaded_models_serve(moto, start_s3, aws_env):
    # A second key of the same user, revoked once the server runs.
    key = moto.iam.create_access_key(UserName="osprey")["AccessKey"]
    aws_env.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "a")
    put_model(moto, bucket, "", "b")
    server = start_s3(url_of(moto, bucket), ["--model-control-mode=explicit",
                                             "--load-model=a"])
    moto.iam.delete_access_key(UserName="osprey", AccessKeyId=key["AccessKeyId"])
    r = load(server, "b")
    assert r.status_code == 500
    assert r.json()["error"] == POLL_FAILURE.format("b")
    assert "(InvalidAccessKeyId): the access key id from the environment is not " \
        "known there" in server.log()
    assert key["SecretAccessKey"] not in server.log()
    infer_ok(server, "a")


# ---- failures at the endpoint ------------------------------------------------------


def test_an_endpoint_that_does_not_answer_fails_the_start(moto, start_s3, aws_env):
    silent = s3_util.SilentListener()
    try:
        aws_env.setenv("AWS_MAX_ATTEMPTS", "1")
        server = start_s3.make(f"s3://127.0.0.1:{silent.port}/bucket/models", [])
        assert server.run_to_exit(timeout=60) == 1
        assert f"cannot reach s3://127.0.0.1:{silent.port}/bucket/models" in server.log()
    finally:
        silent.stop()
    closed = s3_util.free_port()
    server = start_s3.make(f"s3://127.0.0.1:{closed}/bucket", [])
    assert server.run_to_exit() == 1
    assert f"cannot reach s3://127.0.0.1:{closed}/bucket" in server.log()


def test_a_missing_bucket_is_named(moto, start_s3):
    server = start_s3.make(url_of(moto, "no-such-bucket-here"), [])
    assert server.run_to_exit() == 1
    assert "S3 bucket 'no-such-bucket-here' does not exist" in server.log()


def s3_error(code, extra=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>m</Message>{extra}<RequestId>r</RequestId></Error>")


def test_a_bucket_of_another_region_is_named(start_s3):
    endpoint = s3_util.FixedReply(400, s3_error("AuthorizationHeaderMalformed",
                                                "<Region>eu-west-1</Region>"))
    try:
        server = start_s3.make(f"s3://127.0.0.1:{endpoint.port}/bucket", [])
        assert server.run_to_exit() == 1
        assert ("wrong region 'us-east-1' (the bucket is in 'eu-west-1'): "
                "set AWS_REGION") in server.log()
        assert endpoint.count == 1  # not retried
    finally:
        endpoint.stop()


def test_throttling_is_retried_then_reported(start_s3, aws_env):
    aws_env.setenv("AWS_MAX_ATTEMPTS", "3")
    endpoint = s3_util.FixedReply(503, s3_error("SlowDown"))
    try:
        server = start_s3.make(f"s3://127.0.0.1:{endpoint.port}/bucket", [])
        assert server.run_to_exit() == 1
        assert endpoint.count == 3
        assert "(attempt 2 of 3; retrying)" in server.log()
        assert "answered HTTP 503 SlowDown: m to a request for 'the listing'" \
            in server.log()
    finally:
        endpoint.stop()


def test_listing_past_one_page(moto, start_s3):
    # S3 lists 1,000 keys a page: files beside the model folders (which
    # the repository skips) push a model onto the second page.
    bucket = new_bucket(moto)
    put_model(moto, bucket, "r", "first")
    keys = [f"r/notes-{i:04d}.txt" for i in range(1005)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: moto.s3.put_object(Bucket=bucket, Key=k, Body=b"n"), keys))
    put_model(moto, bucket, "r", "second")
    server = start_s3(url_of(moto, bucket, "r"))
    assert index(server) == {("first", "1"): "READY", ("second", "1"): "READY"}


def test_a_download_broken_mid_file_is_resumed(moto, start_s3):
    bucket = new_bucket(moto)
    weights = os.urandom(3_000_000)
    put_model(moto, bucket, "", "big", files={"weights.bin": weights})
    proxy = s3_util.TruncatingProxy(moto.port)
    try:
        proxy.cut("big/1/weights.bin", times=2)
        server = start_s3(url_of(moto, bucket, port=proxy.port))
        assert index(server) == {("big", "1"): "READY"}
        assert proxy.gets("big/1/weights.bin") == 3
        assert "resuming at byte" in server.log()
        [cached] = start_s3.cache.rglob("big/1/weights.bin")
        assert cached.read_bytes() == weights
    finally:
        proxy.stop()


def test_a_download_that_keeps_failing_leaves_no_half_model(moto, start_s3, aws_env):
    aws_env.setenv("AWS_MAX_ATTEMPTS", "2")
    bucket = new_bucket(moto)
    put_model(moto, bucket, "", "m", files={"weights.bin": b"1" * 100_000})
    proxy = s3_util.TruncatingProxy(moto.port)
    try:
        server = start_s3(url_of(moto, bucket, port=proxy.port),
                          ["--model-control-mode=explicit", "--load-model=m"])
        before = model_files(start_s3.cache)
        # Version 2 cannot be downloaded: the reload fails, version 1 serves.
        put_model(moto, bucket, "", "m", versions=(2,),
                  files={"weights.bin": b"2" * 100_000})
        proxy.cut("m/2/weights.bin", times=100, keep=0.0)
        r = load(server, "m")
        assert r.status_code == 500
        assert r.json()["error"] == POLL_FAILURE.format("m")
        assert "failed to download model 'm'" in server.log()
        assert model_files(start_s3.cache) == before
        assert not list(start_s3.cache.rglob(".partial-*"))
        infer_ok(server, "m")
        assert index(server)[("m", "1")] == "READY"
    finally:
        proxy.stop()
