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
               redis-server libgrpc-dev openssl libonnx-dev libonnx-testdata python3-numpy

.PHONY: run test deps venv build leakcheck fuzz clean format

run: deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS) --target osprey
	./$(BUILD)/osprey --model-repository=models --http-port=$(HTTP_PORT)

test: deps venv build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(VENV)/bin/python -m pytest -q tests/integration
	$(MAKE) leakcheck

# The leak check: an AddressSanitizer + LeakSanitizer build of the server
# driven by a short mix of the integration tests (tritonclient flows and the
# malformed-request cases, without the 64 MiB bodies, load overrides,
# classification, the TF Serving REST surface, the models on fake GPUs
# when the CUDA toolkit is there, and the queue service's raw HTTP/WebSocket
# scenario and model services, the ONNX models and the python backend's server
# side); the harness fails a test whose
# server log holds any sanitizer report or whose exit is not 0.
leakcheck: deps venv
	cmake -S . -B $(BUILD)-asan -DOSPREY_SANITIZE=ON $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan -j $(JOBS) --target osprey \
	  $$(test -d $(BUILD)-asan/tests/fake_cuda && echo osprey_fakegpu)
	OSPREY_BIN=$(BUILD)-asan/osprey OSPREY_TIMEOUT_SCALE=3 \
	  $(VENV)/bin/python -m pytest -q -m "not large" \
	  tests/integration/test_kserve_http_tritonclient.py tests/integration/test_kserve_http_protocol.py \
	  tests/integration/test_kserve_http_fake_gpu.py tests/integration/test_kserve_http_load_override.py \
	  tests/integration/test_kserve_http_classification.py tests/integration/test_kserve_http_logging.py \
	  tests/integration/test_tfserving_rest.py tests/integration/test_kserve_http_shm.py \
	  tests/integration/test_kserve_http_cuda_shm.py tests/integration/test_kserve_grpc_cuda_shm.py \
	  tests/integration/test_queue_http.py tests/integration/test_queue_models.py \
	  tests/integration/test_kserve_grpc_protocol.py tests/integration/test_onnx_models.py \
	  tests/integration/test_python_backend.py

# The libFuzzer targets of tests/fuzz, built with clang (make test only
# replays their corpora); run a campaign as tests/fuzz/README.md shows.
FUZZ_TARGETS = fuzz_model_config fuzz_safetensors fuzz_json_body \
               fuzz_json_tensor fuzz_http_compress fuzz_config_json \
               fuzz_tfs_request fuzz_queue_input fuzz_grpc_request fuzz_queue_log \
               fuzz_onnx_model
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -DOSPREY_CUDA=OFF \
	  -DOSPREY_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)

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

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cc' '*.cu')
