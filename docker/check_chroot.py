"""Builds a Dockerfile's stages in Debian chroots and serves from the last.

Run by docker/check.sh (which makes the debootstrap base root); see there
for what is checked. Only what Osprey's Dockerfile.cpu uses is replayed:
FROM debian:bookworm-slim, RUN (shell and exec form), COPY (context with
.dockerignore, --from=STAGE), WORKDIR, ENV, ARG defaults, USER; the rest
(VOLUME, EXPOSE, STOPSIGNAL, HEALTHCHECK, ENTRYPOINT, CMD) is the runtime
configuration `serve` applies. Anything else fails loudly rather than
being skipped.
"""

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from dockerfile_parse import DockerfileParser

BASE_IMAGE = "debian:bookworm-slim"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What build_stage replays (test_deploy_lint.py holds Dockerfile.cpu to it).
REPLAYED_INSTRUCTIONS = {"ARG", "ENV", "WORKDIR", "USER", "RUN", "COPY",
                         "VOLUME", "EXPOSE"}
CONFIG_INSTRUCTIONS = {
    "VOLUME", "EXPOSE", "STOPSIGNAL", "HEALTHCHECK", "ENTRYPOINT", "CMD",
    "LABEL",
}


def log(msg):
    print(f"check: {msg}", flush=True)


class Stage:
    def __init__(self, name, base):
        self.name = name
        self.base = base
        self.instructions = []  # (instruction, value, line)
        self.env = {"PATH": DEFAULT_PATH}
        self.workdir = "/"
        self.user = None
        self.config = {}  # runtime configuration instructions, last wins
        self.volumes = []
        self.ports = []


def parse_stages(dockerfile):
    """The stages of `dockerfile`, in order, from dockerfile-parse."""
    with open(dockerfile, "rb") as f:
        parser = DockerfileParser(fileobj=f)
        structure = parser.structure
    stages = []
    for item in structure:
        instr, value = item["instruction"], item["value"]
        if instr == "COMMENT":
            continue
        if instr == "FROM":
            words = value.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" \
                else str(len(stages))
            stages.append(Stage(name, words[0]))
            continue
        if not stages:
            if instr == "ARG":
                continue
            raise SystemExit(f"{instr} before FROM is not replayed")
        stages[-1].instructions.append((instr, value, item["startline"] + 1))
    return stages


def dockerignore_patterns(context):
    path = Path(context) / ".dockerignore"
    if not path.exists():
        return []
    pats = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            if line.startswith("!"):
                raise SystemExit(".dockerignore exceptions (!) are not replayed")
            pats.append(line.strip("/"))
    return pats


def ignored(rel, patterns):
    """Whether the context path `rel` (or a folder above it) is ignored."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pat in patterns:
            if fnmatch.fnmatchcase(prefix, pat):
                return True
            if pat.startswith("**/") and fnmatch.fnmatchcase(prefix, pat[3:]):
                return True
    return False


def copy_tree_filtered(src, dst, context, patterns):
    """Copies src (a folder of the context) into dst, skipping ignored paths."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, context)
        keep = []
        for d in dirnames:
            rel = os.path.normpath(os.path.join(rel_dir, d))
            if ignored(rel, patterns):
                continue
            full = os.path.join(dirpath, d)
            target = os.path.join(dst, os.path.relpath(full, src))
            if os.path.islink(full):
                os.symlink(os.readlink(full), target)
                continue
            os.makedirs(target, exist_ok=True)
            keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if ignored(rel, patterns):
                continue
            full = os.path.join(dirpath, name)
            target = os.path.join(dst, os.path.relpath(full, src))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(full, target, follow_symlinks=False)


def in_root(rootfs, path):
    return os.path.join(rootfs, path.lstrip("/"))


def substitute(value, env):
    """$VAR and ${VAR} from the stage's ENV and ARG values."""
    out = value
    for k, v in sorted(env.items(), key=lambda kv: -len(kv[0])):
        out = out.replace("${" + k + "}", v).replace("$" + k, v)
    return out


def chroot_command(rootfs, argv, env, workdir, user):
    """argv run in rootfs, in its own mount namespace with /proc and /dev."""
    userspec = [f"--userspec={user}"] if user else []
    script = ('set -e; R="$1"; shift; mount -t proc proc "$R/proc"; '
              'mount --rbind /dev "$R/dev"; exec chroot "$@"')
    inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir] + argv
    envv = [f"{k}={v}" for k, v in env.items()]
    return (["unshare", "--mount", "--fork", "--kill-child", "--",
             "/bin/sh", "-c", script, "sh", rootfs] + userspec +
            [rootfs, "/usr/bin/env", "-i"] + envv + inner)


