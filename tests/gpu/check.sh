#!/usr/bin/env bash
# GPU check for Osprey, for a machine with an NVIDIA GPU.
#
#   tests/gpu/check.sh [--dry-run] [build-dir | bundle-dir | bundle.tar.gz]
#
# With a build directory (default: build-gpu) it configures and builds for
# the local GPU (CMAKE_CUDA_ARCHITECTURES=native); that needs the Debian
# -dev packages of README.md. A GPU host with only the CUDA toolkit runs a
# bundle instead, made on any Linux x86-64 machine by tests/gpu/bundle.sh
# (programs + their non-CUDA shared libraries, no build needed here).
#
# Then it runs the gpu-labelled test programs (the CUDA tensor-op tests
# test_cuda_ops_*_gpu and the ONNX sessions' test_onnx_session_gpu_gpu among
# them), compute-sanitizer memcheck on the device conformance test and on a
# short run of those, the ONNX architectures end to end (e2e_onnx.py:
# ResNet-18 and BERT on the GPU against onnxruntime's CPU outputs, FP32,
# TF32 and FP16 tolerances, then infer/s at batch 1, 8, 64 with and without
# CUDA graphs, and at 8 and 64 with TF32 and FP16), and the benchmarks in
# tests/gpu/: H2D
# bandwidth pinned vs pageable (4 KiB..256 MiB) and GEMM TFLOP/s (FP32/TF32/
# FP16 at 8192^3 and at digits_mlp-like shapes), then an end-to-end HTTP
# run of a 4096-4096-4096-1000 dense model on the GPU vs the CPU
# (e2e_dense.py: p50, infer/s, share of H2D/compute/D2H), python models'
# GPU tensors through DLPack and CUDA IPC (e2e_python_dlpack.py: the
# checks of test_python_dlpack.py on the real GPU, 4 MiB outputs timed
# against numpy ones). Every step gets
# what is left of a 9-minute budget; the summary table is printed last.
# Logs go to <dir>/gpu-check/. Exit status 0 when every step passed.
#
# --dry-run tries the script and the programs on a host without a GPU: GPU
# tests may report skipped, memcheck and the GPU benchmarks are left out,
# and the end-to-end run places both models on the CPU.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DRY_RUN=0
if [[ ${1:-} == --dry-run ]]; then
    DRY_RUN=1
    shift
fi
TARGET=$(realpath -m "${1:-$ROOT/build-gpu}")
if [[ $TARGET == *.tar.gz ]]; then
    BUILD=${TARGET%.tar.gz}
    rm -rf "$BUILD"
    if ! mkdir -p "$BUILD" || ! tar -xzf "$TARGET" -C "$BUILD"; then
        echo "cannot unpack $TARGET" >&2
        exit 1
    fi
else
    BUILD=$TARGET
fi
BUNDLED=0
[[ -f $BUILD/BUNDLE ]] && BUNDLED=1
LOGS=$BUILD/gpu-check
BUDGET_S=540
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

