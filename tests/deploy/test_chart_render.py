"""The chart renders, lints clean and validates against Kubernetes' schemas, in every profile.

Everything runs Helm's own engine in-process (tests/deploy/chart.py) and kubernetes-validate's
bundled OpenAPI schemas: no helm binary, no cluster.

Refresh the golden render after a reviewed change of the chart:
    BLUEDOVE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/deploy/test_chart_render.py -k golden
then review `git diff tests/deploy/golden/`.
"""

from __future__ import annotations

import os
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest

from tests.deploy.chart import CHART, NAMESPACE, PROFILES, load_values, render

GOLDEN = Path(__file__).parent / "golden" / "default.yaml"
# The oldest and newest Kubernetes versions kubernetes-validate bundles schemas for: the chart
# must be valid on every release in between (the fields it uses exist in both).
KUBE_VERSIONS = ("1.25.0", "1.37.0")
# Kinds of CRDs (the Prometheus Operator's): kubernetes-validate has no schema for them.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
LINT_WARNING = 2  # helm lint severities: 1 info, 2 warning, 3 error

PROFILE_IDS = ["default"] + [p.name for p in PROFILES]
PROFILE_VALUES = [{}] + [load_values(p) for p in PROFILES]


def test_the_expected_profiles_exist():
    """The ci/ profiles the docs promise (a renamed or lost one would silently drop out of the loops)."""
    assert [p.name for p in PROFILES] == ["autoscaling-off-values.yaml", "external-redis-values.yaml",
                                          "minimal-values.yaml", "redis-cluster-values.yaml", "tls-values.yaml"]


@pytest.mark.parametrize("values", PROFILE_VALUES, ids=PROFILE_IDS)
def test_lint_is_clean(values):
    """`helm lint --strict`: any warning or error fails, with Helm's message."""
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
    bad = [m for m in report["messages"] if m["severity"] >= LINT_WARNING]
    assert report["errors"] == [] and bad == [], report


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("values", PROFILE_VALUES, ids=PROFILE_IDS)
def test_every_manifest_is_valid_kubernetes(values, kube):
    """Each object against the version's schema, unknown fields refused (kubernetes-validate --strict)."""
    objects = render(values).objects
    assert objects, "nothing rendered"
    problems = []
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{where}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            if (obj["apiVersion"], obj["kind"]) not in CRD_KINDS:
                problems.append(f"{where}: no schema for {obj['apiVersion']} in Kubernetes {kube}")
    assert problems == []


def test_the_validator_refuses_an_unknown_field():
    """The validation above can fail: strict mode names a field Kubernetes does not have."""
    sts = render().get("StatefulSet", "bluedove-matcher")
    sts["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpc"]["path"] = "/healthz"
    with pytest.raises(kubernetes_validate.ValidationError, match="path"):
        kubernetes_validate.validate(sts, KUBE_VERSIONS[0], strict=True)


def test_every_object_is_labelled_and_namespaced():
    """Every object carries the release's labels and lands in the release's namespace."""
    for obj in render(load_values(CHART / "ci" / "external-redis-values.yaml")).objects + render().objects:
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE, obj["kind"]
        assert meta["labels"]["app.kubernetes.io/instance"] == "bluedove", obj["kind"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm", obj["kind"]


def test_the_default_render_matches_the_golden_file():
    """A change of the rendered output is a reviewed diff of tests/deploy/golden/default.yaml."""
    text = render().text()
    if os.environ.get("BLUEDOVE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
        pytest.skip(f"rewrote {GOLDEN.name}: review `git diff`")
    assert GOLDEN.exists(), "no golden file: run with BLUEDOVE_UPDATE_GOLDEN=1 once"
    assert text == GOLDEN.read_text(), (
        "the default render changed: if intended, rerun with BLUEDOVE_UPDATE_GOLDEN=1 and review the diff")