def exec_form(value):
    value = value.strip()
    if value.startswith("["):
        return json.loads(value)
    return None


def build_stage(stage, rootfs, base, context, roots):
    log(f"stage {stage.name}: {stage.base} -> {rootfs}")
    if stage.base != BASE_IMAGE:
        raise SystemExit(f"stage {stage.name}: only {BASE_IMAGE} is replayed")
    if os.path.exists(rootfs):
        shutil.rmtree(rootfs)
    subprocess.run(["cp", "-a", base, rootfs], check=True)
    os.remove(os.path.join(rootfs, ".complete"))
    shutil.copy("/etc/resolv.conf", in_root(rootfs, "/etc/resolv.conf"))
    Path(in_root(rootfs, "/etc/hosts")).write_text(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    patterns = dockerignore_patterns(context)
    args = {}
    for instr, value, line in stage.instructions:
        value = substitute(value, {**args, **stage.env})
        if instr == "ARG":
            name, _, default = value.partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif instr == "ENV":
            for word in shlex.split(value):
                k, _, v = word.partition("=")
                stage.env[k] = v
        elif instr == "WORKDIR":
            stage.workdir = os.path.join(stage.workdir, value)
            os.makedirs(in_root(rootfs, stage.workdir), exist_ok=True)
        elif instr == "USER":
            stage.user = value
        elif instr == "RUN":
            argv = exec_form(value) or ["/bin/sh", "-c", value]
            log(f"  line {line}: RUN {value[:100]}")
            env = {"HOME": "/root", **stage.env}
            subprocess.run(chroot_command(rootfs, argv, env, stage.workdir,
                                          stage.user), check=True)
        elif instr == "COPY":
            words = exec_form(value) or shlex.split(value)
            src_root = context
            flags = [w for w in words if w.startswith("--")]
            words = [w for w in words if not w.startswith("--")]
            for flag in flags:
                if flag.startswith("--from="):
                    src_root = roots[flag[len("--from="):]]
                else:
                    raise SystemExit(f"line {line}: COPY {flag} not replayed")
            *sources, dest = words
            dest_abs = os.path.join(stage.workdir, dest)
            log(f"  line {line}: COPY {' '.join(flags + sources)} -> {dest_abs}")
            for src in sources:
                if src_root == context:
                    full = os.path.normpath(os.path.join(context, src))
                else:
                    full = in_root(src_root, src)
                target = in_root(rootfs, dest_abs)
                if os.path.isdir(full):
                    os.makedirs(target, exist_ok=True)
                    pats = patterns if src_root == context else []
                    copy_tree_filtered(full, target, src_root if src_root ==
                                       context else full, pats)
                else:
                    if dest.endswith("/") or len(sources) > 1:
                        os.makedirs(target, exist_ok=True)
                        target = os.path.join(target, os.path.basename(full))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy2(full, target)
        elif instr == "VOLUME":
            stage.volumes += exec_form(value) or value.split()
        elif instr == "EXPOSE":
            stage.ports += [int(p.split("/")[0]) for p in value.split()]
        elif instr in CONFIG_INSTRUCTIONS:
            stage.config[instr] = value
        else:
            raise SystemExit(f"line {line}: {instr} is not replayed")


def du_bytes(path):
    out = subprocess.run(["du", "-sb", "--one-file-system", path],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])


def find_child(pid, deadline):
    """The process that unshare --fork started (PID 1 of its namespace)."""
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            return None
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    return None


