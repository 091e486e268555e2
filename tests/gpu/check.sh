#!/usr/bin/env bash
# GPU check for Osprey, for a machine with an NVIDIA GPU.
#
#   tests/gpu/check.sh [build-dir]      (default: build-gpu)
#
# Builds for the local GPU (CMAKE_CUDA_ARCHITECTURES=native), runs the
# `gpu`-labelled tests, runs compute-sanitizer memcheck on the device
# conformance test, and runs the benchmarks in tests/gpu/: H2D bandwidth
# pinned vs pageable (4 KiB..256 MiB) and GEMM TFLOP/s (FP32/TF32/FP16 at
# 8192^3 and at digits_mlp-like shapes), then an end-to-end HTTP run of a
# 4096-4096-4096-1000 dense model on the GPU vs the CPU (e2e_dense.py: p50,
# infer/s, share of H2D/compute/D2H). Every step gets what is left of an
# 8-minute budget; the summary table is printed last. Logs go to
# <build-dir>/gpu-check/. Exit status 0 when every step passed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(realpath -m "${1:-$ROOT/build-gpu}")
LOGS=$BUILD/gpu-check
BUDGET_S=480
RESERVE_S=10 # kept back for the summary
START=$SECONDS
mkdir -p "$LOGS"

ROWS=()
STEP_RC=0
STEP_S=0
FAILED=0
row() { ROWS+=("$(printf '%-40s %s' "$1" "$2")"); }

# Seconds left for the next step (0 when the budget is spent).
time_left() {
    local left=$((BUDGET_S - RESERVE_S - (SECONDS - START)))
    echo $((left > 0 ? left : 0))
}

# step NAME LOG CMD...: runs CMD under the remaining budget, output to LOG.
# Sets STEP_RC and STEP_S; adds a FAIL/TIMEOUT row itself, not a PASS row
# (callers add a more informative one).
step() {
    local name=$1 log=$2
    shift 2
    local left
    left=$(time_left)
    if ((left <= 0)); then
        STEP_RC=124
        row "$name" "NOT RUN (8-minute budget spent)"
        FAILED=1
        return
    fi
    echo "== $name (log: $log)" >&2
    local t0=$SECONDS
    timeout --kill-after=5 "$left" "$@" >"$log" 2>&1
    STEP_RC=$?
    STEP_S=$((SECONDS - t0))
    if ((STEP_RC == 124 || STEP_RC == 137)); then
        row "$name" "TIMEOUT after ${STEP_S}s"
        FAILED=1
    elif ((STEP_RC != 0)); then
        row "$name" "FAIL (exit $STEP_RC, see $log)"
        FAILED=1
    fi
}

summary() {
    echo
    echo "==== Osprey GPU check: $GPU_NAME ($((SECONDS - START)) s) ===="
    printf '%s\n' "${ROWS[@]}"
    if ((FAILED)); then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
}

GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
if [[ -z $GPU_NAME ]]; then
    GPU_NAME="no GPU"
    row "nvidia-smi" "FAIL (no NVIDIA GPU visible)"
    FAILED=1
    summary
    exit 1
fi
SANITIZER=$(command -v compute-sanitizer || true)
[[ -z $SANITIZER && -x /usr/local/cuda/bin/compute-sanitizer ]] &&
    SANITIZER=/usr/local/cuda/bin/compute-sanitizer

# ---- build ------------------------------------------------------------------
step "configure" "$LOGS/configure.log" \
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOSPREY_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=native
if ((STEP_RC == 0)); then
    step "build" "$LOGS/build.log" cmake --build "$BUILD" -j "$(nproc)"
    ((STEP_RC == 0)) && row "configure + build (sm native)" "PASS (${STEP_S}s)"
fi
if ((STEP_RC != 0)); then
    summary
    exit 1
fi

# ---- gpu-labelled tests --------------------------------------------------------
step "ctest -L gpu" "$LOGS/ctest.log" \
    ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 240
counts=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$LOGS/ctest.log" | tail -1)
skipped=$(grep -c '(Skipped)' "$LOGS/ctest.log")
if ((STEP_RC == 0)); then
    if ((skipped > 0)); then
        # On a GPU host a skipped GPU test means the GPU was not found.
        row "ctest -L gpu" "FAIL ($skipped skipped on a GPU host)"
        FAILED=1
    else
        row "ctest -L gpu" "PASS (${counts:-?})"
    fi
fi

# ---- memcheck ---------------------------------------------------------------------
CONFORMANCE=$BUILD/tests/unit/test_device_conformance_cuda
if [[ -z $SANITIZER ]]; then
    row "memcheck (conformance test)" "FAIL (compute-sanitizer not found)"
    FAILED=1
elif [[ ! -x $CONFORMANCE ]]; then
    row "memcheck (conformance test)" "FAIL ($CONFORMANCE missing)"
    FAILED=1
