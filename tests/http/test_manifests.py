"""The Kubernetes manifests in docker/kubernetes/, offline.

Every manifest the kustomization lists (and no other file) validates in
strict mode (no unknown fields) against the Kubernetes 1.33 schemas that
the kubernetes-validate package carries, after the kustomization's
namespace is applied as kustomize would.  Then what the README promises of
the Deployment is checked across the files: three replicas rolled with no
unavailable pod, probes on /readyz and /healthz of the port cellar listens
on, a preStop pause and a grace period that outlasts it plus the drain,
requests and limits that fit cellar's caches and probe processes, non-root
as the image's user, a read-only root, no capabilities, the data from a
ReadOnlyMany claim mounted read-only at the data root, the cache dir on an
emptyDir, and the token and TLS files where Secrets are mounted; every
ConfigMap key is a variable that `cellar --help` lists and every value
parses; the Service, PodDisruptionBudget, HorizontalPodAutoscaler,
NetworkPolicy and Ingress point at the Deployment's pods and ports."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import REPO, cellar_bin

K8S_VERSION = "1.33"
MANIFESTS = REPO / "docker" / "kubernetes"
DOCKERFILE = REPO / "docker" / "Dockerfile"


# ------------------------------------------------------------ loading
def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def kustomization() -> dict:
    return yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def resources(kustomization) -> list[dict]:
    """Every listed resource as `kubectl apply -k` would send it: with the
    kustomization's namespace on the namespaced ones, its image names
    substituted."""
    out = []
    images = {i["name"]: i for i in kustomization.get("images", [])}
    for name in kustomization["resources"]:
        for doc in load_all(MANIFESTS / name):
            doc = copy.deepcopy(doc)
            if doc["kind"] != "Namespace" and "namespace" in kustomization:
                doc["metadata"]["namespace"] = kustomization["namespace"]
            for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                if c["image"] in images:
                    i = images[c["image"]]
                    c["image"] = f'{i.get("newName", c["image"])}:{i["newTag"]}'
            out.append(doc)
    return out


def one(resources, kind: str) -> dict:
    found = [r for r in resources if r["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} resources"
    return found[0]


@pytest.fixture(scope="module")
def deployment(resources) -> dict:
    return one(resources, "Deployment")


@pytest.fixture(scope="module")
def pod(deployment) -> dict:
    return deployment["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod) -> dict:
    assert len(pod["containers"]) == 1
    return pod["containers"][0]


@pytest.fixture(scope="module")
def flags(resources, container) -> dict:
    """The CELLAR_* variables the container gets: every ConfigMap it reads
    whole, then its own env."""
    maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    out = {}
    for src in container.get("envFrom", []):
        out.update(maps[src["configMapRef"]["name"]])
    for e in container.get("env", []):
        out[e["name"]] = e["value"]
    return out


# ------------------------------------------------------------ quantities
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9,
           "m": 1e-3, "": 1}


def quantity(q) -> float:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|m|)", str(q))
    assert m, f"quantity {q!r}"
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def test_quantity_parser():
    assert quantity("1Gi") == 2**30
    assert quantity("500m") == 0.5
    assert quantity(2) == 2
    with pytest.raises(AssertionError):
        quantity("1 GB")


# ------------------------------------------------------------ the files
def test_kustomization_lists_every_manifest(kustomization):
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a resource listed twice"
    for name in listed:
        assert (MANIFESTS / name).is_file(), f"{name} is listed but missing"
    on_disk = {p.name for p in MANIFESTS.iterdir() if p.suffix in (".yaml", ".yml")}
    assert on_disk - {"kustomization.yaml"} == set(listed)


@pytest.mark.parametrize("name", sorted(p.name for p in MANIFESTS.glob("*.yaml")
                                        if p.name != "kustomization.yaml"))
def test_manifest_validates_strictly(name, kustomization):
    docs = load_all(MANIFESTS / name)
    assert docs, f"{name} holds no resource"
    for doc in docs:
        if doc["kind"] != "Namespace":
            doc.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_validation_catches_mistakes(deployment):
    """The validator does fail: an unknown field in strict mode, a string
    where an integer goes."""
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad = copy.deepcopy(deployment)
    bad["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_names_unique_and_namespaced(resources, kustomization):
    keys = [(r["kind"], r["metadata"]["name"]) for r in resources]
    assert len(keys) == len(set(keys))
    ns = one(resources, "Namespace")
    assert ns["metadata"]["name"] == kustomization["namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ------------------------------------------------------------ the flags
def cellar_env_names() -> set[str]:
    out = subprocess.run([str(cellar_bin()), "--help"], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    return set(re.findall(r"\bCELLAR_[A-Z0-9_]+\b", out))


def test_configmap_keys_are_cellar_flags(flags):
    known = cellar_env_names()
    assert "CELLAR_DRAIN_SECONDS" in known
    unknown = set(flags) - known
    assert not unknown, f"cellar knows no {sorted(unknown)}"


def test_configmap_values_parse(flags):
    """cellar reads the environment before its arguments, so --help exits 0
    only when every value parses; a broken one exits 2."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CELLAR_")}
    r = subprocess.run([str(cellar_bin()), "--help"], capture_output=True, text=True, timeout=10,
                       env={**base, **flags})
    assert r.returncode == 0, r.stderr
    broken = {**base, **flags, "CELLAR_DRAIN_SECONDS": "twenty"}
    r = subprocess.run([str(cellar_bin()), "--help"], capture_output=True, text=True, timeout=10,
                       env=broken)
    assert r.returncode == 2 and "CELLAR_DRAIN_SECONDS" in r.stderr


