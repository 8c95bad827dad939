"""The house's layout beyond the import contracts (tests/unit/test_layers.py): the lab's commands
reach `bluedove` through its entry-point group, and the demo needs no extra."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imports(package: str, skip: str | None = None) -> dict[str, set[str]]:
    """{file: top-level names (and bluedove.cli) it imports} for every module of `package`."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if skip and rel.startswith(skip):
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                    else [])
            for m in mods:
                names.add("bluedove.cli" if m.startswith("bluedove.cli") else m.split(".")[0])
        out[rel] = names
    return out


def test_the_lab_commands_come_from_the_entry_point_group():
    from importlib.metadata import entry_points

    from bluedove.cli.main import COMMAND_GROUP, build_parser

    assert {ep.name: ep.value for ep in entry_points(group=COMMAND_GROUP)} == {
        "demo": "bluedove.lab.demo:add_parser", "bench": "bluedove.lab.bench:add_parser",
        "sim": "bluedove.lab.sim.command:add_parser"}
    sub = next(a for a in build_parser()._actions if a.dest == "command")  # noqa: SLF001
    assert {"up", "matcher", "dispatcher", "demo", "bench", "sim"} <= set(sub.choices)


def test_the_demo_needs_no_extra():
    """`pip install -e .` runs `bluedove demo`: the demo and the load it uses (bluedove/lab/load.py,
    bluedove/lab/readers.py) import no extra."""
    lab = imports("bluedove/lab")
    found = {**imports("bluedove/lab/demo"), "bluedove/lab/load.py": lab["bluedove/lab/load.py"],
             "bluedove/lab/readers.py": lab["bluedove/lab/readers.py"]}
    bad = {f: n & {"psutil", "matplotlib", "kubernetes"} for f, n in found.items()}
    assert {f: n for f, n in bad.items() if n} == {}
