"""The deployment files, checked without a container daemon or a cluster.

- docker/Dockerfile (CUDA) and docker/Dockerfile.cpu, parsed with
  dockerfile-parse: the stages, the runtime stage's user, ports, volume,
  health check, stop signal and entry point, and every dependency of the
  Makefile's DEB_PACKAGES in the build stage with its shared-library
  counterpart in the runtime stage (and, when build/osprey exists, every
  library the program really links);
- deploy/kubernetes/*.yaml against Kubernetes' own schemas (kubernetes-
  validate, pinned Kubernetes version, strict: unknown fields fail), the
  CRDs (ServiceMonitor, KServe ClusterServingRuntime) against minimal
  schemas of their own, and the wiring between the objects (selectors,
  ports, the Redis URL, the token Secret, the drain against the grace
  period, the flags against server/flags.c, the HPA's metrics against
  what the server exports);
- docker/compose.yaml, the Prometheus and Grafana provisioning, and
  deploy/grafana/osprey.json, whose metric names must be ones the server
  exports (server/http/metrics.c);
- every YAML file linted with yamllint.

docker/check.sh is the slow, full proof (builds and serves in chroots);
this module is the fast one `make test` runs.
"""

import functools
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from yamllint import linter
from yamllint.config import YamlLintConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "deploy" / "kubernetes"
GRAFANA = ROOT / "deploy" / "grafana"
KUBERNETES_VERSION = "1.31.0"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}

# Each DEB_PACKAGES entry of the Makefile: "build" (build stage only),
# "test" (the tests' tools, in no image), "runtime" (the runtime stages
# only, under its own name), or its runtime packages in the
# CPU image (Debian 12) and the CUDA image (Ubuntu 24.04, t64 names). A
# new entry in DEB_PACKAGES fails test_every_deb_package_is_placed until
# it is placed here and in both Dockerfiles.
DEB_PLACEMENT = {
    "build-essential": "build",
    "cmake": "build",
    "pkg-config": "build",
    "libmicrohttpd-dev": (["libmicrohttpd12"], ["libmicrohttpd12t64"]),
    "libjson-c-dev": (["libjson-c5"], ["libjson-c5"]),
    "zlib1g-dev": (["zlib1g"], ["zlib1g"]),
    "libopenblas-dev": (["libopenblas0-pthread"], ["libopenblas0-pthread"]),
    "libgtest-dev": "test",
    # Python models: the stub runs in the image's python3 with numpy.
    "python3": "runtime",
    "python3-venv": "test",
    "python3-pip": "test",
    "protobuf-c-compiler": "build",
    "libprotobuf-c-dev": (["libprotobuf-c1"], ["libprotobuf-c1"]),
    "libwslay-dev": (["libwslay1"], ["libwslay1"]),
    "libhiredis-dev": (["libhiredis0.14"], ["libhiredis1.1.0"]),
    # The image talks to a Redis of its own (redis.yaml, compose.yaml).
    "redis-server": "test",
    # gRPC core, abseil, re2 and upb are linked from their static archives
    # (server/grpc/CMakeLists.txt); OpenSSL and c-ares stay shared.
    "libgrpc-dev": (["libc-ares2", "libssl3"], ["libc-ares2", "libssl3t64"]),
    # The openssl program makes the TLS tests' certificates.
    "openssl": "test",
    # onnx.proto only, compiled with protoc-c at build time.
    "libonnx-dev": "build",
    "libonnx-testdata": "test",
    # s3:// repositories: libcurl (SigV4) and expat (ListObjectsV2).
    "libcurl4-openssl-dev": (["libcurl4"], ["libcurl4t64"]),
    "libexpat1-dev": (["libexpat1"], ["libexpat1"]),
    "libssl-dev": (["libssl3"], ["libssl3t64"]),
    "python3-numpy": "runtime",
}
# The build stages install libssl-dev themselves (gRPC's pkg-config file
# needs it; on the machines it comes with libgrpc-dev).
EXTRA_BUILD_PACKAGES = ["libssl-dev"]
# In every Debian and Ubuntu base image already.
BASE_RUNTIME_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}

