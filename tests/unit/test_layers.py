"""The layer contract (.importlinter) holds, and its list of core modules is whole."""

from __future__ import annotations

import configparser
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import bluedove

ROOT = Path(__file__).resolve().parents[2]
NOT_CORE = {"cli", "__main__"}  # the entry points


def _contract(name: str) -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config[f"importlinter:contract:{name}"]


def test_the_core_contract_names_every_core_module():
    listed = set(_contract("core")["source_modules"].split())
    children = {f"bluedove.{m.name}" for m in pkgutil.iter_modules(bluedove.__path__) if m.name not in NOT_CORE}
    assert listed == children, "add a new core module to .importlinter's core contract"


def test_the_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is part of the test extra"
    run = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
