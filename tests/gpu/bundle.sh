#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything tests/gpu/check.sh runs, so
# that a GPU host with only the CUDA toolkit (no Debian -dev packages, no
# package registry) can run the check without building:
#
#   tests/gpu/bundle.sh                builds in build-gpu/, writes
#                                      build-gpu/bundle.tar.gz
#   ... then on the GPU host, from the repository root (carrying
#   build-gpu/bundle.tar.gz there):
#   tests/gpu/check.sh build-gpu/bundle.tar.gz
#
# The bundle holds only what runs, from a Release build with OSPREY_CUDA=ON for the default
# architectures (sm_80, sm_90 + PTX) holding the server, the gpu-labelled
# tests (listed in gpu-tests.txt), the GPU benchmarks and the load client,
# plus lib/ with the shared libraries they need that a bare CUDA image may
# lack. Left out of lib/: the C runtime (glibc, libstdc++, libgcc_s), which
# every host has in a newer version, and the CUDA libraries (cudart, cuBLAS),
# which must match the host's driver and are found there by check.sh.
# The programs find lib/ through their RUNPATH ($ORIGIN-relative), so
# nothing else on the host (its Python, say) sees these libraries.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build-gpu
DIR=$BUILD/bundle
PROGRAMS=(osprey libosprey_cuda.so tests/gpu/bench_h2d tests/gpu/bench_gemm tests/gpu/bench_tensor_ops tests/bench/load_client)
MAX_MIB=48 # the device tool carries at most 64 MiB with the working tree

# shellcheck disable=SC2016 # $ORIGIN is for the loader, not the shell
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOSPREY_CUDA=ON \
    -DOSPREY_WERROR=ON '-DCMAKE_BUILD_RPATH=$ORIGIN/lib;$ORIGIN/../../lib' >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target \
    osprey osprey_cuda_module bench_h2d bench_gemm bench_tensor_ops load_client test_device_conformance_cuda
# Every gpu-labelled test program, as ctest knows them after a build.
mapfile -t GPU_TESTS < <("$ROOT/tests/gpu/list_gpu_tests.py" "$BUILD")
cmake --build "$BUILD" -j "$(nproc)" --target "${GPU_TESTS[@]##*/}"

rm -rf "$DIR"
mkdir -p "$DIR/lib"
printf '%s\n' "${GPU_TESTS[@]}" >"$DIR/gpu-tests.txt"
for program in "${PROGRAMS[@]}" "${GPU_TESTS[@]}"; do
    mkdir -p "$(dirname "$DIR/$program")"
    cp "$BUILD/$program" "$DIR/$program"
done
for program in "${PROGRAMS[@]}" "${GPU_TESTS[@]}"; do
    ldd "$DIR/$program" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r soname path; do
    case $soname in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
        libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | libcudart.so.* | \
        libcublas*.so.* | libnv*.so.*) ;;
    *) cp -L "$path" "$DIR/lib/$soname" ;;
    esac
done

{
    echo "Osprey GPU check bundle (tests/gpu/bundle.sh)"
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "built: $(date -u +%FT%TZ) on $(uname -m), nvcc $(nvcc --version | grep -Eo 'release [0-9.]+')"
    # nvcc's targets, e.g. "sm_80 sm_90 compute_90" (compute_* = PTX).
    echo "cuda code: $(grep -Eo 'code=\[[^]]*\]' "$BUILD/cuda/CMakeFiles/osprey_cuda.dir/flags.make" |
        sed 's/^code=\[//; s/\]$//' | tr ',' '\n' | sort -u | tr '\n' ' ' | sed 's/ $//')"
} >"$DIR/BUNDLE"

# One compressed file travels (OpenBLAS alone is 35 MiB unpacked, 13 MiB packed).
tar -czf "$BUILD/bundle.tar.gz" -C "$DIR" .
size_kib=$(du -k "$BUILD/bundle.tar.gz" | cut -f1)
echo "bundle $BUILD/bundle.tar.gz: $((size_kib / 1024)) MiB ($(ls "$DIR/lib" | wc -l) libraries in lib/)"
if ((size_kib > MAX_MIB * 1024)); then
    echo "bundle is over ${MAX_MIB} MiB" >&2
    exit 1
fi