DOCKERFILES = {
    "cpu": ROOT / "docker" / "Dockerfile.cpu",
    "cuda": ROOT / "docker" / "Dockerfile",
}


# ---- helpers ----------------------------------------------------------------

def makefile_deb_packages():
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^DEB_PACKAGES\s*=\s*((?:.*\\\n)*.*)$", text, re.M)
    assert m, "DEB_PACKAGES not found in the Makefile"
    return m.group(1).replace("\\\n", " ").split()


def flag_names():
    """Every flag name of the flag table (server/flags.c)."""
    text = (ROOT / "server" / "flags.c").read_text()
    names = set(re.findall(r'\.name\s*=\s*"([a-z0-9-]+)"', text))
    # The table of Triton flags accepted and ignored: {"name", "why"}.
    names |= set(re.findall(r'^\s*\{"([a-z0-9-]+)",\s*(?:"|NULL)', text, re.M))
    assert "model-repository" in names and "queue-store" in names
    return names


def exported_metrics():
    """The metric family names server/http/metrics.c writes."""
    text = (ROOT / "server" / "http" / "metrics.c").read_text()
    names = set(re.findall(r'"((?:nv|osprey)_[a-z_]+)', text))
    assert "nv_inference_request_success" in names
    return names


# The labels the server puts on its series, and those Prometheus adds.
EXPORTED_LABELS = {"model", "version", "reason", "gpu_uuid", "queue", "service"}
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "endpoint"}


def check_flags(args, where):
    names = flag_names()
    for arg in args:
        assert arg.startswith("--"), f"{where}: {arg!r} is not a flag"
        name = arg[2:].split("=", 1)[0]
        assert name in names, f"{where}: --{name} is not in server/flags.c"


def flag_value(args, name):
    for arg in args:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


class Stage:
    def __init__(self, base, name):
        self.base, self.name = base, name
        self.items = []  # (instruction, value)

    def all(self, instr):
        return [v for i, v in self.items if i == instr]

    def last(self, instr):
        values = self.all(instr)
        return values[-1] if values else None

    def apt_installed(self):
        pkgs = []
        for run in self.all("RUN"):
            for m in re.finditer(r"apt-get install ((?:(?!&&).)*)", run):
                pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
        return pkgs


def stages_of(path):
    with open(path, "rb") as f:
        structure = DockerfileParser(fileobj=f).structure
    stages = []
    for item in structure:
        instr, value = item["instruction"], item["value"]
        if instr == "FROM":
            words = value.split()
            stages.append(Stage(words[0], words[2] if len(words) == 3 else None))
        elif instr != "COMMENT" and stages:
            stages[-1].items.append((instr, value))
    return stages


@functools.lru_cache(maxsize=None)
def manifests():
    """(file name, document) for every object in deploy/kubernetes/."""
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return tuple(docs)


def objects(kind):
    return [d for _, d in manifests() if d["kind"] == kind]


