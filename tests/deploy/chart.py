"""The Helm chart rendered by Helm's own engine (helm_python binds Helm's Go SDK: no binary, no cluster)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import helm_python as helm
import yaml

CHART = Path(__file__).parents[2] / "deploy" / "helm" / "bluedove"
PROFILES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE, NAMESPACE = "bluedove", "bd"


@dataclass
class Render:
    """One render: the text of each template (path relative to the chart) and its objects."""

    templates: dict[str, str]

    @property
    def objects(self) -> list[dict]:
        return [doc for path, text in sorted(self.templates.items()) if not path.endswith(".txt")
                for doc in yaml.safe_load_all(text) if doc]

    @property
    def notes(self) -> str:
        return self.templates.get("templates/NOTES.txt", "")

    def get(self, kind: str, name: str) -> dict:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind} {name}: {len(found)} rendered ({self.kinds()})"
        return found[0]

    def find(self, kind: str, name: str) -> dict | None:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found[0] if found else None

    def kinds(self) -> list[str]:
        return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in self.objects)

    def text(self) -> str:
        """Every non-empty template, in path order, as `helm template` prints them."""
        return "".join(f"---\n# Source: bluedove/{path}\n{text.strip()}\n"
                       for path, text in sorted(self.templates.items()) if text.strip())


def load_values(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def render(values: dict | None = None, chart: Path = CHART) -> Render:
    """Render like `helm install bluedove CHART -n bd` would, offline (`lookup` finds nothing).

    Raises helm_python.HelmValuesError when the schema refuses the values, HelmRenderError when a
    template fails (bluedove.validateValues' messages among them).
    """
    rendered = helm.Chart.load(chart).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    prefix = "bluedove/"  # the chart's name (Chart.yaml), whatever its directory
    return Render({path.removeprefix(prefix): text for path, text in rendered.items()})


def script(name: str):
    """scripts/<name>.py loaded as a module (the generators the chart's files come from)."""
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(name, root / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