# ------------------------------------------------------------ the Deployment
def test_three_replicas_rolled_without_unavailable_pods(deployment):
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["strategy"]["rollingUpdate"]["maxSurge"] >= 1
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()


def port_number(container, port) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port in named, f"no container port named {port}"
    return named[port]


def test_probes(container, flags):
    listen = int(flags.get("CELLAR_PORT", 8080))
    scheme = "HTTPS" if flags.get("CELLAR_TLS_CERT") else "HTTP"
    paths = {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in paths.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert port_number(container, get["port"]) == listen, probe
        assert get.get("scheme", "HTTP") == scheme, probe
    # a replica that stops being ready leaves the endpoints well before the
    # liveness probe would restart it
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert (ready["periodSeconds"] * ready["failureThreshold"]
            < live["periodSeconds"] * live["failureThreshold"])


def pre_stop_seconds(container) -> float:
    cmd = container["lifecycle"]["preStop"]["exec"]["command"]
    assert Path(cmd[0]).name == "sleep" and len(cmd) == 2
    return float(cmd[1])


def test_grace_outlasts_pre_stop_and_drain(pod, container, flags):
    pause = pre_stop_seconds(container)
    assert pause >= 5, "endpoints need a few seconds to drop the pod"
    drain = float(flags.get("CELLAR_DRAIN_SECONDS", 30))
    # the grace period runs from the deletion, preStop included
    assert pod["terminationGracePeriodSeconds"] > pause + drain


def test_requests_limits_fit_caches_and_probes(container, flags):
    res = container["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= res[kind].keys(), kind
    assert quantity(res["requests"]["cpu"]) <= quantity(res["limits"]["cpu"])
    assert quantity(res["requests"]["memory"]) <= quantity(res["limits"]["memory"])
    caches = int(flags.get("CELLAR_ANSWER_CACHE_BYTES", 32 << 20)) + \
        int(flags.get("CELLAR_ZARR_CHUNK_CACHE_BYTES", 64 << 20))
    probes = int(flags.get("CELLAR_PROBE_MEMORY_BYTES", 256 << 20)) * \
        int(flags.get("CELLAR_PROBE_CONCURRENCY", 2))
    headroom = 256 << 20  # open stores, requests in flight, libhdf5
    assert quantity(res["limits"]["memory"]) >= caches + probes + headroom


def image_user() -> tuple[int, int]:
    users = re.findall(r"^USER\s+(\d+):(\d+)\s*$", DOCKERFILE.read_text(), re.M)
    assert users, "the Dockerfile's USER is not a numeric uid:gid"
    return int(users[-1][0]), int(users[-1][1])


def test_non_root_read_only_no_capabilities(pod, container):
    uid, gid = image_user()
    assert uid != 0
    psc, csc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert (psc["runAsUser"], psc["runAsGroup"]) == (uid, gid)
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    assert not csc["capabilities"].get("add")
    assert not csc.get("privileged")
    assert pod["automountServiceAccountToken"] is False


def mounts_by_path(pod, container) -> dict[str, tuple[dict, dict]]:
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container["volumeMounts"]}


def test_data_read_only_from_read_only_many_claim(resources, pod, container, flags):
    mount, volume = mounts_by_path(pod, container)[flags["CELLAR_ROOT"]]
    assert mount["readOnly"] is True
    claim = volume["persistentVolumeClaim"]
    assert claim["readOnly"] is True
    pvc = [r for r in resources if r["kind"] == "PersistentVolumeClaim"
           and r["metadata"]["name"] == claim["claimName"]]
    assert len(pvc) == 1
    assert pvc[0]["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_cache_dir_and_tmp_on_empty_dirs(pod, container, flags):
    mounts = mounts_by_path(pod, container)
    for path in (flags["CELLAR_CACHE_DIR"], "/tmp"):
        mount, volume = mounts[path]
        assert "emptyDir" in volume, path
        assert not mount.get("readOnly"), path
    # everything else the container sees is read-only
    for path, (mount, _) in mounts.items():
        if path not in (flags["CELLAR_CACHE_DIR"], "/tmp"):
            assert mount.get("readOnly") is True, path


def test_tokens_and_tls_from_secrets(pod, container, flags):
    mounts = mounts_by_path(pod, container)
    names = ("CELLAR_AUTH_FILE", "CELLAR_METRICS_TOKEN_FILE", "CELLAR_TLS_CERT", "CELLAR_TLS_KEY")
    for name in names:
        assert name in flags, name
        path = Path(flags[name])
        assert str(path.parent) in mounts, f"{name}: nothing mounted at {path.parent}"
        mount, volume = mounts[str(path.parent)]
        assert "secret" in volume, name
        assert mount["readOnly"] is True
        items = volume["secret"].get("items")
        if items:
            assert path.name in {i["path"] for i in items}, name
    tls = mounts[str(Path(flags["CELLAR_TLS_CERT"]).parent)][1]["secret"]
    assert {Path(flags["CELLAR_TLS_CERT"]).name, Path(flags["CELLAR_TLS_KEY"]).name} == {"tls.crt", "tls.key"}, \
        "a kubernetes.io/tls Secret's keys"
    assert tls["defaultMode"] & 0o007 == 0, "the key is not world-readable"


# ------------------------------------------------------------ the rest
def selects(selector: dict, labels: dict) -> bool:
    return selector.items() <= labels.items()


def test_service_pdb_hpa_networkpolicy_ingress_agree(resources, deployment, container):
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    svc = one(resources, "Service")
    assert selects(svc["spec"]["selector"], labels)
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for p in svc_ports.values():
        port_number(container, p["targetPort"])

    pdb = one(resources, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"]["maxUnavailable"] == 1

    hpa = one(resources, "HorizontalPodAutoscaler")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] == deployment["spec"]["replicas"]
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]

    np_ = one(resources, "NetworkPolicy")
    assert selects(np_["spec"]["podSelector"]["matchLabels"], labels)
    assert set(np_["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert np_["spec"]["egress"] == []
    for rule in np_["spec"]["ingress"]:
        for p in rule["ports"]:
            port_number(container, p["port"])

    ing = one(resources, "Ingress")
    for rule in ing["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == svc["metadata"]["name"]
            assert backend["port"]["name"] in svc_ports
    assert ing["spec"]["tls"], "the example serves its public name over TLS"