def one(kind, name=None):
    found = [d for d in objects(kind)
             if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def osprey_container():
    dep = one("Deployment", "osprey")
    return dep, dep["spec"]["template"]["spec"]["containers"][0]


# ---- Dockerfiles ------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_dockerfile_stages_and_runtime_config(variant):
    stages = stages_of(DOCKERFILES[variant])
    assert [s.name for s in stages] == ["build", "runtime"]
    build, runtime = stages
    if variant == "cuda":
        assert re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-devel-ubuntu24\.04",
                            build.base), build.base
        assert re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-runtime-ubuntu24\.04",
                            runtime.base), runtime.base
    else:
        assert build.base == runtime.base == "debian:bookworm-slim"

    user = runtime.last("USER")
    assert user and re.fullmatch(r"[1-9][0-9]*:[0-9]+", user), \
        "a numeric non-root USER (Kubernetes' runAsNonRoot can check it)"
    assert re.search(rf"useradd .*--uid {user.split(':')[0]}\b",
                     " ".join(runtime.all("RUN"))), "the USER exists"
    exposed = " ".join(runtime.all("EXPOSE")).split()
    assert sorted(int(p.split("/")[0]) for p in exposed) == sorted(PORTS.values())
    assert runtime.last("STOPSIGNAL") == "SIGTERM"
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck and "/v2/health/ready" in healthcheck
    assert json.loads(runtime.last("ENTRYPOINT")) == ["/usr/local/bin/osprey"]
    cmd = json.loads(runtime.last("CMD"))
    check_flags(cmd, f"{variant} CMD")
    assert flag_value(cmd, "model-repository") == "/models"
    volumes = json.loads(runtime.last("VOLUME"))
    assert flag_value(cmd, "queue-dir") in volumes, \
        "the embedded queue store's --queue-dir is a declared VOLUME"
    assert int(flag_value(cmd, "exit-timeout-secs")) > 0

    copies = runtime.all("COPY")
    assert "--from=build /src/build/osprey /usr/local/bin/osprey" in copies
    assert "models /models" in copies
    if variant == "cuda":
        # server/cuda_module.c looks for ../lib/osprey/ beside the program.
        assert ("--from=build /src/build/libosprey_cuda.so "
                "/usr/local/lib/osprey/libosprey_cuda.so") in copies
        assert any("-DOSPREY_CUDA=ON" in r for r in build.all("RUN"))
    else:
        assert any("-DOSPREY_CUDA=OFF" in r for r in build.all("RUN"))
    assert any("ldd /usr/local/bin/osprey" in r for r in runtime.all("RUN")), \
        "the runtime stage fails its build when a linked library is missing"


def test_every_deb_package_is_placed():
    missing = [p for p in makefile_deb_packages() if p not in DEB_PLACEMENT]
    assert not missing, (
        f"DEB_PACKAGES {missing} are in no image: add them to DEB_PLACEMENT "
        "here and to docker/Dockerfile and docker/Dockerfile.cpu")


@pytest.mark.parametrize("variant", sorted(DOCKERFILES))
def test_dockerfile_installs_every_dependency(variant):
    build, runtime = stages_of(DOCKERFILES[variant])
    build_pkgs, runtime_pkgs = build.apt_installed(), runtime.apt_installed()
    col = 0 if variant == "cpu" else 1
    for pkg in makefile_deb_packages():
        place = DEB_PLACEMENT.get(pkg)
        if place == "test":
            continue
        if place == "runtime":
            assert pkg in runtime_pkgs, f"{variant} runtime stage lacks {pkg}"
            continue
        assert pkg in build_pkgs, f"{variant} build stage lacks {pkg}"
        if place == "build":
            continue
        for lib in place[col]:
            assert lib in runtime_pkgs, \
                f"{variant} runtime stage lacks {lib} (for {pkg})"
    for pkg in EXTRA_BUILD_PACKAGES:
        assert pkg in build_pkgs
    assert "curl" in runtime_pkgs, "the HEALTHCHECK runs curl"
    dev = [p for p in runtime_pkgs if p.endswith("-dev")]
    assert not dev, f"-dev packages in the {variant} runtime stage: {dev}"


