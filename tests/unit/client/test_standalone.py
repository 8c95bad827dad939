"""The SDK stands alone: the `bluedove-client` distribution (client/pyproject.toml) ships
bluedove/__init__.py, bluedove/client/ and the generated modules they import, and depends on
what those import, no more. (.importlinter's `sdk` contract keeps the client off the other rooms;
this reads the files the wheel ships, outside imports included.)"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import bluedove

ROOT = Path(__file__).resolve().parents[3]
CLIENT = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())
MAIN = tomllib.loads((ROOT / "pyproject.toml").read_text())
# a dependency of the light distribution -> the top-level import name it provides
IMPORT_NAME = {"httpx": "httpx", "grpcio": "grpc", "protobuf": "google"}


def shipped() -> dict[str, Path]:
    """{path in the wheel: source file} of every Python module the light wheel holds."""
    out = {}
    for src, dst in CLIENT["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"].items():
        source = (ROOT / "client" / src).resolve()
        if source.is_dir():
            out.update({f"{dst}/{f.relative_to(source).as_posix()}": f for f in source.rglob("*.py")})
        elif source.suffix == ".py":
            out[dst] = source
    return out


def imported(path: Path) -> set[str]:
    """Every module `path` imports (under `if TYPE_CHECKING:` too), as `a.b.c`; `from m import n`
    gives `m.n`, a module or a name of `m`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: relative import"
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def ships(wheel: set[str], module: str) -> bool:
    """`module` (or, for `m.name`, its module `m`) is a file of the wheel."""
    parts = module.split(".")
    for n in (len(parts), len(parts) - 1):
        base = "/".join(parts[:n])
        if f"{base}.py" in wheel or f"{base}/__init__.py" in wheel:
            return True
    return False


def test_the_wheel_holds_the_sdk_and_its_commands():
    wheel = set(shipped())
    assert {"bluedove/__init__.py", "bluedove/client/__init__.py", "bluedove/client/cli.py",
            "bluedove/v1/pubsub_pb2.py", "bluedove/v1/pubsub_pb2_grpc.py"} <= wheel
    assert all(p.startswith("bluedove/") for p in wheel)
    assert CLIENT["project"]["scripts"] == {"bluedove": "bluedove.client.cli:main"}


def test_what_the_wheel_imports_it_ships_or_depends_on():
    """Every import of a shipped module is the standard library, a shipped module, or a declared
    dependency; and every dependency is imported."""
    files = shipped()
    wheel = set(files)
    declared = {re.match(r"[\w.-]+", d)[0]: d for d in CLIENT["project"]["dependencies"]}
    assert set(declared) == set(IMPORT_NAME), "name the import name of a new dependency in IMPORT_NAME"
    used, stray = set(), []
    for where, source in sorted(files.items()):
        for module in imported(source):
            top = module.split(".")[0]
            if top == "bluedove":
                if not ships(wheel, module):
                    stray.append(f"{where}: {module}")
            elif top in IMPORT_NAME.values():
                used.add(top)
            elif top not in sys.stdlib_module_names and top != "__future__":
                stray.append(f"{where}: {module}")
    assert stray == []
    assert used == set(IMPORT_NAME.values())


def test_the_light_distribution_has_the_full_ones_version_and_bounds():
    """Its version is bluedove/__init__.py's, which the full distribution's matches; httpx and grpcio
    have the full one's lower bounds."""
    assert MAIN["project"]["version"] == bluedove.__version__
    assert CLIENT["tool"]["hatch"]["version"] == {"path": "../bluedove/__init__.py"}
    light = set(CLIENT["project"]["dependencies"])
    assert {d for d in MAIN["project"]["dependencies"] if d.startswith(("httpx", "grpcio>"))} <= light
