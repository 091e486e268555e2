#!/bin/sh
# docker/check.sh: proves docker/Dockerfile.cpu without a container daemon.
#
#   sudo docker/check.sh            (root: debootstrap, chroot, unshare)
#
# 1. parses the Dockerfile with dockerfile-parse (PyPI, in .venv);
# 2. makes a Debian 12 minbase root with debootstrap from Debian's packages
#    (cached in $OSPREY_CHECK_DIR/base-bookworm; the stand-in for
#    debian:bookworm-slim, with the same dpkg excludes of docs and locales);
# 3. replays each stage's RUN lines, COPYs (with .dockerignore and
#    --from=build), WORKDIR and ENV in a copy of that root: the build stage
#    compiles osprey there, the runtime stage installs the shared libraries
#    and takes the program from the build stage's root;
# 4. starts the server in the runtime root as `docker run` would: PID 1 of
#    new PID, mount and network namespaces (its own loopback, so the
#    image's ports 8000-8002 are free whatever runs on this machine), the
#    image's USER, WORKDIR, ENTRYPOINT + CMD unchanged, a fresh directory
#    on each VOLUME; from outside the root (in its network namespace, on
#    loopback) it calls the HTTP and gRPC health endpoints
#    (grpc.health.v1 too), one KServe infer over HTTP and one over gRPC
#    with tritonclient, and /metrics; runs the HEALTHCHECK
#    command inside the root; sends the STOPSIGNAL while a request is half
#    sent, checks that the ports close, that request still gets an answer
#    on its connection, and the server exits 0;
# 5. prints the runtime stage's size.
#
# Takes 6-10 minutes on 2 cores (the build stage compiles the whole tree);
# not part of `make test` (that runs tests/integration/test_deploy_lint.py).
# Environment: OSPREY_CHECK_DIR (default /var/tmp/osprey-check),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), DOCKERFILE
# (default docker/Dockerfile.cpu), KEEP=1 keeps the stage roots.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=${OSPREY_CHECK_DIR:-/var/tmp/osprey-check}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
dockerfile=${DOCKERFILE:-$root/docker/Dockerfile.cpu}
python=${PYTHON:-$root/.venv/bin/python}

if [ "$(id -u)" != 0 ]; then
    echo "check.sh: needs root (debootstrap, chroot, mount namespaces)" >&2
    exit 2
fi
for tool in debootstrap unshare chroot; do
    command -v "$tool" >/dev/null || {
        echo "check.sh: $tool is missing (apt-get install debootstrap)" >&2
        exit 2
    }
done
"$python" -c 'import dockerfile_parse, tritonclient.grpc, tritonclient.http' || {
    echo "check.sh: $python lacks dockerfile-parse or tritonclient" \
         "(make venv)" >&2
    exit 2
}

mkdir -p "$work"
base=$work/base-bookworm
if [ ! -f "$base/.complete" ]; then
    rm -rf "$base"
    debootstrap --variant=minbase bookworm "$base" "$mirror"
    touch "$base/.complete"
fi
# What debian:bookworm-slim leaves out, so that sizes compare: docs,
# manuals and locales (dpkg excludes), apt's caches after each install.
cat > "$base/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
cat > "$base/etc/apt/apt.conf.d/slim-clean" <<EOF
DPkg::Post-Invoke { "$clean"; };
APT::Update::Post-Invoke { "$clean"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
find "$base/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
rm -rf "$base"/usr/share/man/* "$base"/usr/share/info/* \
       "$base"/usr/share/locale/* "$base"/var/cache/apt/archives/*.deb \
       "$base"/var/cache/apt/*.bin "$base"/var/lib/apt/lists/*

exec "$python" "$here/check_chroot.py" --dockerfile "$dockerfile" \
    --context "$root" --base "$base" --work "$work" ${KEEP:+--keep}