def test_cpu_runtime_stage_has_every_library_osprey_links():
    """The libraries build/osprey needs (readelf), by their Debian package
    (dpkg -S), against the CPU runtime stage's list: what the ldd check
    in the image's build would find, without building it."""
    binary = pathlib.Path(os.environ.get("OSPREY_BIN", ROOT / "build" / "osprey"))
    if not binary.exists() or not shutil.which("readelf") or not shutil.which("dpkg"):
        pytest.skip(f"needs {binary}, readelf and dpkg")
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]",
                        subprocess.run(["readelf", "-d", str(binary)],
                                       check=True, capture_output=True,
                                       text=True).stdout)
    assert needed
    # Where the loader finds each (ldd), then the package owning that file.
    ldd = subprocess.run(["ldd", str(binary)], check=True, capture_output=True,
                         text=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
    files = set()
    for lib in needed:
        if lib in paths:  # not: the loader itself
            files |= {paths[lib], os.path.realpath(paths[lib])}
    # One dpkg call; a file no package owns is left out of its answer.
    out = subprocess.run(["dpkg", "-S"] + sorted(files), capture_output=True,
                         text=True).stdout
    packages = {line.split(":")[0] for line in out.splitlines() if ": /" in line}
    assert packages
    _, runtime = stages_of(DOCKERFILES["cpu"])
    runtime_pkgs = set(runtime.apt_installed()) | BASE_RUNTIME_PACKAGES
    missing = sorted(packages - runtime_pkgs)
    assert not missing, f"{binary} links libraries of {missing}, not installed " \
                        "in docker/Dockerfile.cpu's runtime stage"


def test_cpu_dockerfile_is_replayable_by_check_sh():
    """docker/check.sh replays Dockerfile.cpu's instructions itself: one it
    does not know would only fail there, outside make test."""
    spec = importlib.util.spec_from_file_location(
        "check_chroot", ROOT / "docker" / "check_chroot.py")
    check_chroot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_chroot)
    known = check_chroot.REPLAYED_INSTRUCTIONS | check_chroot.CONFIG_INSTRUCTIONS
    stages = check_chroot.parse_stages(DOCKERFILES["cpu"])
    assert [s.base for s in stages] == [check_chroot.BASE_IMAGE] * 2
    for stage in stages:
        for instr, value, line in stage.instructions:
            assert instr in known, f"line {line}: check.sh cannot replay {instr}"
            if instr == "COPY":
                flags = [w for w in value.split() if w.startswith("--")]
                assert all(f.startswith("--from=") for f in flags), value
            if instr in ("ENTRYPOINT", "CMD"):
                assert isinstance(json.loads(value), list), "exec form"


def test_dockerignore_keeps_build_outputs_out_of_the_context():
    patterns = (ROOT / ".dockerignore").read_text().split()
    for p in (".git", ".venv", "build"):
        assert p in patterns


# ---- Kubernetes -------------------------------------------------------------

# Minimal schemas for the CRDs kubernetes-validate does not know: the
# fields these manifests use, with their types, and nothing unknown.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "required": ["name"]},
            "spec": {
                "type": "object", "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "selector": {"type": "object", "required": ["matchLabels"]},
                    "namespaceSelector": {"type": "object"},
                    "endpoints": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string",
                                         "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string",
                                              "pattern": "^[0-9]+(ms|s|m|h)$"},
                        }}},
                }},
        }},
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "required": ["name"],
                         "not": {"required": ["namespace"]}},
            "spec": {
                "type": "object", "additionalProperties": False,
                "required": ["supportedModelFormats", "containers"],
                "properties": {
                    "annotations": {"type": "object",
                                    "additionalProperties": {"type": "string"}},
                    "supportedModelFormats": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "additionalProperties": False,
                        "required": ["name"],
                        "properties": {"name": {"type": "string"},
                                       "version": {"type": "string"},
                                       "autoSelect": {"type": "boolean"},
                                       "priority": {"type": "integer", "minimum": 1}}}},
                    "protocolVersions": {"type": "array", "items": {
                        "enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}},
                    "multiModel": {"type": "boolean"},
                    "containers": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "required": ["name", "image"]}},
                }},
        }},
}


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    files = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kust["resources"]) == sorted(files)
    assert not (ROOT / "docker" / "kubernetes.yaml").exists(), \
        "docker/kubernetes.yaml is replaced by deploy/kubernetes/"


@pytest.mark.parametrize("name,doc", manifests(),
                         ids=[f"{n}:{d['kind']}/{d['metadata']['name']}"
                              for n, d in manifests()])
def test_manifest_validates(name, doc):
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(doc, CRD_SCHEMAS[key])
        # A container of the runtime is a core Container: validate it as
        # one, inside a Pod.
        if doc["kind"] == "ClusterServingRuntime":
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "runtime"},
                   "spec": {"containers": doc["spec"]["containers"]}}
            kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
        return
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: "
                    f"{e.message} at {list(e.path)}", pytrace=False)


