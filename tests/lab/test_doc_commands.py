"""Every `bluedove bench …` command line the docs show is one the bench's parser accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bluedove.lab.bench import BENCHES, parse

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"bluedove bench ([a-z0-9-]+(?: [^`#|]*)?)")


def documented() -> list[tuple[str, str]]:
    out = []
    for path in sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"]):
        for line in path.read_text().splitlines():
            for m in COMMAND.finditer(line):
                try:
                    words = shlex.split(m[1])
                except ValueError:  # a command cut by the line's end
                    continue
                words = [w for w in words if "…" not in w and not w.startswith("<")]
                if words and words[0] in BENCHES:
                    out.append((path.name, " ".join(words)))
    return out


def test_the_docs_show_bench_commands():
    assert len(documented()) >= 10


@pytest.mark.parametrize("where,command", documented())
def test_a_documented_bench_command_parses(where, command):
    parse(shlex.split(command))  # argparse exits (a test failure) on a flag the bench does not take
