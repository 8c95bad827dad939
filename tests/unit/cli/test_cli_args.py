"""`bluedove subscribe|publish|poll` argument handling that needs no cluster."""

from __future__ import annotations

from bluedove.cli.pubsub import attach_values


def test_flag_values_that_start_with_a_dash_stay_values():
    argv = ["poll", "q", "--token", "-Ab_9", "--follow", "--max", "5"]
    assert attach_values(argv) == ["poll", "q", "--token=-Ab_9", "--follow", "--max", "5"]
    assert attach_values(["publish", "--payload", "-5", "--x0", "-1"]) == ["publish", "--payload=-5", "--x0", "-1"]
    assert attach_values(["publish", "--id"]) == ["publish", "--id"]  # argparse reports the missing value
