"""Fixtures that run the real osprey binary.

Session-scoped servers (started once, shared):
  models_server  the bundled models/ repository, --model-control-mode=none
  qa_server      a temporary repository of Triton's QA models (harness.QA_MODELS
                 minus the dynamic-batching one), started the way
                 qa/L0_http/http_test.py starts Triton:
                 --model-control-mode=explicit --load-model=*

If a test crashes a shared server, that test errors with the server's log and
the next test gets a fresh server, so one crash does not fail the whole run.

Function-scoped:
  start_server(repo, args=[], wait="ready")  starts a server with special flags;
                 stopped (and checked) when the test ends.

Every server is stopped with SIGTERM at the end and must exit 0 with no
sanitizer report in its log (see harness.OspreyServer.clean_exit_problems).
"""

import pathlib
import shutil

import pytest

import harness

QA_SESSION_MODELS = [n for n in harness.QA_MODELS if n != "onnx_zero_1_float32_queue"]


def _stop_and_check(server):
    server.stop()
    problems = server.clean_exit_problems()
    if problems:
        pytest.fail(
            "server did not shut down cleanly: " + "; ".join(problems)
            + "\n--- server log (tail) ---\n" + server.log_tail(),
            pytrace=False)


class _SharedServer:
    """A session server that is restarted if a test kills it."""

    def __init__(self, factory):
        self.factory = factory
        self.server = None

    def get(self):
        if self.server is None or not self.server.alive():
            self.server = self.factory()
        return self.server


def _shared(tmp_path_factory, name, repo_fn, args):
    counter = {"n": 0}

    def factory():
        counter["n"] += 1
        repo = repo_fn()
        work = tmp_path_factory.mktemp(f"{name}-run{counter['n']}")
        return harness.OspreyServer(repo, args, workdir=work).start()

    return _SharedServer(factory)


def _use_shared(holder):
    try:
        server = holder.get()
    except harness.ServerStartError as e:
        pytest.fail(str(e), pytrace=False)
    yield server
    if not server.alive():
        rc = server.stop()
        pytest.fail(
            f"the server died during this test (exit status {rc})\n"
            "--- server log (tail) ---\n" + server.log_tail(), pytrace=False)


@pytest.fixture(scope="session")
def _models_holder(tmp_path_factory):
    holder = _shared(tmp_path_factory, "models", lambda: harness.EXAMPLE_MODELS,
                     ["--model-control-mode=none"])
    yield holder
    if holder.server is not None:
        _stop_and_check(holder.server)


@pytest.fixture(scope="session")
def qa_repo(tmp_path_factory):
    return harness.make_repo(tmp_path_factory.mktemp("qa_repo"), QA_SESSION_MODELS)


@pytest.fixture(scope="session")
def _qa_holder(tmp_path_factory, qa_repo):
    holder = _shared(tmp_path_factory, "qa", lambda: qa_repo,
                     ["--model-control-mode=explicit", "--load-model=*"])
    yield holder
    if holder.server is not None:
        _stop_and_check(holder.server)


@pytest.fixture
def models_server(_models_holder):
    yield from _use_shared(_models_holder)


@pytest.fixture
def qa_server(_qa_holder):
    yield from _use_shared(_qa_holder)


@pytest.fixture
def start_server(tmp_path):
    """Factory: start_server(repo, args=(), wait="ready", binary=None) ->
    OspreyServer (binary: another build of the server than OSPREY_BIN).
    Each server is stopped at the end of the test and must exit cleanly."""
    started = []

    def start(repo, args=(), wait="ready", binary=None):
        work = tmp_path / f"server{len(started)}"
        server = harness.OspreyServer(repo, list(args), workdir=work, binary=binary)
        started.append(server)
        try:
            return server.start(wait=wait)
        except harness.ServerStartError as e:
            pytest.fail(str(e), pytrace=False)

    yield start
    problems = []
    for server in started:
        if server.proc is None or server.returncode is not None:
            continue
        server.stop()
        for p in server.clean_exit_problems():
            problems.append(p + "\n--- server log (tail) ---\n" + server.log_tail())
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def example_repo_copy(tmp_path):
    """A private copy of models/ a test may modify."""
    dst = tmp_path / "models"
    shutil.copytree(harness.EXAMPLE_MODELS, dst)
    return dst


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "large: sends or receives bodies of 64 MiB or more (deselect with -m 'not large')")


def pytest_report_header(config):
    return [f"osprey binary: {harness.osprey_bin()}",
            f"wrapper: {' '.join(harness.wrapper_argv()) or '(none)'}"]


# ---- the queue service (test_queue_*.py) -----------------------------------


@pytest.fixture(scope="session")
def _redis_holder():
    import queue_util
    holder = {}
    yield holder
    if "server" in holder:
        holder["server"].stop()


@pytest.fixture
def redis_server(_redis_holder):
    """A redis-server on a free loopback port (one per session, flushed
    before each test)."""
    import queue_util
    if "server" not in _redis_holder:
        _redis_holder["server"] = queue_util.RedisServer()
    server = _redis_holder["server"]
    server.flush()
    return server


@pytest.fixture(params=["embedded", "redis"])
def queue_store(request):
    """The queue store under test: "embedded" or "redis"."""
    import queue_util
    if request.param == "redis" and not queue_util.redis_store_available():
        pytest.skip("this build has no Redis queue store yet (the qredis "
                    "branch is not merged)")
    return request.param
