"""`bluedove bench latency` on a real small cluster: every expected delivery arrives exactly once
(the bench checks against the brute-force oracle and exits 1 otherwise), and the figures it
reports are shaped and ordered as documented. No timed thresholds: speed is the bench's to report."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from bluedove.lab.bench import parse
from bluedove.lab.bench.latency_clients import Acks

TINY = ["--subs", "120", "--matchers", "2", "--rate", "200", "--load", "0.5", "--single-rate", "10",
        "--duration", "1.5", "--warmup", "0.3", "--json"]


def _bench(*flags: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "latency", *TINY, *flags],
                       capture_output=True, text=True, timeout=80)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _ordered(d: dict) -> None:
    values = [d[k] for k in ("p50_ms", "p95_ms", "p99_ms") if k in d]
    assert values == sorted(values), d


def _check_level(lv: dict, grpc: bool) -> None:
    assert lv["expected"] > 0 and lv["received"] == lv["expected"]
    assert lv["missing"] == lv["duplicates"] == lv["unexpected"] == lv["failed_messages"] == 0
    assert 0 < lv["timed"] <= lv["received"]
    assert lv["delivered"]["p50_ms"] > 0 and lv["publish_call"]["p50_ms"] > 0
    for d in (lv["delivered"], lv["publish_call"], *(s for s in lv["stages"].values() if s)):
        _ordered(d)
    # publish -> delivered covers the publish request reaching the dispatcher
    assert lv["delivered"]["p50_ms"] >= lv["stages"]["publish_to_accepted"]["p50_ms"]
    assert (lv["stages"]["client_decode"] is None) == grpc and (lv["poll_gap"] is None) == grpc
    assert set(lv["cpu_pct"]) >= {"d1", "m1", "redis", "bench", "publisher"}


@pytest.mark.integration
def test_long_polling_subscribers_get_every_delivery_once():
    out = _bench()
    assert out["kind"] == "latency" and out["listen"] == "poll" and out["saturation_measured"] is False
    assert [lv["level"] for lv in out["levels"]] == ["single", "0.5"]
    single, half = out["levels"]
    assert single["batch"] == 1 and single["rate"] == 10 and half["rate"] == 100
    for lv in out["levels"]:
        _check_level(lv, grpc=False)
    assert out["subscriber_errors"] == {} and out["listen_stream_ends"] is None


@pytest.mark.integration
def test_listen_streams_get_every_delivery_once():
    out = _bench("--listen", "grpc", "--single-rate", "0", "--matchers", "1")
    assert out["listen"] == "grpc" and [lv["level"] for lv in out["levels"]] == ["0.5"]
    _check_level(out["levels"][0], grpc=True)
    # no stream ended while the bench held it, and no ack failed
    assert out["listen_stream_ends"] == {} and out["subscriber_errors"] == {}


async def test_a_streams_acks_go_one_call_at_a_time_with_what_arrived_meanwhile():
    sent: list[list[str]] = []
    release = asyncio.Event()

    async def send(receipts: list[str]) -> None:
        sent.append(receipts)
        await release.wait()

    acks = Acks(send)
    for r in ("a", "b", "c"):
        acks.add(r)
    await asyncio.sleep(0)
    assert sent == [["a", "b", "c"]]  # one call, not one a delivery
    acks.add("d")
    acks.add("e")
    await asyncio.sleep(0)
    assert sent == [["a", "b", "c"]]  # the next waits for the call out
    release.set()
    await asyncio.wait_for(acks.task, 5)
    assert sent == [["a", "b", "c"], ["d", "e"]] and acks.task is None
    acks.add("f")
    await asyncio.wait_for(acks.task, 5)
    assert sent[-1] == ["f"]


@pytest.mark.parametrize("flags", [["--load", "0"], ["--load", "x"], ["--rate", "-1"], ["--duration", "0"]])
def test_bad_flags_exit_2(flags, capsys):
    args = parse(["latency", *flags])
    assert args.func(args) == 2
    assert "bench latency:" in capsys.readouterr().err