def serve_and_probe(stage, rootfs, work, keep_logs):
    entry = exec_form(stage.config.get("ENTRYPOINT", "[]"))
    cmd = exec_form(stage.config.get("CMD", "[]"))
    if entry is None or cmd is None:
        raise SystemExit("ENTRYPOINT and CMD must be in exec form")
    user = stage.user or "0:0"
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise SystemExit("USER must be numeric uid:gid (runAsNonRoot checks it)")
    if int(uid) == 0:
        raise SystemExit("the image runs as root")
    # Each VOLUME gets a fresh directory, owned as the image's folder is
    # (docker copies the image's content and owner into a new volume).
    mounts = []
    for i, vol in enumerate(stage.volumes):
        host = os.path.join(work, f"volume{i}")
        shutil.rmtree(host, ignore_errors=True)
        os.makedirs(host)
        st = os.stat(in_root(rootfs, vol))
        os.chown(host, st.st_uid, st.st_gid)
        os.chmod(host, st.st_mode & 0o7777)
        mounts.append((host, vol))
    mount_cmds = "".join(f'mount --bind "{h}" "$R{v}"; ' for h, v in mounts)
    script = ('set -e; R="$1"; shift; ip link set lo up; '
              'mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"; '
              + mount_cmds + 'exec chroot "$@"')
    env = {"HOME": "/var/lib/osprey", "HOSTNAME": "osprey-check", **stage.env}
    envv = [f"{k}={v}" for k, v in env.items()]
    inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', stage.workdir] + entry + cmd
    argv = (["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child",
             "--", "/bin/sh", "-c", script, "sh", rootfs,
             f"--userspec={uid}:{gid}", "--groups=", rootfs,
             "/usr/bin/env", "-i"] + envv + inner)
    log_path = os.path.join(work, "server.log")
    log(f"serve: {' '.join(entry + cmd)} as {uid}:{gid} in {stage.workdir}")
    with open(log_path, "w") as server_log:
        proc = subprocess.Popen(argv, stdout=server_log,
                                stderr=subprocess.STDOUT)
    server_pid = None
    try:
        server_pid = find_child(proc.pid, time.monotonic() + 30)
        if server_pid is None:
            raise SystemExit("the server did not start: " +
                             Path(log_path).read_text())
        probe = [sys.executable, os.path.abspath(__file__), "probe",
                 "--ports", ",".join(map(str, stage.ports))]
        ns = ["nsenter", f"--target={server_pid}", "--net"]
        log("probe (in the server's network namespace, outside the root)")
        r = subprocess.run(ns + probe)
        if r.returncode != 0:
            raise SystemExit("probe failed; server log:\n" +
                             Path(log_path).read_text())
        hc = stage.config.get("HEALTHCHECK", "")
        hc_cmd = hc.split(" CMD ", 1)[1].strip() if " CMD " in hc else None
        if hc_cmd:
            hc_argv = exec_form(hc_cmd) or ["/bin/sh", "-c", hc_cmd]
            r = subprocess.run(ns + ["--mount", "chroot",
                                     f"--userspec={uid}:{gid}", "--groups=",
                                     rootfs] + hc_argv)
            log(f"HEALTHCHECK {' '.join(hc_argv)}: exit {r.returncode}")
            if r.returncode != 0:
                raise SystemExit("HEALTHCHECK failed")
        for host, vol in mounts:
            files = sorted(os.listdir(host))
            owners = {os.stat(os.path.join(host, f)).st_uid for f in files}
            log(f"VOLUME {vol}: {files} owned by {sorted(owners)}")
            if not files or owners != {int(uid)}:
                raise SystemExit(f"the server wrote nothing of its own on {vol}")
        sig_name = stage.config.get("STOPSIGNAL", "SIGTERM")
        sig = getattr(signal, sig_name if sig_name.startswith("SIG")
                      else "SIG" + sig_name)
        # A client in the middle of sending a request when the signal
        # comes: it must get an answer, not a reset.
        drain = subprocess.Popen(
            ns + [sys.executable, os.path.abspath(__file__), "drain"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if drain.stdout.readline().strip() != "sending":
            raise SystemExit("the drain client could not start its request")
        start = time.monotonic()
        os.kill(server_pid, sig)
        drain.stdin.write("signalled\n")
        drain.stdin.flush()
        for line in drain.stdout:
            log(f"  drain: {line.rstrip()}")
        if drain.wait() != 0:
            raise SystemExit("the request in flight at the stop signal "
                             "got no answer; server log:\n" +
                             Path(log_path).read_text())
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"no exit within 120 s of {sig_name}")
        took = time.monotonic() - start
        text = Path(log_path).read_text()
        log(f"{sig_name} to PID 1 of the container: exit {rc} after {took:.2f} s")
        if rc != 0 or "Waiting for in-flight requests to complete." not in text:
            raise SystemExit("no orderly stop; server log:\n" + text)
    finally:
        if proc.poll() is None:
            if server_pid:
                os.kill(server_pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
    tail = Path(log_path).read_text().splitlines()[-4:]
    for line in tail:
        log(f"  server: {line}")


def probe(ports):
    """Health, one infer over HTTP and over gRPC, /metrics: on loopback."""
    import socket
    import urllib.request

    import grpc
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    deadline = time.monotonic() + 120
    url = "http://127.0.0.1:8000/v2/health/ready"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("not ready within 120 s")
        time.sleep(0.1)
    for port in ports:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    print(f"probe: ready; EXPOSEd ports {ports} accept connections")

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)

    http = httpclient.InferenceServerClient("127.0.0.1:8000")
    assert http.is_server_live() and http.is_server_ready()
    assert http.is_model_ready("simple")
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    res = http.infer("simple", inputs)
    assert (res.as_numpy("OUTPUT0") == a + b).all()
    assert (res.as_numpy("OUTPUT1") == a - b).all()
    print("probe: HTTP live, ready, model ready, KServe infer 'simple' OK")

    g = grpcclient.InferenceServerClient("127.0.0.1:8001")
    assert g.is_server_live() and g.is_server_ready()
    ginputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
               grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    ginputs[0].set_data_from_numpy(a)
    ginputs[1].set_data_from_numpy(b)
    gres = g.infer("simple", ginputs)
    assert (gres.as_numpy("OUTPUT0") == a + b).all()
    assert (gres.as_numpy("OUTPUT1") == a - b).all()
    # grpc.health.v1.Health/Check, as Kubernetes' grpc probe calls it:
    # an empty HealthCheckRequest, SERVING = field 1 varint 1.
    with grpc.insecure_channel("127.0.0.1:8001") as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        reply = check(b"", timeout=5)
    assert reply == b"\x08\x01", reply
    print("probe: gRPC live, ready, KServe infer 'simple' OK; "
          "grpc.health.v1 SERVING")

    with urllib.request.urlopen("http://127.0.0.1:8002/metrics",
                                timeout=5) as r:
        text = r.read().decode()
    want = 'nv_inference_request_success{model="simple",version="1"} 2'
    assert want in text, text[:2000]
    assert "osprey_queue_length" in text
    print(f"probe: /metrics has {want!r} ({len(text.splitlines())} lines)")


def drain_client():
    """Starts a KServe request on port 8000 and stops half-way through its
    body; after the parent has sent the stop signal ("signalled" on stdin),
    waits until new connections are refused (the ports closed), sends the
    rest and wants an HTTP answer on the same connection: Osprey answers
    what it accepted before it exits (a request not yet handed to the core
    when the core stops is refused with 503 "Server is shutting down", as
    Triton does; one already running completes)."""
    import socket

    body = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
         "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
         "data": [1] * 16}]}).encode()
    conn = socket.create_connection(("127.0.0.1", 8000), timeout=30)
    conn.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: osprey\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body[:40])
    print("sending", flush=True)
    if sys.stdin.readline().strip() != "signalled":
        raise SystemExit("no signal sent")
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", 8000), timeout=1).close()
        except ConnectionRefusedError:
            break
        if time.monotonic() > deadline:
            raise SystemExit("port 8000 still accepts 30 s after the signal")
        time.sleep(0.02)
    print("port 8000 refuses new connections", flush=True)
    conn.sendall(body[40:])
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = conn.recv(65536)
        if not chunk:
            raise SystemExit("connection closed without an answer")
        reply += chunk
    head, _, rest = reply.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *([0-9]+)", head).group(1))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    status = head.split(b"\r\n")[0].decode()
    print(f"the request in flight was answered: {status} {rest.decode()}",
          flush=True)
    if status.split()[1] not in ("200", "503"):
        raise SystemExit(1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "drain":
        drain_client()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "probe":
        p = argparse.ArgumentParser()
        p.add_argument("probe")
        p.add_argument("--ports", default="")
        a = p.parse_args()
        probe([int(x) for x in a.ports.split(",") if x])
        return
    p = argparse.ArgumentParser()
    p.add_argument("--dockerfile", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    t0 = time.monotonic()
    stages = parse_stages(a.dockerfile)
    log(f"{a.dockerfile}: stages {[s.name for s in stages]}")
    roots = {}
    for stage in stages:
        rootfs = os.path.join(a.work, f"stage-{stage.name}")
        build_stage(stage, rootfs, a.base, a.context, roots)
        roots[stage.name] = rootfs
    final = stages[-1]
    size = du_bytes(roots[final.name])
    base = du_bytes(a.base)
    serve_and_probe(final, roots[final.name], a.work, a.keep)
    log(f"runtime stage '{final.name}': {size / 2**20:.1f} MiB "
        f"(its base, debootstrap minbase with slim's excludes: "
        f"{base / 2**20:.1f} MiB)")
    log(f"PASSED in {time.monotonic() - t0:.0f} s")
    if not a.keep:
        for r in roots.values():
            shutil.rmtree(r, ignore_errors=True)


if __name__ == "__main__":
    main()
