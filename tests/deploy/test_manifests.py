"""The Kubernetes manifests as users deploy them (``deploy/kubernetes``), checked offline.

Every kustomization (the bases and the overlays) renders with ``kubectl kustomize``;
every rendered object validates against the Kubernetes 1.32 schemas, strictly (an
unknown field is an error), with ``kubernetes-validate``; checkov's policies pass on the
overlays with nothing downloaded; and what the deployments rely on holds: the native
sidecar is an init container that keeps running and holds the agent back on a
startupProbe whose path the app serves without a token; the replicas never migrate, one
Job runs ``sidecar migrate``; every setting named is one the sidecar reads; the pods run
as a non-root user with no capability, no service-account token and a read-only root;
and a changed setting renames the generated ConfigMap, which rolls the pods.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from starlette.routing import Match
from starlette.testclient import TestClient

from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.settings import Settings
from sidecar.shells.api import create_app
from tests.envs import requirements_env
from tests.loopback import Listener

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = sorted(p.parent.relative_to(KUBE) for p in KUBE.rglob("kustomization.yaml"))
OVERLAYS = sorted(p.relative_to(KUBE) for p in (KUBE / "overlays").iterdir() if p.is_dir())
VERSION = "1.32"
"""The Kubernetes version the manifests are validated against (this machine's kubectl)."""
WORKLOADS = ("Deployment", "StatefulSet", "Job")
OUTSIDE_SETTINGS = {"SIDECAR_TOKEN", "SIDECAR_URL"}
"""Variables the sidecar reads outside its settings object: the operator's single token
(the server and the CLI) and the URL the CLI sends its commands to."""
SKIPPED = {
    # (check, resource): why, as each resource's checkov.io/skipN annotation says
    ("CKV_K8S_8", "Deployment.tool-chain-sidecar.agent"): "the example agent's liveness "
    "is the agent runtime's to define (the sidecar's probes are asserted below)",
    ("CKV_K8S_9", "Deployment.tool-chain-sidecar.agent"): "the example agent takes no "
    "traffic, so it has no readiness",
    ("CKV_K8S_35", "Deployment.tool-chain-sidecar.sidecar"): "libpq reads the database "
    "password from PGPASSWORD and the sidecar its S3 keys from AWS_*; tokens are a file",
    ("CKV_K8S_35", "Job.tool-chain-sidecar.sidecar-migrate"): "the same database password",
}
SKIPPED_EVERYWHERE = ["CKV_K8S_43"]
"""deploy/kubernetes/checkov.yaml's skip-check, with its reason there: images by tag."""


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl (1.32, with kustomize) renders the manifests: install it"
    return found


def rendered(where: Path) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize`` renders from ``where`` (relative to KUBE, or
    absolute)."""
    done = subprocess.run(
        [kubectl(), "kustomize", str(KUBE / where)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


render = functools.cache(rendered)
"""The checked-in kustomizations, rendered once per run."""


def one(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def config_name(pod: dict[str, Any]) -> str | None:
    """The ConfigMap the pod's containers take their environment from (one at most)."""
    names = {
        ref["configMapRef"]["name"]
        for c in containers(pod)
        for ref in c.get("envFrom", [])
        if "configMapRef" in ref
    }
    assert len(names) <= 1, names
    return next(iter(names), None)


def config_of(objects: tuple[dict[str, Any], ...], pod: dict[str, Any]) -> dict[str, str]:
    """The data of the pod's ConfigMap."""
    name = config_name(pod)
    assert name is not None, "the pod takes no settings"
    return dict(one(objects, "ConfigMap", name)["data"])


def settings_of(config: dict[str, str]) -> Settings:
    """The settings a pod's ConfigMap makes, parsed and checked as the sidecar does;
    the tokens file, a Secret mounted in the pod, is left out (it is not here)."""
    return Settings.load(env={**config, "SIDECAR_TOKENS_FILE": ""})


def pods(objects: tuple[dict[str, Any], ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] in WORKLOADS:
            yield f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The real app, as ``sidecar serve`` builds it, on an empty home."""
    home = tmp_path_factory.mktemp("home")
    with (
        Sidecar.open(embedder=HashingEmbedder(), home=home) as sc,
        TestClient(create_app(sc, "manifest-test-token-0123"), base_url="http://127.0.0.1") as c,
    ):
        yield c


def served_to_a_probe(client: TestClient, probe: dict[str, Any]) -> bool:
    """Whether the app routes the probe's path and answers it 200 as a kubelet asks: a
    GET with no token (a probe cannot send one from a Secret)."""
    path = probe["httpGet"]["path"]
    app = client.app.api  # type: ignore[attr-defined]  # the Gate wraps the FastAPI app
    scope = {"type": "http", "path": path, "method": "GET", "root_path": "", "headers": []}
    routed = any(r.matches(scope)[0] == Match.FULL for r in app.routes)
    return routed and client.get(path).status_code == 200


# ---- rendering and the schemas ---------------------------------------------------------
@pytest.mark.parametrize("where", KUSTOMIZATIONS, ids=str)
def test_every_kustomization_renders(where: Path) -> None:
    objects = render(where)
    assert objects and all(o.get("kind") and o["metadata"].get("name") for o in objects)


@pytest.mark.parametrize("where", KUSTOMIZATIONS, ids=str)
def test_every_rendered_object_validates_strictly(where: Path) -> None:
    for obj in render(where):
        kubernetes_validate.validate(obj, VERSION, strict=True)


def test_the_schemas_refuse_what_a_cluster_would() -> None:
    """The validation is not a formality: a misspelt field fails strictly, and a native
    sidecar (``restartPolicy`` on an init container) is refused by 1.27's schemas, the
    last before the field (alpha in 1.28, on by default from 1.29)."""
    deployment = one(render(Path("overlays/shared")), "Deployment", "sidecar")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)
    agent = one(render(Path("overlays/native-sidecar")), "Deployment", "agent")
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicy"):
        kubernetes_validate.validate(agent, "1.27", strict=True)


# ---- the policies ----------------------------------------------------------------------
class _Doorman(Listener):
    """Set as every proxy variable: any connection a tool attempts to make through a
    proxy is counted here instead of leaving the machine."""

    def __init__(self) -> None:
        self.knocks: list[bytes] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(2)
            self.knocks.append(conn.recv(200))


@pytest.fixture(scope="module")
def checkov(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov's JSON report on every overlay, run once, offline: its download of
    policy metadata and its version check are off (``--skip-download`` in the config,
    ``BC_SKIP_MAPPING``, ``CKV_SKIP_PACKAGE_UPDATE_CHECK``), and every proxy variable
    points at a local listener that counts what it is asked for."""
    binary = (
        requirements_env(KUBE / "requirements-checkov.txt", Path(sys.prefix) / "tools" / "checkov")
        / "checkov"
    )
    rendered = tmp_path_factory.mktemp("rendered")
    for overlay in OVERLAYS:
        (rendered / f"{overlay.name}.yaml").write_text(yaml.safe_dump_all(render(overlay)))
    doorman = _Doorman()
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy",)}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = doorman.url
    env.update(BC_SKIP_MAPPING="TRUE", CKV_SKIP_PACKAGE_UPDATE_CHECK="true")
    try:
        done = subprocess.run(
            [str(binary), "--config-file", str(KUBE / "checkov.yaml"), "-d", str(rendered),
             "-o", "json"],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
    finally:
        doorman.close()
    report = json.loads(done.stdout)
    return {"report": report, "returncode": done.returncode, "knocks": doorman.knocks}


@pytest.mark.integration  # a tool of its own, in a process of its own: not `make test-fast`
def test_checkov_passes_on_every_overlay_offline(checkov: dict[str, Any]) -> None:
    report = checkov["report"]
    results = report["results"]
    failed = [(c["check_id"], c["resource"]) for c in results["failed_checks"]]
    assert not failed and checkov["returncode"] == 0, failed
    assert report["summary"]["parsing_errors"] == 0
    workloads = sum(1 for o in OVERLAYS for _ in pods(render(o)))
    assert report["summary"]["passed"] > 20 * workloads  # each workload met the checks
    skipped = {(c["check_id"], c["resource"]) for c in results["skipped_checks"]}
    assert skipped == set(SKIPPED)
    config = yaml.safe_load((KUBE / "checkov.yaml").read_text())
    assert config["skip-check"] == SKIPPED_EVERYWHERE and config["skip-download"] is True
    assert checkov["knocks"] == []  # nothing tried to reach the network


# ---- what the deployments rely on ------------------------------------------------------
def test_the_native_sidecar_starts_first_and_holds_the_agent_on_a_served_probe(
    routes: TestClient,
) -> None:
    objects = render(Path("overlays/native-sidecar"))
    pod = one(objects, "Deployment", "agent")["spec"]["template"]["spec"]
    [sidecar] = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar, not a one-shot init
    assert sidecar["args"][0] == "serve" and "migrate" not in sidecar["args"]
    assert served_to_a_probe(routes, sidecar["startupProbe"])
    assert served_to_a_probe(routes, sidecar["readinessProbe"])
    assert served_to_a_probe(routes, sidecar["livenessProbe"])
    port = sidecar["args"][sidecar["args"].index("--port") + 1]
    [named] = [
        p for p in sidecar["ports"] if p["name"] == sidecar["startupProbe"]["httpGet"]["port"]
    ]
    assert str(named["containerPort"]) == port
    [agent] = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent.get("env", [])}
    assert env["SIDECAR_URL"] == f"http://127.0.0.1:{port}"  # over the pod's loopback
    # the home on a volume of its own, where the settings put it
    config = config_of(objects, pod)
    [home] = [m for m in sidecar["volumeMounts"] if m["mountPath"] == config["SIDECAR_HOME"]]
    [volume] = [v for v in pod["volumes"] if v["name"] == home["name"]]
    claim = one(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert one(objects, "Deployment", "agent")["spec"]["strategy"]["type"] == "Recreate"


def test_the_replicas_never_migrate_and_one_job_does(routes: TestClient) -> None:
    objects = render(Path("overlays/shared"))
    deployment = one(objects, "Deployment", "sidecar")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    [replica] = pod["containers"]
    assert replica["command"] == ["sidecar"] and replica["args"][0] == "serve"
    settings = settings_of(config_of(objects, pod))
    assert settings.migrate == "never" and settings.shared
    assert settings.cold_url and settings.cold_url.startswith("s3://")
    assert settings.chroma_url == "http://chroma:8000"
    assert one(objects, "Service", "chroma")["spec"]["ports"][0]["port"] == 8000
    # the replicas wait on their startupProbe (a 503 /readyz until the schema is there)
    assert served_to_a_probe(routes, replica["startupProbe"])
    assert served_to_a_probe(routes, replica["livenessProbe"])
    job = one(objects, "Job", "sidecar-migrate")
    job_pod = job["spec"]["template"]["spec"]
    [migrate] = job_pod["containers"]
    assert [*migrate["command"], *migrate["args"]] == ["sidecar", "migrate"]
    assert config_of(objects, job_pod) == config_of(objects, pod)  # the same state
    assert job_pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    # nothing else migrates: the Job is the only container that runs the step
    runs = [c for _, p in pods(objects) for c in containers(p) if "migrate" in c.get("args", [])]
    assert runs == [migrate]


def test_the_replicas_share_one_token_set_from_a_secret_file() -> None:
    objects = render(Path("overlays/shared"))
    pod = one(objects, "Deployment", "sidecar")["spec"]["template"]["spec"]
    [replica] = pod["containers"]
    tokens = Path(config_of(objects, pod)["SIDECAR_TOKENS_FILE"])
    [mount] = [m for m in replica["volumeMounts"] if m["mountPath"] == str(tokens.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert mount["readOnly"] and tokens.name in [i["path"] for i in volume["secret"]["items"]]
    assert not any(e["name"] == "SIDECAR_TOKEN" for e in replica.get("env", []))
    # no password in what the ConfigMap holds: it comes from the Secret, beside the URL
    url = settings_of(config_of(objects, pod)).database_url or ""
    assert ":" not in url.split("//", 1)[1].split("@", 1)[0]
    assert "PGPASSWORD" in [e["name"] for e in replica["env"]]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=str)
def test_every_setting_named_is_one_the_sidecar_reads(overlay: Path) -> None:
    known = {f"SIDECAR_{f.name.upper()}" for f in fields(Settings)} | OUTSIDE_SETTINGS
    objects = render(overlay)
    named = {k for o in objects if o["kind"] == "ConfigMap" for k in o["data"]}
    named |= {e["name"] for _, p in pods(objects) for c in containers(p) for e in c.get("env", [])}
    assert {n for n in named if n.startswith("SIDECAR_")} <= known
    for _, pod in pods(objects):
        if config_name(pod):
            settings_of(config_of(objects, pod))  # every value parses


@pytest.mark.parametrize("overlay", OVERLAYS, ids=str)
def test_every_pod_runs_locked_down(overlay: Path) -> None:
    for where, pod in pods(render(overlay)):
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        mounted = {m["mountPath"] for c in containers(pod) for m in c.get("volumeMounts", [])}
        assert "/tmp" in mounted, where  # the root file system is read-only
        for c in containers(pod):
            context = c["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (where, c["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (where, c["name"])
            assert context["readOnlyRootFilesystem"] is True, (where, c["name"])
            for bound in ("requests", "limits"):
                assert set(c["resources"][bound]) == {"cpu", "memory"}, (where, c["name"])


@pytest.mark.parametrize("overlay", OVERLAYS, ids=str)
def test_the_sidecars_write_only_where_a_volume_is(overlay: Path) -> None:
    """With the root file system read-only, the home and the model's cache are volumes."""
    objects = render(overlay)
    for where, pod in pods(objects):
        for c in containers(pod):
            if c.get("command") != ["sidecar"]:
                continue
            settings = settings_of(config_of(objects, pod))
            mounted = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert str(settings.home) in mounted, (where, c["name"])
            if c["args"][0] == "serve":
                assert str(settings.model_cache_path.parent) in mounted, (where, c["name"])


def test_a_changed_setting_renames_the_configmap_and_rolls_every_pod(tmp_path: Path) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUBE, copy)
    before = rendered(copy / "overlays/shared")
    env = copy / "overlays/shared/sidecar.env"
    env.write_text(env.read_text().replace("s3://sidecar-archive/cold", "s3://elsewhere/cold"))
    after = rendered(copy / "overlays/shared")

    def names(objects: tuple[dict[str, Any], ...]) -> dict[str, str | None]:
        """Each workload's ConfigMap, as its pod template names it."""
        return {w: config_name(p) for w, p in pods(objects) if config_name(p)}

    old, new = names(before), names(after)
    assert set(old) == set(new) == {"Deployment/sidecar", "Job/sidecar-migrate"}
    assert len(set(old.values())) == len(set(new.values())) == 1
    assert set(old.values()).isdisjoint(new.values())  # the template changed: pods roll
    assert config_of(after, pods_of(after, "Deployment/sidecar"))["SIDECAR_COLD_URL"] == (
        "s3://elsewhere/cold"
    )
    # and nothing else: the same setting, set back, gives back the same name
    env.write_text(env.read_text().replace("s3://elsewhere/cold", "s3://sidecar-archive/cold"))
    assert names(rendered(copy / "overlays/shared")) == old


def pods_of(objects: tuple[dict[str, Any], ...], where: str) -> dict[str, Any]:
    [pod] = [p for w, p in pods(objects) if w == where]
    return pod
