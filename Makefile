# Osprey: the two commands a new user needs.
#   make run   installs what is missing, builds, serves models/ on :8000
#   make test  installs what is missing, builds, runs every test
# Everything else here is a step of those two.

BUILD      ?= build
VENV       ?= .venv
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
HTTP_PORT  ?= 8000
# CI sets CI=true: warnings are errors there.
ifeq ($(CI),true)
CMAKE_ARGS += -DOSPREY_WERROR=ON
endif

DEB_PACKAGES = build-essential cmake pkg-config libmicrohttpd-dev libjson-c-dev \
               zlib1g-dev libopenblas-dev libgtest-dev python3 python3-venv python3-pip \
               protobuf-c-compiler libprotobuf-c-dev libwslay-dev libhiredis-dev \
               redis-server libgrpc-dev openssl libonnx-dev libonnx-testdata \
               libcurl4-openssl-dev libexpat1-dev libssl-dev python3-numpy

.PHONY: run test deps venv build leakcheck tsan tsan-quick tsan-build fuzz fuzz-run clean format deploy-check docs-flags

run: deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS) --target osprey
	./$(BUILD)/osprey --model-repository=models --http-port=$(HTTP_PORT)

test: deps venv build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(VENV)/bin/python -m pytest -q tests/integration
	$(MAKE) leakcheck
	$(MAKE) tsan-quick

# The leak check: an AddressSanitizer + LeakSanitizer + UBSan build of the server
# driven by a short mix of the integration tests (tritonclient flows and the
# malformed-request cases, without the 64 MiB bodies, load overrides,
# classification, the TF Serving REST surface, the models on fake GPUs
# when the CUDA toolkit is there (ONNX ones included, with CUDA graphs),
# and the queue service's raw HTTP/WebSocket
# scenario and model services, the ONNX models, ensembles, the response
# cache, the sequence batcher (ONNX and python sequence models too), model
# warmup and the python backend's server
# side, decoupled models, custom metrics and GPU tensors included, gRPC
# cancellation, header forwarding and the redis response cache); the harness fails a test whose server
# log holds any sanitizer report or whose exit is not 0.
leakcheck: deps venv
	cmake -S . -B $(BUILD)-asan -DOSPREY_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan -j $(JOBS) --target osprey \
	  $$(test -d $(BUILD)-asan/tests/fake_cuda && echo osprey_fakegpu)
	UBSAN_OPTIONS=print_stacktrace=1 OSPREY_BIN=$(BUILD)-asan/osprey OSPREY_TIMEOUT_SCALE=3 \
	  $(VENV)/bin/python -m pytest -q -m "not large" \
	  tests/integration/test_kserve_http_tritonclient.py tests/integration/test_kserve_http_protocol.py \
	  tests/integration/test_kserve_http_fake_gpu.py tests/integration/test_onnx_fake_gpu.py \
	  tests/integration/test_kserve_http_load_override.py \
	  tests/integration/test_kserve_http_classification.py tests/integration/test_kserve_http_logging.py \
	  tests/integration/test_tfserving_rest.py tests/integration/test_kserve_http_shm.py \
	  tests/integration/test_kserve_http_cuda_shm.py tests/integration/test_kserve_grpc_cuda_shm.py \
	  tests/integration/test_queue_http.py tests/integration/test_queue_models.py \
	  tests/integration/test_kserve_grpc_protocol.py tests/integration/test_onnx_models.py \
	  tests/integration/test_ensemble.py tests/integration/test_response_cache.py \
	  tests/integration/test_sequence_batcher.py tests/integration/test_sequence_backends.py \
	  tests/integration/test_sequence_cancel.py tests/integration/test_model_warmup.py \
	  tests/integration/test_python_backend.py tests/integration/test_python_requests.py \
	  tests/integration/test_python_bls_threads.py tests/integration/test_python_bls_concurrent.py \
	  tests/integration/test_python_bls_background.py tests/integration/test_python_bls_stream.py \
	  tests/integration/test_python_bls_options.py tests/integration/test_python_metrics.py \
	  tests/integration/test_python_dlpack.py \
	  tests/integration/test_decoupled.py tests/integration/test_onnx_strings.py \
	  tests/integration/test_onnx_fake_gpu_ops.py tests/integration/test_grpc_unary_cancel.py \
	  tests/integration/test_header_forward.py tests/integration/test_response_cache_redis.py

# ThreadSanitizer on the concurrent core: a -fsanitize=thread build of the
# server and of the unit tests of the batcher, instance execution, the
# embedded queue store, the HTTP transport and the CPU worker threads (CPU
# device only; OpenBLAS runs on the calling thread), then those unit tests
# and the integration tests of batching, instances, shutdown with requests
# in flight, gRPC streams and async calls, the queue service and the
# hostile-network cases under concurrent clients. Any report fails: TSan
# exits 66 (ctest) and the harness fails a server whose log holds one.
# tests/tsan.supp lists the reports that are not ours, each with its reason
# (gRPC is linked shared here so that it can name gRPC's libraries).
# make test runs tsan-quick, a few of them.
TSAN_ENV = TSAN_OPTIONS="second_deadlock_stack=1 history_size=4 suppressions=$(CURDIR)/tests/tsan.supp" \
           OPENBLAS_NUM_THREADS=1
