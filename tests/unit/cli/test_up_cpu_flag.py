"""`bluedove up --matcher-cpu` / `--dispatcher-cpu`: a number of cores above 0 and at most the
machine's, else exit code 2 naming the flag before anything starts."""

from __future__ import annotations

import os

import pytest

from bluedove.cli.main import build_parser
from bluedove.cli.up_cmd import run


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--matcher-cpu", "0", "--matcher-cpu 0: expected a number of cores above 0"),
    ("--dispatcher-cpu", "-0.5", "--dispatcher-cpu -0.5: expected a number of cores above 0"),
    ("--matcher-cpu", str((os.cpu_count() or 1) + 1), "--matcher-cpu"),
])
def test_a_cpu_flag_out_of_range_is_a_usage_error(tmp_path, capsys, flag, value, says):
    args = build_parser().parse_args(["up", flag, value, "--data-dir", str(tmp_path / "data")])
    assert run(args) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # refused before anything started


def test_the_flags_default_to_no_cap():
    args = build_parser().parse_args(["up"])
    assert (args.matcher_cpu, args.dispatcher_cpu) == (None, None)