def test_deployment_ports_probes_gpu_and_drain():
    dep, c = osprey_container()
    pod = dep["spec"]["template"]["spec"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == PORTS
    assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["readinessProbe"]["grpc"]["port"] == PORTS["grpc"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    for kind in ("requests", "limits"):
        assert str(c["resources"][kind]["nvidia.com/gpu"]) == "1"
    assert pod["securityContext"]["runAsNonRoot"] is True
    check_flags(c["args"], "Deployment args")

    # The drain: preStop, then each of the three waits of a stop (queue
    # workers, gRPC, HTTP) at most --exit-timeout-secs, within the grace
    # period; the image's default agrees with the Deployment's.
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    exit_timeout = int(flag_value(c["args"], "exit-timeout-secs"))
    grace = pod["terminationGracePeriodSeconds"]
    assert int(pre_stop[1]) + 3 * exit_timeout < grace
    _, runtime = stages_of(DOCKERFILES["cuda"])
    image_cmd = json.loads(runtime.last("CMD"))
    assert flag_value(image_cmd, "exit-timeout-secs") == str(exit_timeout)
    assert f"terminationGracePeriodSeconds: {grace}" in \
        (ROOT / "docker" / "Dockerfile").read_text()


def test_replicas_share_queues_in_redis_with_a_secret_token():
    _, c = osprey_container()
    url = flag_value(c["args"], "queue-store")
    m = re.fullmatch(r"redis://([a-z0-9-]+):([0-9]+)(/[0-9]+)?", url or "")
    assert m, f"--queue-store={url}"
    svc = one("Service", m.group(1))
    sts = one("StatefulSet", m.group(1))
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert svc["spec"]["ports"][0]["port"] == int(m.group(2))
    assert selects(svc["spec"]["selector"],
                   sts["spec"]["template"]["metadata"]["labels"])
    claims = sts["spec"]["volumeClaimTemplates"]
    mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert claims[0]["metadata"]["name"] in {v["name"] for v in mounts}
    assert "--appendonly" in sts["spec"]["template"]["spec"]["containers"][0]["args"]

    token = flag_value(c["args"], "queue-token")
    var = re.fullmatch(r"\$\(([A-Z_]+)\)", token or "")
    assert var, "the token comes from the environment, not the manifest"
    env = {e["name"]: e for e in c["env"]}
    ref = env[var.group(1)]["valueFrom"]["secretKeyRef"]
    secret = one("Secret", ref["name"])
    assert ref["key"] in secret["stringData"]


def test_services_select_the_pods_one_per_protocol():
    dep, c = osprey_container()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selects(dep["spec"]["selector"]["matchLabels"], labels)
    seen = set()
    for svc in objects("Service"):
        if not selects(svc["spec"]["selector"], labels):
            continue
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in PORTS, port
            seen.add(port["targetPort"])
    assert seen == set(PORTS)
    pdb = one("PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)


def test_hpa_scales_on_exported_metrics_through_the_adapter():
    hpa = one("HorizontalPodAutoscaler")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", "osprey")
    exported = exported_metrics()
    names = []
    for m in hpa["spec"]["metrics"]:
        kind = m["type"].lower()
        assert kind in ("pods", "external"), m
        names.append(m[kind]["metric"]["name"])
    assert names and set(names) <= exported, names
    adapter = yaml.safe_load(
        one("ConfigMap", "osprey-prometheus-adapter-rules")["data"]["config.yaml"])
    served = {r["name"]["as"] for r in adapter["rules"] + adapter["externalRules"]}
    assert set(names) <= served, "every HPA metric has an adapter rule"
    for rule in adapter["rules"] + adapter["externalRules"]:
        series = re.match(r"([a-z_]+)\{", rule["seriesQuery"]).group(1)
        assert series in exported, series

    sm = one("ServiceMonitor")
    metrics_svcs = [s for s in objects("Service")
                    if selects(sm["spec"]["selector"]["matchLabels"],
                               s["metadata"]["labels"])]
    assert len(metrics_svcs) == 1
    assert {p["name"] for p in metrics_svcs[0]["spec"]["ports"]} == \
        {e["port"] for e in sm["spec"]["endpoints"]} == {"metrics"}


def test_kserve_runtime_serves_onnx_and_triton_formats():
    rt = one("ClusterServingRuntime")
    formats = {f["name"] for f in rt["spec"]["supportedModelFormats"]}
    assert {"onnx", "triton"} <= formats
    c = rt["spec"]["containers"][0]
    assert c["name"] == "kserve-container"
    check_flags(c["args"], "ClusterServingRuntime args")
    # KServe routes v2 REST to 8080 and gRPC to 9000, models in /mnt/models.
    assert flag_value(c["args"], "http-port") == "8080"
    assert flag_value(c["args"], "grpc-port") == "9000"
    assert flag_value(c["args"], "model-store") == "/mnt/models"


# ---- compose, Prometheus, Grafana -------------------------------------------

def test_compose_runs_osprey_redis_prometheus_grafana():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"osprey", "redis", "prometheus", "grafana"}
    osprey = services["osprey"]
    check_flags(osprey["command"], "compose osprey command")
    assert flag_value(osprey["command"], "queue-store") == "redis://redis:6379"
    assert osprey["depends_on"]["redis"]["condition"] == "service_healthy"
    grace = int(osprey["stop_grace_period"].rstrip("s"))
    assert 3 * int(flag_value(osprey["command"], "exit-timeout-secs")) < grace
    assert {f"{p}:{p}" for p in PORTS.values()} <= set(osprey["ports"])
    here = ROOT / "docker"
    for svc in services.values():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (here / src).exists(), f"compose mounts missing {src}"
    prom = yaml.safe_load((here / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"]
               for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"osprey:{PORTS['metrics']}"]
    ds = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"


def dashboard_exprs():
    dash = json.loads((GRAFANA / "osprey.json").read_text())
    exprs = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            exprs.append((panel["title"], t["expr"], t.get("legendFormat", "")))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append((var["name"], var["definition"], ""))
    return dash, exprs


def test_dashboard_uses_only_exported_metrics_and_labels():
    dash, exprs = dashboard_exprs()
    exported = exported_metrics()
    labels = EXPORTED_LABELS | TARGET_LABELS
    used = set()
    for title, expr, legend in exprs:
        names = set(re.findall(r"\b((?:nv|osprey)_[a-z_]+)", expr))
        assert names, f"{title}: no Osprey metric in {expr}"
        unknown = names - exported
        assert not unknown, f"{title}: {sorted(unknown)} are not exported"
        used |= names
        for group in re.findall(r"by \(([^)]*)\)", expr):
            for label in group.split(","):
                assert label.strip() in labels, f"{title}: label {label}"
        for label in re.findall(r"\{\{(\w+)\}\}", legend):
            assert label in labels, f"{title}: legend label {label}"
    # What the issue asks the dashboard to show.
    for family in ("nv_inference_request_success", "nv_inference_request_failure",
                   "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                   "nv_inference_exec_count", "osprey_queue_length",
                   "osprey_queue_wait_duration_us", "nv_gpu_memory_used_bytes",
                   "nv_gpu_utilization"):
        assert family in used, family
    uids = {p["datasource"]["uid"] for p in dash["panels"] if "datasource" in p}
    assert uids == {"${datasource}"}


# ---- yamllint ---------------------------------------------------------------

YAMLLINT_CONFIG = """
extends: default
rules:
  document-start: disable
  line-length: {max: 100}
  comments: {min-spaces-from-content: 1}
  braces: {max-spaces-inside: 1}
  brackets: {max-spaces-inside: 1}
  truthy: {allowed-values: ["true", "false"], check-keys: false}
"""


def yaml_files():
    files = sorted((ROOT / "deploy").rglob("*.yaml"))
    files += [ROOT / "docker" / "compose.yaml", ROOT / "docker" / "prometheus.yml"]
    return files


@pytest.mark.parametrize("path", yaml_files(),
                         ids=[str(p.relative_to(ROOT)) for p in yaml_files()])
def test_yamllint(path):
    conf = YamlLintConfig(YAMLLINT_CONFIG)
    problems = [f"{path.relative_to(ROOT)}:{p.line}:{p.column}: {p.desc} ({p.rule})"
                for p in linter.run(path.read_text(), conf, str(path))]
    assert not problems, "\n".join(problems)
