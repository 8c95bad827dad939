"""The layer contract (.importlinter) holds, and places every room of the package."""

from __future__ import annotations

import configparser
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import bluedove

ROOT = Path(__file__).resolve().parents[2]
NOT_A_ROOM = {"__main__"}  # `python -m bluedove`


def _contract(name: str) -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config[f"importlinter:contract:{name}"]


def test_the_layers_contract_places_every_room():
    layers = _contract("layers")
    listed = {room.strip() for line in layers["layers"].split("\n") for room in line.split("|") if room.strip()}
    children = {m.name for m in pkgutil.iter_modules(bluedove.__path__) if m.name not in NOT_A_ROOM}
    assert listed == children, "place a new room of bluedove in .importlinter's layers contract"
    assert layers["exhaustive"] == "true"


def test_the_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is part of the test extra"
    run = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