TSAN_UNIT = test_batcher test_core_infer test_queue_embedded test_http_server \
            test_cpu_threads
TSAN_UNIT_TESTS = ^(Batcher|ReorderBuffer|CoreInfer|queue[.]QueueEmbedded|HttpServerTest|CpuThreads|StreamThreads)[.]
TSAN_INTEGRATION = tests/integration/test_kserve_http_scheduler_stats.py \
  tests/integration/test_kserve_grpc_tritonclient.py \
  tests/integration/test_queue_http.py tests/integration/test_queue_robustness.py \
  tests/integration/test_hostile_network.py
# TSan cannot start threads in a child forked from a threaded process.
TSAN_UNIT_SKIP = ^CpuThreads[.]ForkedChildRunsAndExits$$
# It orders requests by 40 ms sleeps, which TSan's slowdown does not keep.
TSAN_INTEGRATION_SKIP = test_higher_priority_runs_first
tsan-build: deps venv
	cmake -S . -B $(BUILD)-tsan -DOSPREY_TSAN=ON -DOSPREY_CUDA=OFF \
	  -DOSPREY_GRPC_STATIC=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD)-tsan -j $(JOBS) --target osprey $(TSAN_UNIT)

tsan: tsan-build
	cd $(BUILD)-tsan && $(TSAN_ENV) ctest --output-on-failure -j $(JOBS) -R '$(TSAN_UNIT_TESTS)' \
	  -E '$(TSAN_UNIT_SKIP)'
	$(TSAN_ENV) OSPREY_BIN=$(BUILD)-tsan/osprey OSPREY_TIMEOUT_SCALE=5 \
	  $(VENV)/bin/python -m pytest -q -m "not large" $(TSAN_INTEGRATION) \
	  -k "not $(TSAN_INTEGRATION_SKIP)"

# The same on a few of those tests.
tsan-quick: TSAN_UNIT_TESTS = ^(Batcher|CoreInfer)[.]
tsan-quick: TSAN_INTEGRATION = \
  tests/integration/test_kserve_http_scheduler_stats.py::test_concurrent_clients_form_batches \
  tests/integration/test_kserve_http_scheduler_stats.py::test_sigterm_runs_queued_requests \
  tests/integration/test_kserve_grpc_tritonclient.py::test_many_async_in_flight \
  tests/integration/test_kserve_grpc_tritonclient.py::test_example_simple_grpc_stream
tsan-quick: tsan

# The libFuzzer targets of tests/fuzz, built with clang in $(BUILD)-fuzz
# (make test replays their corpora and, with clang installed, checks that
# they build: the ctest fuzz_build). fuzz-run fuzzes each target for
# FUZZ_SECONDS, merges what it finds into tests/fuzz/corpus and prints
# executions, exec/s, edges, new corpus files and crashes per target.
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -DOSPREY_CUDA=OFF \
	  -DOSPREY_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target osprey_fuzz_all

fuzz-run: fuzz
	python3 tests/fuzz/fuzz_run.py --build $(BUILD)-fuzz --seconds $(FUZZ_SECONDS) \
	  $(if $(FUZZ_RUNS),--runs $(FUZZ_RUNS))

# docker/check.sh: builds docker/Dockerfile.cpu's stages in Debian chroots
# made with debootstrap and serves from the result (needs root and Debian's
# mirror, ~6 minutes; not part of `make test`, which lints the same files).
deploy-check: venv
	@command -v debootstrap >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap)
	docker/check.sh

# Installs Debian packages only when one is missing (needs root, as on a
# fresh Debian 12 machine).
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.installed
$(VENV)/.installed: tests/requirements.txt tests/requirements-eas-sdk.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r tests/requirements.txt
	$(VENV)/bin/pip install -q --no-deps --upgrade --target $(VENV)/eas-sdk \
	  -r tests/requirements-eas-sdk.txt
	touch $@

build:
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

clean:
	rm -rf $(BUILD)

# Rewrites the generated part of docs/flags.md from the flag table
# (test_docs.py fails until it matches).
docs-flags: build
	./$(BUILD)/osprey --help-markdown > $(BUILD)/flags.md.part
	sed -e '/^<!-- generated by osprey --help-markdown: begin -->$$/,$$d' docs/flags.md > $(BUILD)/flags.md
	echo '<!-- generated by osprey --help-markdown: begin -->' >> $(BUILD)/flags.md
	cat $(BUILD)/flags.md.part >> $(BUILD)/flags.md
	sed -n -e '/^<!-- generated by osprey --help-markdown: end -->$$/,$$p' docs/flags.md >> $(BUILD)/flags.md
	mv $(BUILD)/flags.md docs/flags.md

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cc' '*.cu')
