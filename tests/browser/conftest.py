"""Browser tests of the dashboard: pytest-playwright driving Debian's Chromium.

No browser is downloaded (never `playwright install`): the launch uses /usr/bin/chromium,
which scripts/system-deps.sh installs with apt. Screenshots go to $BLUEDOVE_ARTIFACTS_DIR, else
tests/artifacts/ (gitignored)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
STATIC = Path(__file__).resolve().parents[2] / "bluedove" / "dispatcher" / "static"
DATA = Path(__file__).resolve().parent / "data"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's Chromium, not a downloaded one; a missing binary fails here, saying how to get it."""
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: run scripts/system-deps.sh (installs Debian's chromium)"
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    """The size the page is made for."""
    return {**browser_context_args, "viewport": VIEWPORT}


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots are kept after the run."""
    d = Path(os.environ.get("BLUEDOVE_ARTIFACTS_DIR") or Path(__file__).resolve().parents[1] / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def pytest_collection_modifyitems(items):
    """The browser tests run last: Playwright's sync API keeps an event loop running in this
    thread from the first browser test to the end of the session (pytest-playwright's session
    fixtures), and asyncio.run() — which other tests' clusters call — refuses to run beside it."""
    here = Path(__file__).resolve().parent
    items.sort(key=lambda item: Path(str(item.path)).resolve().is_relative_to(here))
