"""`bluedove subscribe|publish|poll` argument handling that needs no cluster, in the full command and
the light one (bluedove/client/cli.py's `main`)."""

from __future__ import annotations

import argparse

import pytest

from bluedove.cli.main import build_parser
from bluedove.client import cli as client_cli
from bluedove.client.cli import COMMANDS, add_parsers, attach_values, parse_args


def test_flag_values_that_start_with_a_dash_stay_values():
    argv = ["poll", "q", "--token", "-Ab_9", "--follow", "--max", "5"]
    assert attach_values(argv) == ["poll", "q", "--token=-Ab_9", "--follow", "--max", "5"]
    assert attach_values(["publish", "--payload", "-5", "--x0", "-1"]) == ["publish", "--payload=-5", "--x0", "-1"]
    assert attach_values(["publish", "--id"]) == ["publish", "--id"]  # argparse reports the missing value


def _choices(parser: argparse.ArgumentParser) -> set[str]:
    return set(next(a for a in parser._actions if a.dest == "command").choices)


def test_the_full_command_has_the_client_commands_and_the_light_one_only_those(monkeypatch):
    """One code for both: bluedove/cli/main.py registers the client's parsers; the light `bluedove`
    (the bluedove-client distribution's) has nothing else."""
    full = build_parser()
    assert set(COMMANDS) <= _choices(full) and {"up", "matcher", "dispatcher"} <= _choices(full)
    light = argparse.ArgumentParser(prog="bluedove")
    add_parsers(light.add_subparsers(dest="command", required=True))
    assert _choices(light) == set(COMMANDS)
    seen = []
    monkeypatch.setattr(client_cli, "run", lambda args: seen.append(args) or 0)
    with pytest.raises(SystemExit) as done:
        client_cli.main(["publish", "--x0", "-1", "--payload", "-5"])
    assert done.value.code == 0 and seen[0].command == "publish" and seen[0].payload == "-5"
    assert seen[0].extra == ["--x0", "-1"]  # the cluster's dimensions, read once its space is known
    with pytest.raises(SystemExit) as done:
        client_cli.main(["up"])
    assert done.value.code == 2


def test_unknown_flags_of_other_commands_are_refused(capsys):
    with pytest.raises(SystemExit) as done:
        parse_args(build_parser(), ["init", "--store", "redis://h:1/0", "--space", "s.yaml", "--x0", "1"])
    assert done.value.code == 2 and "unrecognized arguments: --x0 1" in capsys.readouterr().err
    assert parse_args(build_parser(), ["poll", "q", "--token", "-t", "--x0", "1"]).extra == ["--x0", "1"]
