#!/bin/bash
# Builds Triton's C++ identity backend (release branch r24.10, the branch of
# the tritonserver 2.51 that the nvidia-pytriton wheel ships) for
# peer_bench.py --triton-identity-backend. See TRITON_IDENTITY.md.
#
#   tests/bench/build_triton_identity.sh OUTDIR            # clones from GitHub
#   tests/bench/build_triton_identity.sh OUTDIR SRCDIR     # offline: SRCDIR holds
#       git repositories identity_backend, backend, core and common, each
#       with a branch r24.10 (e.g. made by `git clone -b r24.10 URL`)
#
# Leaves OUTDIR/libtriton_identity.so. Needs git, cmake, g++ and Debian's
# rapidjson-dev, googletest and patchelf.
set -euo pipefail
[ $# -ge 1 ] || { sed -n 2,12p "$0"; exit 2; }
OUT=$(realpath -m "$1")
SRC=${2:-}
TAG=r24.10
REPOS="identity_backend backend core common"
mkdir -p "$OUT/src"
for r in $REPOS; do
    if [ ! -d "$OUT/src/$r" ]; then
        from=${SRC:+$(realpath "$SRC")/$r}
        git clone -q -b "$TAG" "${from:-https://github.com/triton-inference-server/$r}" "$OUT/src/$r"
    fi
    echo "$r: $(git -C "$OUT/src/$r" rev-parse HEAD) ($TAG)"
done
rm -rf "$OUT/build" && mkdir -p "$OUT/build"
# common always adds its tests, which fetch googletest: Debian's sources
# stand in for that download.
cmake -S "$OUT/src/identity_backend" -B "$OUT/build" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$OUT/install" \
    -DTRITON_ENABLE_GPU=OFF \
    -DTRITON_COMMON_REPO_TAG=$TAG -DTRITON_CORE_REPO_TAG=$TAG \
    -DTRITON_BACKEND_REPO_TAG=$TAG \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$OUT/src/common" \
    -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$OUT/src/core" \
    -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$OUT/src/backend" \
    -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest -Wno-dev >/dev/null
make -C "$OUT/build" -j"$(nproc)" install >/dev/null
# The backend links core's stub libtritonserver.so, but the wheel renamed
# its library (libtritonserver-<hash>.so): without the stub's NEEDED entry
# and the build tree's RUNPATH, the TRITONSERVER_* symbols bind to the
# library the tritonserver process has already loaded.
cp "$OUT/install/backends/identity/libtriton_identity.so" "$OUT/"
patchelf --remove-needed libtritonserver.so "$OUT/libtriton_identity.so"
patchelf --remove-rpath "$OUT/libtriton_identity.so"
echo "$OUT/libtriton_identity.so"
