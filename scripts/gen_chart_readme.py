"""Generate the Helm chart's README.md from its values.yaml: every value, its default and its comment.

    python scripts/gen_chart_readme.py          # writes deploy/helm/bluedove/README.md
    python scripts/gen_chart_readme.py --check  # exit 1 if it differs from what it would write

The values come from the `yaml` module; their comments from the text of values.yaml, which
documents each value with a comment block directly above its key (bitnami's readme-generator
form, `## @param dotted.key.path text`, or plain `# text`) or a comment trailing its line.

A value is a key whose map holds no documented key: a scalar, a list, an empty map, or a map
documented as one value (`resources`, `podSecurityContext`); a map holding documented keys
(`dispatcher`, `dispatcher.service`) is a section, and each key in it is listed on its own.
A value without a comment, or an `@param` naming another key than the one below it, is an
error (tests/deploy/test_chart_readme.py keeps the README equal to this script's output).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "bluedove"
VALUES = CHART / "values.yaml"
OUTPUT = CHART / "README.md"
# A default longer than this is cut at an item of its list or map (`… +N more`).
DEFAULT_WIDTH = 80
PARAM = re.compile(r"@param\s+(\S+)\s*(.*)", re.DOTALL)


class ValuesError(ValueError):
    """values.yaml cannot be documented as it is: the message names the key and the line."""


class Value(NamedTuple):
    path: str  # dotted key path, e.g. matcher.replicas
    default: object  # as yaml.safe_load reads it
    comment: str  # "" when the key has none


def _describe(path: str, line: int, lines: list[str]) -> str:
    """A comment's text, its `#`s and an `@param path` prefix taken off, its lines joined."""
    text = " ".join(part for part in (raw.strip().lstrip("#").strip() for raw in lines) if part)
    m = PARAM.fullmatch(text)
    if m:
        if m[1] != path:
            raise ValuesError(f"values.yaml line {line + 1}: the comment of {path} is `@param {m[1]}`")
        return m[2].strip()
    if text.startswith("@"):
        raise ValuesError(f"values.yaml line {line + 1}: the comment of {path} is an unknown tag: {text}")
    return text


def _comment_above(lines: list[str], line: int) -> list[str]:
    """The comment lines directly above `line` (no blank line between), top first."""
    block = []
    i = line - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        block.append(lines[i])
        i -= 1
    return block[::-1]


def _comment_after(lines: list[str], key: yaml.Node, value: yaml.Node) -> list[str]:
    """The comment trailing the key's line, after the value when the value ends on that line."""
    line = key.start_mark.line
    if value.end_mark.line == line:
        rest = lines[line][value.end_mark.column:]
    else:  # a block map or list below the key, or a value running over lines: after the colon
        rest = lines[line][key.end_mark.column:]
        rest = re.sub(r"^\s*:", "", rest)
    m = re.fullmatch(r"\s*(#.*)?", rest)
    return [m[1]] if m and m[1] else []


def comments(text: str) -> dict[str, str]:
    """The comment of every key of values.yaml's maps, by dotted path ("" for a key without one).

    Keys inside lists are not values of their own (a list is one value) and are not read."""
    lines = text.splitlines()
    found: dict[str, str] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        for key, value in node.value:
            path = f"{prefix}{key.value}"
            line = key.start_mark.line
            # a comment block above belongs to a key that begins its line (not to a key of a flow map)
            first = not lines[line][:key.start_mark.column].strip()
            parts = [_describe(path, line, block) for block in
                     (_comment_above(lines, line) if first else [], _comment_after(lines, key, value)) if block]
            found[path] = " ".join(p for p in parts if p)
            if isinstance(value, yaml.MappingNode):
                walk(value, f"{path}.")

    root = yaml.compose(text)
    if root is not None:
        if not isinstance(root, yaml.MappingNode):
            raise ValuesError("values.yaml is not a map")
        walk(root, "")
    return found


def values(text: str) -> list[Value]:
    """Every value of values.yaml in the file's order (see the module's docstring for what a value is)."""
    data = yaml.safe_load(text) or {}
    docs = comments(text)
    out: list[Value] = []

    def walk(node: dict, prefix: str) -> None:
        for key, default in node.items():
            path = f"{prefix}{key}"
            section = isinstance(default, dict) and default and (
                not docs.get(path) or any(docs.get(p) for p in docs if p.startswith(f"{path}.")))
            if section:
                walk(default, f"{path}.")
            else:
                out.append(Value(path, default, docs.get(path, "")))

    walk(data, "")
    return out


def _scalar(v: object) -> str:
    if isinstance(v, str):
        plain = v and v == v.strip() and "`" not in v
        try:
            plain = plain and yaml.safe_load(f"[{v}]") == [v]
        except yaml.YAMLError:
            plain = False
        return v if plain else json.dumps(v, ensure_ascii=False)
    return json.dumps(v)  # true, false, null, numbers


