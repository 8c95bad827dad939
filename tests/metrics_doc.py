"""docs/metrics.md's table of metrics, read by the tests that check the processes and the
Grafana dashboard against it."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
KINDS = ("dispatcher", "matcher", "autoscaler")
ROW = re.compile(r"^\| `([a-z_:]+)` \| (counter|gauge|histogram) \| [^|]+ \| [^|]+ \| (\w+) \| [^|]+ \|$")


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, the process kinds that own it), for every row of the table."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            name, kind, process = m.groups()
            assert process in (*KINDS, "every"), f"docs/metrics.md: {name}: unknown process {process}"
            out[name] = (kind, KINDS if process == "every" else (process,))
    assert len(out) > 30, "docs/metrics.md: the table of metrics was not found"
    return out


def family_name(name: str, kind: str) -> str:
    """The name prometheus_client's parser gives the family of an exposed metric."""
    return name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
