#!/bin/sh
# The ctest fuzz_build: configures a clang build of the repository in its
# own folder with the libFuzzer targets on, and builds them all
# (osprey_fuzz_all). Fails when clang cannot link libFuzzer, when CMake
# cannot configure the fuzz targets, or when any of them does not build.
# Build type None (no -O, no -g): it only has to compile and link. Cold
# (no ccache) on the project's 2-core machine: 39 s of user time, 82 s of
# wall time under load, where the optimised build took 144 s of user time.
#
# Usage: check_build.sh SOURCE_DIR BUILD_DIR CLANG CLANGXX [CMAKE_ARG...]
set -eu
src=$1 bin=$2 cc=$3 cxx=$4
shift 4
CC=$cc CXX=$cxx cmake -S "$src" -B "$bin" -DOSPREY_CUDA=OFF -DOSPREY_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=None "$@"
cmake --build "$bin" -j "$(nproc)" --target osprey_fuzz_all
