"""The whole job in process: without a message sample; bad input. (By `spark-submit`, its seed
checked against a numpy oracle of the load model: tests/spark/test_pipeline.py, on the sample
and catalogue export of a running cluster.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bluedove.cli.export_cmd import attribute_spaces, catalogue_row, write_parquet
from bluedove.core.space import Space
from bluedove.lab.bench.seed import write_inputs  # the inputs exactly as the bench writes them
from bluedove.lab.workloads.paper import paper
from bluedove.spark import transforms as T
from bluedove.spark.job import Job, read_space, read_space_file
from bluedove.spark.skew_stats import attributes_report, bucket_edges, extract_messages, extract_subscriptions, run


def test_without_a_sample_messages_are_taken_as_uniform(spark, tmp_path):
    w = paper(adverse=0, n_subs=2000, seed=2, dims=2)
    subs, _ = write_inputs(tmp_path, w, w.messages(10, 1), np.zeros(10))
    seed = run(spark, Job(subscriptions=str(subs), space=read_space(str(tmp_path / "space.json")), matchers=3),
               say=lambda *_: None)
    assert seed["inputs"]["messages"] is None and seed["inputs"]["message_count"] == 0
    h = seed["dimensions"]["x0"]["histogram"]
    widths = np.diff(h["edges"])
    assert np.asarray(h["messages"]) / widths == pytest.approx(np.full(len(widths), 1e6 / 1000.0))
    # Uniform messages: the load follows the subscriptions, densest round x0's hot spot (125).
    b = seed["dimensions"]["x0"]["boundaries"]
    assert b[1] < 333 and seed["dimensions"]["x0"]["segment_load"] == pytest.approx([1 / 3] * 3, abs=0.01)
    assert seed["inputs"]["windows"] == 0  # no time: the risk rests on the mean loads alone


def test_bad_input_stops_before_spark_starts_with_the_flag_named(tmp_path):
    from bluedove.spark.skew_stats import main
    (tmp_path / "subscriptions").mkdir()
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--matchers", "2"]) == 2  # no space.json
    (tmp_path / "space.json").write_text('{"dimensions": [{"name": "x", "min": 0, "max": 1}]}')
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--matchers", "0"]) == 2
    (tmp_path / "bad.json").write_text('{"dimensions": [{"name": "x", "min": 1, "max": 0}]}')
    assert main(["--subscriptions", str(tmp_path / "subscriptions"), "--space", str(tmp_path / "bad.json"),
                 "--matchers", "2"]) == 2


# -- typed spaces: string dimensions and the choice of the partition attributes --------------
TINY = Space.from_json({"attributes": [{"name": "region", "type": "string"},
                                       {"name": "amount", "type": "number", "min": 0, "max": 100},
                                       {"name": "express", "type": "boolean"},
                                       {"name": "note", "type": "string", "optional": True}],
                        "partition": ["region", "amount"]})
TINY_SUBS = [{"region": "eu", "amount": [0, 50]}, {"region": {"in": ["eu", "us"]}}, {"amount": {"gte": 90}},
             {"express": True, "region": "us"}, {"note": {"exists": True}}, {"region": {"not_in": ["ap"]}}]
# The oracle: per subscription, the values its conditions on each attribute admit on that
# attribute's coordinates (what a partition on it can use), and the fraction of its range.
T48 = 256.0 ** 6
TINY_ORACLE = [{"region": (lambda v: v == "eu", 1 / T48), "amount": (lambda v: 0 <= v < 50, 0.5)},
               {"region": (lambda v: v in ("eu", "us"), 2 / T48)},
               {"amount": (lambda v: v >= 90, 0.1)},
               {"express": (lambda v: v is True, 0.5), "region": (lambda v: v == "us", 1 / T48)},
               {"note": (lambda v: True, 1.0)},
               {"region": (lambda v: True, 1.0)}]  # not_in: no interval of coordinates, the whole range


def typed_inputs(folder: Path, space: Space, predicates: list[dict], messages: list[dict]) -> tuple[Path, Path]:
    """The catalogue export's Parquet (as `bluedove export catalogue` writes it) and a message
    sample (as the dispatchers' sampler writes it: the partition attributes' coordinates)."""
    alone = attribute_spaces(space)
    rows = (catalogue_row(f"s{j}", "q", p, space, alone) for j, p in enumerate(predicates))
    (folder / "subscriptions").mkdir(parents=True)
    write_parquet(rows, space, folder / "subscriptions", 10**6, 10**5)
    (folder / "space.json").write_text(json.dumps(space.to_json()))
    (folder / "samples").mkdir()
    with open(folder / "samples" / "messages-0.jsonl", "w") as f:
        for t, m in enumerate(messages):
            point = [space.by_name[d].coordinate(m.get(d)) for d in space.names]
            f.write(json.dumps({"ts": t * 0.01, "point": point}) + "\n")
    return folder / "subscriptions", folder / "samples"


def typed_job(folder: Path, subs: Path, matchers: int, messages: Path | None, count: int | None = None) -> Job:
    space = read_space_file(str(folder / "space.json"))
    return Job(subscriptions=str(subs), space=space.dimensions, matchers=matchers,
               messages=str(messages) if messages else None, attributes=space.attributes, space_json=space.raw,
               partition_count=count, window_s=0.5)


def test_the_attribute_report_against_a_python_oracle(spark, tmp_path):
    regions = ["eu"] * 60 + ["us"] * 30 + ["ap"] * 10
    msgs = [{"region": r, "amount": float(i), "express": i % 2 == 0} for i, r in enumerate(regions)]
    subs, samples = typed_inputs(tmp_path, TINY, TINY_SUBS, msgs)
    job = typed_job(tmp_path, subs, 2, samples)
    frame, messages = extract_subscriptions(spark, str(subs)), extract_messages(spark, str(samples))
    edges, _ = bucket_edges(frame, messages, job.space, 64, job.kinds())
    counted = T.message_histogram(T.message_buckets(messages, edges), 2).collect()
    hists = [{"messages": [0.0] * (len(e) - 1)} for e in edges]
    for r in counted:
        hists[r["dim"]]["messages"][r["bucket"]] = r["messages"]
    report = attributes_report(job, frame, edges, hists, len(TINY_SUBS), True)
    assert report is not None
    rows = {r["name"]: r for r in report["by_attribute"]}
    for a in TINY.schema:
        conds = [o[a.name] for o in TINY_ORACLE if a.name in o]
        r = rows[a.name]
        assert r["constrained"] == pytest.approx(len(conds) / len(TINY_SUBS))
        assert r["domain_fraction"] == pytest.approx(np.mean([share for _, share in conds]), rel=1e-9)
        if a.name in TINY.names:  # in the sample: the fraction of the sampled messages admitted
            want = np.mean([np.mean([test(m[a.name]) for m in msgs]) for test, _ in conds])
            assert r["message_fraction"] == pytest.approx(want, abs=0.01)
            assert r["score"] == pytest.approx(r["constrained"] * (1 - r["message_fraction"]))
        else:
            assert r["message_fraction"] is None
    # region: 4/6 × (1 − 0.7) = 0.2; amount: 2/6 × (1 − 0.3) = 0.23; express 1/6 × 0.5; note admits all.
    assert report["recommended"] == ["amount", "region"] and report["partition"] == ["region", "amount"]
    # Without a sample the selectivity is the range's: one region of 2⁴⁸ coordinates is narrow.
    job.partition_count = 1
    report = attributes_report(job, frame, edges, hists, len(TINY_SUBS), False)
    assert report is not None and report["recommended"] == ["region"]
