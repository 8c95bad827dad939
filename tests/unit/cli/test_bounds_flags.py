"""`bluedove up`'s bounds flags become the BLUEDOVE_* settings of every matcher and dispatcher."""

from __future__ import annotations

from bluedove.cli.main import build_parser
from bluedove.local.flags import bounds_env
from bluedove.runtime.settings import DispatcherSettings, MatcherSettings, from_env


def test_the_flags_given_become_the_environment_and_the_others_stay_unset():
    args = build_parser().parse_args(["up", "--max-undelivered", "500", "--retention-s", "60"])
    assert bounds_env(args) == {"BLUEDOVE_MAX_UNDELIVERED": "500", "BLUEDOVE_RETENTION_S": "60"}
    args = build_parser().parse_args(["up", "--max-outstanding", "10", "--max-queued", "20"])
    assert bounds_env(args) == {"BLUEDOVE_MAX_OUTSTANDING": "10", "BLUEDOVE_MAX_QUEUED": "20"}
    assert bounds_env(build_parser().parse_args(["up"])) == {}


def test_the_environment_sets_both_tiers(monkeypatch):
    monkeypatch.setenv("BLUEDOVE_MAX_UNDELIVERED", "7")
    monkeypatch.setenv("BLUEDOVE_MAX_QUEUED", "3")
    monkeypatch.setenv("BLUEDOVE_MAX_OUTSTANDING", "4")
    m, d = from_env(MatcherSettings), from_env(DispatcherSettings)
    assert (m.max_undelivered, d.max_undelivered, m.max_queued, d.max_outstanding) == (7, 7, 3, 4)
