"""`bluedove subscribe|publish|poll|unsubscribe|delete-queue` as subprocesses against a cluster with a named space."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import assert_no_children, start_cluster

pytestmark = pytest.mark.integration
SPACE = """dimensions:
  - {name: longitude, min: -180, max: 180}
  - {name: latitude, min: -90, max: 90}
  - {name: speed, min: 0, max: 200}
"""


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A 2-matcher cluster over longitude, latitude, speed."""
    d = tmp_path_factory.mktemp("named")
    (d / "space.yaml").write_text(SPACE)
    c = start_cluster(d, matchers=2, space_file=str(d / "space.yaml"))
    yield c
    c.stop()
    assert_no_children(c)


@pytest.fixture(params=["rest", "grpc"])
def url(request, named):
    return named.url if request.param == "rest" else f"grpc://{named.grpc_address}"


def bluedove(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bluedove", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_subscribe_publish_poll(url):
    sub = json.loads(ok(bluedove("subscribe", "--url", url, "--longitude", "-73.9:-73.8", "--speed=0:25")))
    q, token = sub["queue"], sub["token"]
    second = json.loads(ok(bluedove("subscribe", "--url", url, "--queue", q, "--token", token, "--latitude", "40:41")))
    assert second["queue"] == q and "token" not in second
    mid = ok(bluedove("publish", "--url", url, "--longitude", "-73.85", "--latitude", "40.7", "--speed", "12",
                      "--payload", '{"car": 7}', "--id", f"cli-{time.time_ns()}")).strip()
    lines = "\n".join(json.dumps({"attributes": {"longitude": -73.85 + i / 1000, "latitude": 10, "speed": 5},
                                  "payload": i})
                      for i in range(5)) + "\n" + json.dumps({"attributes": {"longitude": 0, "latitude": 0,
                                                                               "speed": 5}})
    ids = ok(bluedove("publish", "--url", url, "--batch", "2", stdin=lines)).split()
    assert len(ids) == 6
    got = [json.loads(x)
           for x in ok(bluedove("poll", q, "--url", url, "--token", token, "--wait", "5", "--ack")).splitlines()]
    while len(got) < 6:
        more = ok(bluedove("poll", q, "--url", url, "--token", token, "--wait", "2", "--ack")).splitlines()
        assert more, got
        got += [json.loads(x) for x in more]
    by_id = {m["id"]: m for m in got}
    assert set(by_id) == {mid, *ids[:5]}
    assert by_id[mid]["payload"] == {"car": 7} and (sorted(by_id[mid]["subscriptions"])
                                                    == sorted([sub["id"], second["id"]]))
    assert ok(bluedove("poll", q, "--url", url, "--token", token, "--wait", "0")) == ""  # all acked


def test_poll_follow_prints_deliveries_as_they_come(url, named):
    sub = json.loads(ok(bluedove("subscribe", "--url", url, "--speed", "100:101")))
    proc = subprocess.Popen([sys.executable, "-m", "bluedove", "poll", sub["queue"], "--url", url,
                             "--token", sub["token"], "--follow", "--ack"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        for i in range(3):
            ok(bluedove("publish", "--url", url, "--longitude", "1", "--latitude", "2", "--speed", "100.5",
                        "--payload", str(i)))
        lines = [proc.stdout.readline() for _ in range(3)]
        assert all(lines), (f"poll --follow stopped (exit {proc.poll()}): {lines} "
                            f"{proc.stderr.read() if proc.poll() is not None else ''}")
        assert [json.loads(x)["payload"] for x in lines] == [0, 1, 2]
    finally:
        proc.terminate()
        proc.wait(10)


def test_unsubscribe_then_delete_queue(url):
    first = json.loads(ok(bluedove("subscribe", "--url", url, "--speed", "150:151")))
    q, token = first["queue"], first["token"]
    second = json.loads(ok(bluedove("subscribe", "--url", url, "--queue", q, "--token", token, "--speed", "150:152")))
    assert json.loads(ok(bluedove("unsubscribe", first["id"], "--url", url, "--token", token))) == {
        "unsubscribed": first["id"]}
    ok(bluedove("publish", "--url", url, "--longitude", "1", "--latitude", "2", "--speed", "150.5"))
    got = [json.loads(x) for x in ok(bluedove("poll", q, "--url", url, "--token", token, "--wait", "5")).splitlines()]
    assert [m["subscriptions"] for m in got] == [[second["id"]]]  # the removed subscription matched nothing
    again = bluedove("unsubscribe", first["id"], "--url", url, "--token", token)
    assert again.returncode == 1 and "not_found" in again.stderr

    assert json.loads(ok(bluedove("delete-queue", q, "--url", url, "--token", token))) == {"deleted": q}
    gone = bluedove("poll", q, "--url", url, "--token", token, "--wait", "0")
    assert gone.returncode == 1 and "unauthorized" in gone.stderr  # the queue and its token are gone


@pytest.mark.parametrize("args,stdin,message", [
    (["subscribe", "--x0", "1:2"], None,
     "unknown flag --x0; the cluster's dimensions are: --longitude, --latitude, --speed"),
    (["subscribe", "--speed", "5"], None, "--speed: expected LOW:HIGH"),
    (["subscribe", "--speed", "a:5"], None, "--speed: expected a number"),
    (["subscribe", "--speed", "9:5"], None, "(predicates.speed)"),
    (["publish", "--longitude", "1", "--latitude", "2", "--speed", "999"], None, "(attributes.speed)"),
    (["publish", "--longitude", "1", "--latitude", "2"], None, "(attributes.speed)"),
    (["publish"], '{"attributes": {"longitude": 1, "latitude": 2, "speed": 3}}\n{oops\n',
     "stdin line 2: not valid JSON"),
    (["publish", "--batch", "5"], '{"attributes": {"longitude": 1, "latitude": 2, "speed": 3}}\n'
                                  '{"attributes": {"longitude": 1, "latitude": 2, "speed": -3}}\n',
     "(line 2: attributes.speed)"),
    (["poll", "q", "--token", "wrong"], None, "unauthorized"),
    (["poll", "q", "--token", "-wrong"], None, "unauthorized"),  # a value, not a flag
    (["unsubscribe", "s", "--token", "wrong"], None, "unauthorized"),
    (["unsubscribe", "s", "--token", "t", "--speed", "1"], None, "unsubscribe takes no dimension flags"),
    (["delete-queue", "q", "--token", "wrong"], None, "unauthorized"),
])
def test_bad_input_is_a_clear_error_naming_the_flag(named, args, stdin, message):
    r = bluedove(*args, "--url", named.url, stdin=stdin)
    assert r.returncode != 0 and r.stdout == ""
    assert message in r.stderr, r.stderr