def flow(v: object) -> str:
    """YAML flow style, strings quoted only where YAML would read them otherwise: {cpu: 250m}, "1", []."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(flow(x) for x in v) + "]"
    return _scalar(v)


def short(v: object, width: int = DEFAULT_WIDTH) -> str:
    """flow(v), a long list or map cut after the items that fit in `width` (at least one): `… +N more`."""
    text = flow(v)
    if len(text) <= width or not isinstance(v, (dict, list)) or not v:
        return text
    items = [(f"{_scalar(k)}: ", x) for k, x in v.items()] if isinstance(v, dict) else [("", x) for x in v]
    parts: list[str] = []
    used = 2  # the brackets
    for i, (head, x) in enumerate(items):
        left = len(items) - i - 1
        reserve = len(f", … +{left} more") if left else 0
        sep = 2 if parts else 0
        # the first item is shortened to fit if need be, the others are shown whole or not at all
        item = head + (flow(x) if parts else short(x, max(width - used - len(head) - reserve, 16)))
        if parts and used + sep + len(item) + reserve > width:
            break
        parts.append(item)
        used += sep + len(item)
    if len(parts) < len(items):
        parts.append(f"… +{len(items) - len(parts)} more")
    brackets = "{}" if isinstance(v, dict) else "[]"
    return brackets[0] + ", ".join(parts) + brackets[1]


def _code(text: str) -> str:
    """A Markdown code span for a table cell."""
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text.replace('|', chr(92) + '|')}{pad}{ticks}"


def _prose(text: str) -> str:
    """A comment for a table cell: `|` escaped, `<` and `>` outside code spans too (not read as HTML)."""
    pieces = text.replace("|", "\\|").split("`")
    for i in range(0, len(pieces), 2):
        pieces[i] = pieces[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(pieces)


def render(values_text: str, chart: dict) -> str:
    rows = values(values_text)
    missing = [v.path for v in rows if not v.comment]
    if missing:
        raise ValuesError(f"values.yaml: no comment on {', '.join(missing)} (write `## @param KEY text` above each)")
    name, version, app = chart["name"], chart["version"], chart["appVersion"]
    intro = f"""# The {name} Helm chart

<!-- Generated by scripts/gen_chart_readme.py from values.yaml: do not edit. Change values.yaml
(a value's comment is its description here) and run `python scripts/gen_chart_readme.py`;
tests/deploy/test_chart_readme.py fails while this file differs from the script's output. -->

{chart["description"]}. Chart version {version}, BlueDove {app}, Kubernetes {chart["kubeVersion"]}.

The chart installs a whole BlueDove cluster in one release:

- **dispatchers**: a Deployment and Service `<release>-dispatcher`, the public REST API (8080)
  and gRPC API (50051), a PodDisruptionBudget, optionally an Ingress and a HorizontalPodAutoscaler;
- **matchers**: a StatefulSet `<release>-matcher` owning the space's segments, with its
  headless Service (gossip, the matcher API);
- **the autoscaler**: a Deployment scaling the matcher StatefulSet by load, with the
  ServiceAccount, Role and RoleBinding it needs;
- **a store**: an in-chart Redis StatefulSet (append-only file on a volume), or your own Redis
  or Redis Cluster (`externalRedis`);
- the space (and an optional partition seed) as ConfigMaps, and on request NetworkPolicies,
  Prometheus Operator ServiceMonitors and Grafana dashboard ConfigMaps (`dashboards/`).

Build the image from the repository's root (`docker build -t bluedove:{app} .`), make it
available to the cluster, then install from the repository path:

```
kubectl create namespace bluedove
helm install bluedove deploy/helm/bluedove -n bluedove
helm test bluedove -n bluedove
```

Change values with `--set key=value` or `-f my-values.yaml`; `ci/*-values.yaml` are tested
profiles (one of each, an external Redis, a Redis Cluster, TLS, the autoscaler off).
`values.schema.json` refuses unknown keys and wrong types, and the chart checks the values
against each other before anything is installed. The full guide (install, upgrade, scaling,
external Redis, TLS and API keys, observing, what happens when a pod goes away) is
`docs/kubernetes.md` in the BlueDove repository.

## Values

Every value of `values.yaml`, by its dotted key path. A map listed as one value is replaced
whole by what you set; a long default is shortened here (`… +N more`), `values.yaml` has it in full.

| Key | Default | Description |
| --- | --- | --- |
"""
    table = "".join(f"| {_code(v.path)} | {_code(short(v.default))} | {_prose(v.comment)} |\n" for v in rows)
    return intro + table


def text() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return render(VALUES.read_text(encoding="utf-8"), chart)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the README differs from the generated one")
    args = p.parse_args()
    try:
        out = text()
    except ValuesError as e:
        print(e, file=sys.stderr)
        return 2
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != out:
            print(f"{OUTPUT.relative_to(ROOT)} is not what scripts/gen_chart_readme.py generates: run it",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(out, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
