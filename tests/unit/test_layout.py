"""The house's layout beyond the import contracts (tests/unit/test_layers.py): the lab's commands
reach `bluedove` through its entry-point group, and the demo needs no extra."""

from __future__ import annotations

import ast
import re
import subprocess
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
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"up", "matcher", "dispatcher", "demo", "bench", "sim"} <= set(sub.choices)


def test_the_demo_needs_no_extra():
    """`pip install -e .` runs `bluedove demo`: the demo and the load it uses (bluedove/lab/load.py,
    bluedove/lab/readers.py) import no extra."""
    lab = imports("bluedove/lab")
    found = {**imports("bluedove/lab/demo"), "bluedove/lab/load.py": lab["bluedove/lab/load.py"],
             "bluedove/lab/readers.py": lab["bluedove/lab/readers.py"]}
    bad = {f: n & {"psutil", "matplotlib", "kubernetes"} for f, n in found.items()}
    assert {f: n for f, n in bad.items() if n} == {}


MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_file_over_400_lines_and_no_function_over_60():
    """A file holds one concept and a function one step (bluedove/v1 is generated)."""
    long_files, long_functions = [], []
    for path in sorted((ROOT / "bluedove").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("bluedove/v1/"):
            continue
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append((rel, text.count("\n")))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append((f"{rel}:{node.lineno} {node.name}", n))
    assert long_files == [] and long_functions == []


def test_every_class_says_what_it_is():
    """Every class of the product has a docstring (ruff's D101 covers public ones; this, all)."""
    bare = []
    for path in sorted((ROOT / "bluedove").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("bluedove/v1/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None:
                bare.append(f"{rel}:{node.lineno} {node.name}")
    assert bare == []


CITATION = re.compile(r'(docs/[\w./-]+\.md|README\.md|CONTRIBUTING\.md),?\s+"([^"\n]+)"')
CITING = (".py", ".md", ".yaml", ".tpl", ".toml", ".sh", ".js", ".html")


def _tracked() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith(CITING) and not n.startswith("bluedove/v1/")]


def test_every_cited_section_exists():
    """`docs/<file>.md, "<Heading>"` anywhere in the tree (code comments, docs, the chart, the dashboard)
    names a heading that file has: a comment that points somewhere points somewhere real."""
    headings: dict[str, list[str]] = {}
    broken = []
    for path in _tracked():
        if not path.is_file():
            continue
        # a citation may wrap across comment lines: read the text with line breaks and comment marks folded
        text = re.sub(r"\s*\n\s*(#|//|\*)?\s*", " ", path.read_text(errors="ignore"))
        for doc, section in CITATION.findall(text):
            if doc not in headings:
                target = ROOT / doc
                headings[doc] = ([line.lstrip("#").strip() for line in target.read_text().splitlines()
                                  if line.startswith("#")] if target.is_file() else [])
            if not any(h.startswith(section) for h in headings[doc]):
                broken.append(f"{path.relative_to(ROOT)}: {doc}, {section!r}")
    assert broken == []


MAX_DOC_LINES = 600
LONG_DOCS = ("benchmarks.md", "operations.md")


def test_the_long_docs_stay_short_enough_to_read():
    """docs/benchmarks.md and docs/operations.md are at most 600 lines each: the docs are for readers,
    not a lab notebook. A bench keeps its current figure, its command and the history that explains a
    decision (how it measures is docs/bench-reference.md); a task that outgrows docs/operations.md
    gets a page of its own, as the store, security and Kubernetes did."""
    lines = {name: (ROOT / "docs" / name).read_text().count("\n") for name in LONG_DOCS}
    assert {name: n for name, n in lines.items() if n > MAX_DOC_LINES} == {}
