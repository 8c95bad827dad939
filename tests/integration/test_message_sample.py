"""The dispatcher's message sample on real processes: at rate 1 every accepted message is in the
rotated files exactly once, with its point and acceptance time, whichever publish call carried
it (REST single and batch, gRPC Publish, PublishBatch, PublishStream); at rate 0.1 the count
is within a binomial bound; bad sample flags exit 2 naming the flag."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import httpx
import numpy as np
import pytest

from bluedove.client import Client
from bluedove.local.cluster import LocalCluster

pytestmark = pytest.mark.integration

BLUEDOVE = [sys.executable, "-m", "bluedove"]
NAME_RE = re.compile(r"messages-\d{8}T\d{6}-\d{6}\.jsonl")


def points(seed: int, n: int) -> list[list[float]]:
    """n distinct points of the default space (x0..x3 in [0, 1000))."""
    return np.random.default_rng(seed).uniform(0, 1000, (n, 4)).tolist()


def bodies(pts: list[list[float]]) -> list[dict]:
    return [{"attributes": dict(zip(("x0", "x1", "x2", "x3"), p)), "payload": {"i": i}} for i, p in enumerate(pts)]


def read_sample(folder) -> list[dict]:
    """Every line of the whole (.jsonl) files of one dispatcher, oldest file first."""
    out = []
    for f in sorted(folder.glob("*.jsonl")):
        assert NAME_RE.fullmatch(f.name), f.name
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def test_rate_1_samples_every_message_once_across_rotated_files(tmp_path, monkeypatch):
    """600 messages over the five publish calls, files rotated at ~2 KB (set through the
    BLUEDOVE_ variables): after the dispatcher stops, no `.part` is left, the files hold each
    published point exactly once (a lost, doubled or altered sample fails the Counter
    comparison), each timestamp lies within the publishing window, and no file is much
    larger than the rotation size."""
    monkeypatch.setenv("BLUEDOVE_SAMPLE_ROTATE_MB", "0.002")
    monkeypatch.setenv("BLUEDOVE_SAMPLE_KEEP", "10000")
    pts = points(1, 600)
    msgs = bodies(pts)
    cluster = LocalCluster(matchers=2, http_port=0, data_dir=tmp_path, quiet=True, restart=False, sample_rate=1.0)
    cluster.start()
    try:
        t0 = time.time()
        with Client(cluster.url) as rest, Client(f"grpc://{cluster.grpc_address}") as grpc_client:
            for b in msgs[:50]:
                rest.publish(b["attributes"], b["payload"])
            rest.t.publish_batch(msgs[50:200])
            for b in msgs[200:250]:
                grpc_client.publish(b["attributes"], b["payload"])
            grpc_client.t.publish_batch(msgs[250:400])
            grpc_client.t.publish_stream(msgs[400:600])
        t1 = time.time()
        deadline = time.monotonic() + 10
        while metric(cluster.url, "bluedove_sampled_messages_total") < 600 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metric(cluster.url, "bluedove_sampled_messages_total") == 600
        assert metric(cluster.url, "bluedove_sample_dropped_total") == 0
    finally:
        cluster.stop()
    folder = tmp_path / "samples" / "d1"
    assert not list(folder.glob("*.part")), "a file left unfinished at stop"
    files = sorted(folder.glob("*.jsonl"))
    assert len(files) >= 10, f"expected rotation by size, got {len(files)} file(s)"
    assert all(f.stat().st_size < 2 * 0.002 * 1024 * 1024 for f in files)
    sample = read_sample(folder)
    assert Counter(tuple(s["point"]) for s in sample) == Counter(tuple(p) for p in pts)
    assert all(t0 - 0.01 <= s["ts"] <= t1 + 0.01 for s in sample)
    assert json.loads((tmp_path / "samples" / "space.json").read_text()) == cluster.space.to_json()


def test_rate_01_samples_a_binomial_share(tmp_path):
    """4,000 messages in batches of 200 at rate 0.1: the sample holds 400 ± 5 standard deviations
    (19), every sampled point is a published one, none twice."""
    pts = points(2, 4000)
    msgs = bodies(pts)
    cluster = LocalCluster(matchers=2, http_port=0, data_dir=tmp_path, quiet=True, restart=False, sample_rate=0.1)
    cluster.start()
    try:
        with Client(cluster.url) as rest:
            for i in range(0, len(msgs), 200):
                rest.t.publish_batch(msgs[i:i + 200])
    finally:
        cluster.stop()
    sample = [tuple(s["point"]) for s in read_sample(tmp_path / "samples" / "d1")]
    sd = (4000 * 0.1 * 0.9) ** 0.5
    assert abs(len(sample) - 400) <= 5 * sd, len(sample)
    assert len(set(sample)) == len(sample) and set(sample) <= {tuple(p) for p in pts}


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*BLUEDOVE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("flags,env,named", [
    (["--sample-rate", "1.5", "--sample-dir", "{tmp}"], {}, "--sample-rate (BLUEDOVE_SAMPLE_RATE) 1.5"),
    (["--sample-rate", "nan", "--sample-dir", "{tmp}"], {}, "--sample-rate (BLUEDOVE_SAMPLE_RATE) nan"),
    (["--sample-rate", "0.5"], {}, "--sample-dir (BLUEDOVE_SAMPLE_DIR) is required"),
    (["--sample-rate", "0.5", "--sample-dir", "{tmp}/a-file/x"], {},
     "--sample-dir (BLUEDOVE_SAMPLE_DIR) {tmp}/a-file/x"),
    (["--sample-rotate-s", "0"], {}, "--sample-rotate-s (BLUEDOVE_SAMPLE_ROTATE_S) 0"),
    (["--sample-rotate-mb", "-1"], {}, "--sample-rotate-mb (BLUEDOVE_SAMPLE_ROTATE_MB) -1"),
    (["--sample-keep", "0"], {}, "--sample-keep (BLUEDOVE_SAMPLE_KEEP) 0"),
    (["--sample-rate", "x"], {}, "argument --sample-rate: invalid float value"),
    ([], {"BLUEDOVE_SAMPLE_RATE": "2"}, "--sample-rate (BLUEDOVE_SAMPLE_RATE) 2"),
    ([], {"BLUEDOVE_SAMPLE_KEEP": "many"}, "BLUEDOVE_SAMPLE_KEEP='many': expected int"),
])
def test_bad_sample_flags_exit_2_naming_the_flag(tmp_path, flags, env, named):
    """Checked before any store is reached (the store URL here leads nowhere)."""
    (tmp_path / "a-file").write_text("")
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    r = run("dispatcher", "--id", "d1", "--http-port", "1", "--store", "redis://127.0.0.1:1/0", *flags, env=env)
    assert r.returncode == 2, r.stderr
    assert named.replace("{tmp}", str(tmp_path)) in r.stderr, r.stderr


def test_up_refuses_a_bad_sample_rate(tmp_path):
    r = run("up", "--data-dir", str(tmp_path), "--http-port", "0", "--sample-rate", "-0.1")
    assert r.returncode == 2 and "--sample-rate -0.1" in r.stderr, r.stderr


def file_sampler(folder, **kw):
    from prometheus_client import CollectorRegistry
    from prometheus_client import Counter as PromCounter

    from bluedove.core.space import default_space
    from bluedove.dispatcher.sampler import Sampler

    r = CollectorRegistry()
    opts = {"rotate_s": 300.0, "rotate_mb": 64.0, "keep": 48, **kw}
    return Sampler(1.0, folder, "d9", default_space(), opts["rotate_s"], opts["rotate_mb"], opts["keep"],
                   PromCounter("sampled", "", registry=r), PromCounter("dropped", "", registry=r))


def test_keep_n_deletes_the_oldest_files(tmp_path):
    """The writer in-process on real files: ~80 bytes a line, files of ~1 KB, keep 3. After 300
    samples and stop, 3 whole files remain and they hold the newest samples, in order (a kept
    old file or a lost new one fails)."""
    s = file_sampler(tmp_path, rotate_mb=0.001, keep=3).start()
    msgs = np.array([(float(i), 1.0, 2.0, 3.0) for i in range(300)])
    for i in range(0, 300, 7):
        s.offer(100.0 + i, msgs[i:i + 7])
    s.stop()
    files = sorted((tmp_path / "d9").glob("*"))
    assert len(files) == 3 and all(f.suffix == ".jsonl" for f in files), files
    kept = [p["point"][0] for p in read_sample(tmp_path / "d9")]
    assert kept == [float(i) for i in range(300 - len(kept), 300)] and len(kept) >= 24


def test_a_file_is_renamed_whole_after_rotate_s_without_stop(tmp_path):
    """rotate_s 0.3: samples offered once; within 2 s the file is `.jsonl` though the dispatcher
    runs on (a reader need not wait for a stop); the next sample opens a new file."""
    s = file_sampler(tmp_path, rotate_s=0.3).start()
    try:
        s.offer(1.0, np.array([(1.0, 2.0, 3.0, 4.0)]))
        deadline = time.monotonic() + 2
        while not list((tmp_path / "d9").glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [json.loads(x) for f in (tmp_path / "d9").glob("*.jsonl") for x in f.read_text().splitlines()] == \
            [{"ts": 1.0, "point": [1.0, 2.0, 3.0, 4.0]}]
        assert not list((tmp_path / "d9").glob("*.part"))
        s.offer(2.0, np.array([(5.0, 6.0, 7.0, 8.0)]))
    finally:
        s.stop()
    assert len(list((tmp_path / "d9").glob("*.jsonl"))) == 2


def test_a_part_left_by_a_dead_dispatcher_is_cut_to_whole_lines(tmp_path):
    """A `.part` ending in half a line (the process was killed mid-write): the next start keeps
    its whole lines as a `.jsonl`, and numbers its own files after it."""
    folder = tmp_path / "d9"
    folder.mkdir()
    (folder / "messages-20261124T010000-000004.jsonl.part").write_text(
        '{"ts":1.0,"point":[1.0,2.0,3.0,4.0]}\n{"ts":2.0,"poi')
    s = file_sampler(tmp_path).start()
    s.offer(3.0, np.array([(9.0, 9.0, 9.0, 9.0)]))
    s.stop()
    names = sorted(f.name for f in folder.iterdir())
    assert names[0] == "messages-20261124T010000-000004.jsonl" and names[1].endswith("-000005.jsonl"), names
    assert [x["ts"] for x in read_sample(folder)] == [1.0, 3.0]
