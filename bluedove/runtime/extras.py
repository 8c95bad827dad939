"""The optional extras a command may need, checked before it starts its work.

`pip install bluedove` runs every service; a few commands need more: the Spark job and the
catalogue export (`spark`), a self-signed certificate (`tls`), the Kubernetes backend
(`kubernetes`), most benches (`lab`), plots (`plots`). A command calls `require` first; the
`bluedove` command turns a `MissingExtra` into one line naming the extra and exit status 2,
never a traceback.
"""

from __future__ import annotations

import importlib.util

# extra -> the modules it installs that the commands import (pyproject.toml's optional-dependencies)
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow"),
    "tls": ("cryptography",),
    "kubernetes": ("kubernetes",),
    "lab": ("psutil", "aiohttp"),
    "plots": ("matplotlib",),
}


class MissingExtra(Exception):
    """A command needs an extra that is not installed; the message says what to install."""

    def __init__(self, what: str, extra: str, modules: list[str]) -> None:
        super().__init__(f"{what} needs the '{extra}' extra ({', '.join(modules)} not installed): "
                         f"pip install 'bluedove[{extra}]'")
        self.extra = extra


def missing(extra: str, only: tuple[str, ...] | None = None) -> list[str]:
    """The modules of `extra` (or those of them in `only`) that cannot be imported here."""
    out = []
    for name in only or EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked install counts as missing
            found = False
        if not found:
            out.append(name)
    return out


def require(extra: str, what: str, only: tuple[str, ...] | None = None) -> None:
    """Raise `MissingExtra` when `what` (a command, as the user typed it) cannot run without
    `extra`, or without those of its modules named in `only`."""
    gone = missing(extra, only)
    if gone:
        raise MissingExtra(what, extra, gone)
