"""deploy/kubernetes/ is the chart rendered at its defaults (`make manifests`): fails when they drift."""
from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import yaml

from laminar_kafka.cluster.config import settings_from
from tests.unit.deploy.helm_tools import MANIFESTS, find_helm, render


def _render_into(directory: Path) -> None:
    env = {**os.environ, "LAMINAR_HELM": find_helm()}
    done = subprocess.run(["bash", str(MANIFESTS / "render.sh"), str(directory)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_rendered_manifests_match_the_chart(tmp_path: Path) -> None:
    _render_into(tmp_path)
    fresh = {p.name: p.read_text() for p in sorted(tmp_path.glob("*.yaml"))}
    committed = {p.name: p.read_text() for p in sorted(MANIFESTS.glob("*.yaml"))}
    assert sorted(committed) == sorted(fresh), "files differ: run `make manifests` and commit deploy/kubernetes/"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale} differ from the chart: run `make manifests` and commit deploy/kubernetes/"


def test_the_kustomization_lists_every_manifest_and_they_are_the_chart_objects() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert sorted(listed) == sorted(p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml")
    objects = [doc for name in listed for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]
    assert sorted(o["kind"] for o in objects) == sorted(o["kind"] for o in render(find_helm()))
    assert all("namespace" not in o["metadata"] for o in objects), "kustomize or kubectl sets the namespace"



def test_the_overlay_example_settings_are_what_a_node_accepts() -> None:
    """docs/kubernetes.md's overlay: its laminar.toml loads with the node's own parser, secrets aside."""
    overlay = MANIFESTS.parent / "kubernetes-overlay-example"
    document = tomllib.loads((overlay / "laminar.toml").read_text())
    settings = settings_from(document, {"LAMINAR_KAFKA__SASL_PASSWORD": "pw"}, {"node-id": "auto"})
    assert (settings.pipeline, settings.table_format, settings.kafka["sasl.password"]) == ("orders", "iceberg", "pw")
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../kubernetes"]
    generated = {g["name"] for g in kustomization["configMapGenerator"]}
    assert generated == _names_of_kind("ConfigMap"), "the overlay replaces the rendered ConfigMap"


def _names_of_kind(kind: str) -> set[str]:
    names = set()
    for path in MANIFESTS.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == kind:
                names.add(doc["metadata"]["name"])
    return names
