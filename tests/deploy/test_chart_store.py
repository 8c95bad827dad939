"""The chart pointed at an external store: a Redis Cluster's URL, and the render-time checks
of a URL the pods would refuse when they start."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.deploy.chart import render


def external(**redis) -> dict:
    return {"redis": {"enabled": False}, "externalRedis": redis}


def containers(r) -> list[tuple[str, dict]]:
    """Every container of every pod the release makes (workloads, the test hook, Redis)."""
    out = []
    for o in r.objects:
        spec = o["spec"] if o["kind"] == "Pod" else o.get("spec", {}).get("template", {}).get("spec")
        if spec:
            out += [(f"{o['kind']}/{o['metadata']['name']}", c)
                    for c in spec.get("initContainers", []) + spec["containers"]]
    return out


def store_arg(c: dict) -> str:
    return c["args"][c["args"].index("--store") + 1]


@pytest.mark.parametrize("url", [
    "redis+cluster://r:6379",
    "redis+cluster://a.data.svc:7000,b.data.svc:7001,[fd00::3]:7002",
    "rediss+cluster://user@a:6379,b:6379/0?wait=1&wait_ms=250",
    "redis+cluster://:pw@a:6379/?wait=0",
    "REDIS+CLUSTER://a:6379",
    "redis://r:6380/2",
    "rediss://user:pw@r/0?ssl_cert_reqs=none",
])
def test_good_urls_pass_as_they_are(url):
    [(_, c)] = [(w, c) for w, c in containers(render(external(url=url))) if w == "StatefulSet/bluedove-matcher"]
    assert store_arg(c) == url


@pytest.mark.parametrize("url, part", [
    ("http://r:6379", "is not a store URL: it starts with redis:// or rediss:// (one server), "
                      "or redis+cluster:// or rediss+cluster:// (a Redis Cluster)"),
    ("unix:///run/redis.sock", "is not a store URL"),
    ("redis+cluster://", "names no node: a Redis Cluster's URL is redis+cluster://host:port[,host:port...]"),
    ("redis+cluster://a:6379,b", 'node "b" is not host:port'),
    ("redis+cluster://a:6379,,b:6379", 'node "" is not host:port'),
    ("redis+cluster://a:6379,b:70000", 'node "b:70000": port 70000 is not in 1-65535'),
    ("redis+cluster://a:6379/1", 'only "/0" (a Redis Cluster has database 0 alone)'),
    ("redis+cluster://a:6379?wiat=1", 'unknown option "wiat" (known: wait, wait_ms)'),
    ("redis+cluster://a:6379?wait=-1", 'wait="-1" is not a whole number >= 0'),
    ("redis+cluster://a:6379?wait", 'wait="" is not a whole number >= 0'),
    ("redis+cluster://a:6379?wait_ms=0", 'wait_ms="0" is not a whole number >= 1'),
    ("redis://a:6379,b:6379", "lists several nodes: a Redis Cluster's URL starts with redis+cluster://"),
    ("rediss://a:6379,b:6379", "starts with rediss+cluster://"),
    ("redis:///0", '"" is not host[:port]'),
    ("redis://r:99999/0", "port 99999 is not in 1-65535"),
])
def test_a_bad_url_is_refused_when_the_chart_renders(url, part):
    """Each a URL the store client would refuse (or could not reach from a pod), with what is
    wrong with it, before anything is installed."""
    with pytest.raises(helm.HelmRenderError) as e:
        render(external(url=url))
    assert "1 problem(s)" in str(e.value)
    assert f'externalRedis.url "{url}"' in str(e.value)  # which value, as given
    assert part in str(e.value)


def test_a_refused_url_is_shown_without_its_password():
    with pytest.raises(helm.HelmRenderError) as e:
        render(external(url="redis+cluster://app:s3cr%40t@a:6379,b"))
    assert 'externalRedis.url "redis+cluster://app:***@a:6379,b": node "b"' in str(e.value)
    assert "s3cr" not in str(e.value)
