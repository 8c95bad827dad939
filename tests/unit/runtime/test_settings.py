"""bluedove/runtime/settings.py: the matcher's timeouts and delays are settings, read from BLUEDOVE_*."""

from dataclasses import fields

import pytest

from bluedove.runtime.settings import MatcherSettings, from_env

TIMES = [f.name for f in fields(MatcherSettings) if f.name.endswith("_s")]


@pytest.mark.parametrize("name", TIMES)
def test_every_matcher_time_is_read_from_the_environment(monkeypatch, name):
    monkeypatch.setenv(f"BLUEDOVE_{name.upper()}", "7")
    assert getattr(from_env(MatcherSettings), name) == 7


@pytest.mark.parametrize("name", ["leave_timeout_s", "left_owner_timeout_s", "change_retry_s", "leave_retry_s",
                                  "report_timeout_s", "prepare_timeout_s", "export_timeout_s", "table_wait_s",
                                  "catalog_retry_s", "trim_check_s", "trim_retry_s"])
def test_the_table_change_timeouts_are_settings(name):
    assert name in TIMES and getattr(MatcherSettings(), name) > 0