# [STEP_CAP=S] step NAME LOG CMD...: runs CMD under the remaining budget
# (and at most S seconds), output to LOG. Sets STEP_RC and STEP_S; adds a
# FAIL/TIMEOUT row itself, not a PASS row (callers add a more informative
# one). The caps keep a slow step from starving the ones after it.
step() {
    local name=$1 log=$2
    shift 2
    local left
    left=$(time_left)
    if ((${STEP_CAP:-0} > 0 && STEP_CAP < left)); then left=$STEP_CAP; fi
    if ((left <= 0)); then
        STEP_RC=124
        row "$name" "NOT RUN (9-minute budget spent)"
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

# Libraries that ldd cannot find for PROGRAM, one soname per line.
missing_libs() { ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 == "not" { print $1 }'; }

# A bundle leaves the CUDA libraries (cudart, cuBLAS) to the host: when the
# loader does not find them, look where CUDA toolkits and the nvidia-* Python
# wheels put them and add those folders to LD_LIBRARY_PATH.
find_cuda_libs() {
    local program=$1 soname dir found
    local -a dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
        /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib /usr/lib/x86_64-linux-gnu)
    local site
    for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
        dirs+=("$site"/nvidia/*/lib)
    done
    for soname in $(missing_libs "$program"); do
        found=
        for dir in "${dirs[@]}"; do
            if [[ -e $dir/$soname ]]; then
                found=$dir
                break
            fi
        done
        [[ -z $found ]] && found=$(dirname "$(timeout 60 find / -xdev -name "$soname" \
            -not -path '/proc/*' 2>/dev/null | head -1)")
        [[ -n $found && $found != . ]] &&
            export LD_LIBRARY_PATH=$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    done
}

if ((DRY_RUN)); then
    GPU_NAME="dry run, no GPU needed"
else
    GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    if [[ -z $GPU_NAME ]]; then
        GPU_NAME="no GPU"
        row "nvidia-smi" "FAIL (no NVIDIA GPU visible)"
        FAILED=1
        summary
        exit 1
    fi
fi
SANITIZER=$(command -v compute-sanitizer || true)
[[ -z $SANITIZER && -x /usr/local/cuda/bin/compute-sanitizer ]] &&
    SANITIZER=/usr/local/cuda/bin/compute-sanitizer

# ---- build, or the bundle's programs -------------------------------------------
if ((BUNDLED)); then
    mapfile -t GPU_TESTS <"$BUILD/gpu-tests.txt"
    for program in osprey libosprey_cuda.so "${GPU_TESTS[@]}"; do find_cuda_libs "$BUILD/$program"; done
    missing=$(for p in osprey libosprey_cuda.so tests/gpu/bench_h2d tests/gpu/bench_gemm tests/gpu/bench_tensor_ops tests/bench/load_client \
        "${GPU_TESTS[@]}"; do missing_libs "$BUILD/$p"; done | sort -u | tr '\n' ' ' | sed 's/ $//')
    if [[ -n $missing ]]; then
        row "bundle libraries" "FAIL (not found: $missing)"
        FAILED=1
        summary
        exit 1
    fi
    row "bundle ($(sed -n 's/^commit: //p' "$BUILD/BUNDLE" | cut -c1-12))" \
        "PASS ($(sed -n 's/^cuda code: //p' "$BUILD/BUNDLE"))"
else
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
    mapfile -t GPU_TESTS < <("$ROOT/tests/gpu/list_gpu_tests.py" "$BUILD")
fi

# ---- gpu-labelled tests ----------------------------------------------------------
# Each program runs whole (they are GoogleTest programs); on a GPU host a
# skipped case means the GPU was not found, which fails the check.
for program in "${GPU_TESTS[@]}"; do
    name=${program##*/}
    log=$LOGS/$name.log
    step "$name" "$log" "$BUILD/$program"
    passed=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$')
    skipped=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$log" | grep -Eo '[0-9]+$')
    if ((STEP_RC == 0)); then
        if ((${skipped:-0} > 0 && !DRY_RUN)); then
            row "$name" "FAIL (${skipped} skipped on a GPU host)"
            FAILED=1
        else
            row "$name" "PASS (${passed:-0} passed, ${skipped:-0} skipped)"
        fi
    fi
done

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

if ((DRY_RUN)); then
    row "memcheck, bench_h2d, bench_gemm, bench_tensor_ops" "NOT RUN (dry run)"
else
    # ---- memcheck ---------------------------------------------------------------------
    CONFORMANCE=$BUILD/tests/unit/test_device_conformance_cuda
    if [[ -z $SANITIZER ]]; then
        row "memcheck (conformance test)" "FAIL (compute-sanitizer not found)"
        FAILED=1
    elif [[ ! -x $CONFORMANCE ]]; then
        row "memcheck (conformance test)" "FAIL ($CONFORMANCE missing)"
        FAILED=1
    else
        STEP_CAP=180 step "memcheck (conformance test)" "$LOGS/memcheck.log" \
            "$SANITIZER" --tool memcheck --leak-check full --error-exitcode 1 \
            "$CONFORMANCE" --gtest_brief=1
        errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$LOGS/memcheck.log" | tail -1 | grep -Eo '[0-9]+$')
        ((STEP_RC == 0)) && row "memcheck (conformance test)" "PASS (${errors:-?} errors, ${STEP_S}s)"
    fi

    # ---- memcheck over the CUDA op tests and the ONNX sessions --------------------------
    # One step for all of them (a short run: each program once, brief
    # output), capped so that the end-to-end runs keep their time.
    OP_TESTS=()
    for program in "${GPU_TESTS[@]}"; do
        case ${program##*/} in test_cuda_ops_*_gpu | test_onnx_session_gpu_gpu) OP_TESTS+=("$BUILD/$program") ;; esac
    done
    if [[ -n $SANITIZER && ${#OP_TESTS[@]} -gt 0 ]]; then
        STEP_CAP=150 step "memcheck (op tests, ONNX sessions)" "$LOGS/memcheck_ops.log" \
            bash -c 'rc=0; s=$1; shift; for p; do echo "== $p"; "$s" --tool memcheck --leak-check full \
                --error-exitcode 1 "$p" --gtest_brief=1 || rc=1; done; exit $rc' _ "$SANITIZER" "${OP_TESTS[@]}"
        ((STEP_RC == 0)) && row "memcheck (${#OP_TESTS[@]} op/session programs)" "PASS (${STEP_S}s)"
    fi

    # ---- benchmarks --------------------------------------------------------------------
    H2D_LOG=$LOGS/bench_h2d.log
    STEP_CAP=60 step "bench_h2d" "$H2D_LOG" "$BUILD/tests/gpu/bench_h2d"
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
    STEP_CAP=90 step "bench_gemm" "$GEMM_LOG" "$BUILD/tests/gpu/bench_gemm"
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

    OPS_LOG=$LOGS/bench_tensor_ops.log
    STEP_CAP=60 step "bench_tensor_ops" "$OPS_LOG" "$BUILD/tests/gpu/bench_tensor_ops"
    if ((STEP_RC == 0)); then
        for op in copy relu gelu add_same add_row where transpose slice gather pad cumsum_cols cumsum_rows; do
            row "op $op GB/s (% of D2D copy)" \
                "$(result "$OPS_LOG" ops "op=$op" gbps) ($(result "$OPS_LOG" ops "op=$op" pct_copy)%)"
        done
    fi

fi

PYTHON=$ROOT/.venv/bin/python
[[ -x $PYTHON ]] || PYTHON=python3

# ---- idle RSS and start to ready with the bundled models (issue 15) -------------
# On a GPU host osprey loads its CUDA device module (libosprey_cuda.so);
# without a GPU it stays under 30 MiB and 0.03 s.
START_LOG=$LOGS/start_rss.log
step "start to ready + idle RSS" "$START_LOG" "$PYTHON" "$ROOT/tests/bench/start_rss.py" \
    --osprey "$BUILD/osprey" --models "$ROOT/models" --repeat 3 --result
if ((STEP_RC == 0)); then
    row "osprey start to ready s / idle RSS MiB (models/)" \
        "$(result "$START_LOG" start_rss ready_s) / $(result "$START_LOG" start_rss rss_mib)"
fi

# ---- end to end: a large dense model over HTTP, GPU vs CPU ---------------------
E2E_LOG=$LOGS/e2e_dense.log
E2E_ARGS=(--duration 4)
((DRY_RUN)) && E2E_ARGS=(--duration 1 --dry-run-on-cpu)
step "e2e dense 4096-4096-4096-1000" "$E2E_LOG" "$PYTHON" "$ROOT/tests/gpu/e2e_dense.py" \
    --osprey "$BUILD/osprey" --load-client "$BUILD/tests/bench/load_client" "${E2E_ARGS[@]}"
if ((STEP_RC == 0)); then
    row "e2e dense_gpu = dense_cpu (max |diff|)" \
        "$(awk '$1 == "CHECK" { split($4, v, "="); printf "%s ", v[2] }' "$E2E_LOG")"
    for batch in 1 64; do
        for model in dense_gpu dense_cpu; do
            row "e2e $model b=$batch p50 ms / infer/s" \
                "$(result "$E2E_LOG" e2e "model=$model" "batch=$batch" p50_ms) / $(result "$E2E_LOG" e2e "model=$model" "batch=$batch" infer_per_s)"
        done
        row "e2e dense_gpu b=$batch H2D/compute/D2H %" \
            "$(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" h2d_pct) / $(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" compute_pct) / $(result "$E2E_LOG" e2e model=dense_gpu "batch=$batch" d2h_pct)"
    done
fi

# ---- python models: GPU tensors through DLPack (CUDA IPC stub <-> server) -------
# The stubs load the CUDA runtime the server's CUDA module links. A dry run
# uses the fake GPUs where the build has them (osprey_fakegpu).
DLPACK_LOG=$LOGS/e2e_python_dlpack.log
DLPACK_ARGS=(--osprey "$BUILD/osprey")
((DRY_RUN)) && DLPACK_ARGS=(--osprey "$BUILD/osprey_fakegpu"
    --cuda-runtime "$BUILD/libosprey_fake_cudart.so" --repeat 5)
if ((DRY_RUN)) && [[ ! -x $BUILD/osprey_fakegpu ]]; then
    row "python DLPack GPU tensors" "NOT RUN (dry run without osprey_fakegpu)"
else
    STEP_CAP=90 step "python DLPack GPU tensors" "$DLPACK_LOG" "$PYTHON" \
        "$ROOT/tests/gpu/e2e_python_dlpack.py" "${DLPACK_ARGS[@]}"
    if ((STEP_RC == 0)); then
        row "python DLPack GPU tensors" "PASS ($(grep -c '^CHECK python_dlpack .* ok=1' "$DLPACK_LOG") checks)"
        row "python 4 MiB output p50 ms GPU tensor / numpy" \
            "$(result "$DLPACK_LOG" python_dlpack mib=4 gpu_p50_ms) / $(result "$DLPACK_LOG" python_dlpack mib=4 numpy_p50_ms)"
    elif [[ -f $DLPACK_LOG ]]; then
        grep '^CHECK python_dlpack .* ok=0' "$DLPACK_LOG" | head -5 >&2
    fi
fi

# ---- ONNX architectures end to end, with and without CUDA graphs ----------------
ONNX_LOG=$LOGS/e2e_onnx.log
ONNX_ARGS=(--duration 2)
((DRY_RUN)) && ONNX_ARGS=(--dry-run --archs mlp)
STEP_CAP=210 step "e2e onnx (resnet18, bert)" "$ONNX_LOG" "$PYTHON" "$ROOT/tests/gpu/e2e_onnx.py" \
    --osprey "$BUILD/osprey" --load-client "$BUILD/tests/bench/load_client" "${ONNX_ARGS[@]}"
if ((STEP_RC == 3)); then
    row "e2e onnx (resnet18, bert)" "NOT RUN ($(tail -1 "$ONNX_LOG"))"
elif ((STEP_RC == 0)); then
    row "e2e onnx outputs vs onnxruntime (FP32/TF32/FP16)" \
        "PASS ($(grep -c '^CHECK onnx .* ok=1$' "$ONNX_LOG") checks)"
    for arch in $(awk '$1 == "RESULT" && $2 == "onnx" { split($3, a, "="); print a[2] }' "$ONNX_LOG" | sort -u); do
        for batch in $(awk -v arch="arch=$arch" '$1 == "RESULT" && $3 == arch { split($5, b, "="); print b[2] }' \
            "$ONNX_LOG" | sort -nu); do
            row "onnx $arch b=$batch infer/s graphs off / on" \
                "$(result "$ONNX_LOG" onnx "arch=$arch" graphs=off "batch=$batch" infer_per_s) / $(result "$ONNX_LOG" onnx "arch=$arch" graphs=on "batch=$batch" infer_per_s)"
            [[ -z $(result "$ONNX_LOG" onnx_prec "arch=$arch" prec=fp16 "batch=$batch" infer_per_s) ]] && continue
            row "onnx $arch b=$batch infer/s FP32 / TF32 / FP16" \
                "$(result "$ONNX_LOG" onnx "arch=$arch" graphs=off "batch=$batch" infer_per_s) / $(result "$ONNX_LOG" onnx_prec "arch=$arch" prec=tf32 "batch=$batch" infer_per_s) / $(result "$ONNX_LOG" onnx_prec "arch=$arch" prec=fp16 "batch=$batch" infer_per_s)"
        done
    done
elif [[ -f $ONNX_LOG ]]; then
    grep '^CHECK onnx .* ok=0$' "$ONNX_LOG" | head -5 >&2
fi

summary
exit $FAILED