else
    step "memcheck (conformance test)" "$LOGS/memcheck.log" \
        "$SANITIZER" --tool memcheck --leak-check full --error-exitcode 1 \
        "$CONFORMANCE" --gtest_brief=1
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$LOGS/memcheck.log" | tail -1 | grep -Eo '[0-9]+$')
    ((STEP_RC == 0)) && row "memcheck (conformance test)" "PASS (${errors:-?} errors, ${STEP_S}s)"
fi

# ---- benchmarks --------------------------------------------------------------------
# result KIND KEY=VALUE... FIELD: FIELD of the RESULT line matching all keys.
result() {
    local log=$1 kind=$2 field=${!#}
    local keys=("${@:3:$#-3}")
    awk -v kind="$kind" -v field="$field" -v keys="${keys[*]}" '
        $1 == "RESULT" && $2 == kind {
            n = split(keys, want, " "); ok = 1
            for (i = 1; i <= n; i++) {
                found = 0
                for (j = 3; j <= NF; j++) if ($j == want[i]) found = 1
                if (!found) ok = 0
            }
            if (!ok) next
            for (j = 3; j <= NF; j++) {
                split($j, kv, "=")
                if (kv[1] == field) { print kv[2]; exit }
            }
        }' "$log"
}

H2D_LOG=$LOGS/bench_h2d.log
step "bench_h2d" "$H2D_LOG" "$BUILD/tests/gpu/bench_h2d"
if ((STEP_RC == 0)); then
    for bytes in 4096 1048576 16777216 268435456; do
        label=$(numfmt --to=iec-i --suffix=B "$bytes")
        row "H2D $label pinned / pageable GB/s" \
            "$(result "$H2D_LOG" h2d "bytes=$bytes" pinned_gbps) / $(result "$H2D_LOG" h2d "bytes=$bytes" pageable_gbps) ($(result "$H2D_LOG" h2d "bytes=$bytes" ratio)x)"
    done
    # Issue 4's bar: pinned at least 2x pageable for transfers >= 1 MiB.
    worst=$(awk '$1 == "RESULT" && $2 == "h2d" {
                  split($3, b, "="); split($6, r, "=")
                  if (b[2] >= 1048576 && (min == "" || r[2] < min)) min = r[2]
              } END { print min }' "$H2D_LOG")
    if awk -v w="${worst:-0}" 'BEGIN { exit !(w >= 2.0) }'; then
        row "H2D pinned >= 2x pageable (>= 1 MiB)" "PASS (worst ${worst}x)"
    else
        row "H2D pinned >= 2x pageable (>= 1 MiB)" "FAIL (worst ${worst:-?}x)"
        FAILED=1
    fi
fi

GEMM_LOG=$LOGS/bench_gemm.log
step "bench_gemm" "$GEMM_LOG" "$BUILD/tests/gpu/bench_gemm"
if ((STEP_RC == 0)); then
    row "GEMM 8192^3 TFLOP/s FP32 / TF32 / FP16" \
        "$(result "$GEMM_LOG" gemm prec=FP32 tflops) / $(result "$GEMM_LOG" gemm prec=TF32 tflops) / $(result "$GEMM_LOG" gemm prec=FP16 tflops)"
    for batch in 1 16 256; do
        cells=()
        for prec in FP32 TF32 FP16; do
            h=$(result "$GEMM_LOG" mlp "prec=$prec" "batch=$batch" hidden_us)
            o=$(result "$GEMM_LOG" mlp "prec=$prec" "batch=$batch" out_us)
            cells+=("$(awk -v h="$h" -v o="$o" 'BEGIN { printf "%.1f", h + o }')")
        done
        row "mlp b=$batch 64->64->10 us FP32/TF32/FP16" "${cells[0]} / ${cells[1]} / ${cells[2]}"
    done
fi

# ---- end to end: a large dense model over HTTP, GPU vs CPU ---------------------
E2E_LOG=$LOGS/e2e_dense.log
PYTHON=$ROOT/.venv/bin/python
[[ -x $PYTHON ]] || PYTHON=python3
step "e2e dense 4096-4096-4096-1000" "$E2E_LOG" "$PYTHON" "$ROOT/tests/gpu/e2e_dense.py" \
    --osprey "$BUILD/osprey" --load-client "$BUILD/tests/bench/load_client" --duration 4
if ((STEP_RC == 0)); then
    for batch in 1 64; do
        for model in dense_gpu dense_cpu; do
            row "e2e $model b=$batch p50 ms / infer/s" \
                "$(result "$E2E_LOG" e2e "model=$model" "batch=$batch" p50_ms) / $(result "$E2E_LOG" e2e "model=$model" "batch=$batch" infer_per_s)"
        done
        row "e2e dense_gpu b=$batch H2D/compute/D2H %" \
            "$(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" h2d_pct) / $(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" compute_pct) / $(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" d2h_pct)"
    done
fi

summary
exit $FAILED
