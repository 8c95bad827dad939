"""No dead code (vulture), no unused or undeclared dependency (deptry), no lint (ruff) and no type error (mypy).

vulture reads the tests too, so a helper that only tests call counts as used; names only a
framework calls are listed in tests/vulture_whitelist.py. deptry's exceptions, each with its
reason, are in pyproject.toml under [tool.deptry].
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["bluedove", "tests", "scripts"]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is part of the test extra"
    return found


def test_no_dead_code():
    run = subprocess.run([_tool("vulture"), *PACKAGES, "--exclude", "bluedove/v1", "--min-confidence", "60"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_every_dependency_is_declared_and_used():
    run = subprocess.run([_tool("deptry"), "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_linter_is_clean():
    """ruff, with the rules of pyproject.toml's [tool.ruff], over the whole tree (generated code aside)."""
    run = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_the_types_check():
    """mypy --strict over the product, with the settings of pyproject.toml's [tool.mypy] (the lab and the
    generated bluedove/v1 aside). Its cache goes to a temporary folder, so each run checks from scratch."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        run = subprocess.run([_tool("mypy"), "--cache-dir", cache], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
