"""The whole job in process: without a message sample; bad input. (By `spark-submit`, its seed
checked against a numpy oracle of the load model: tests/spark/test_pipeline.py, on the sample
and catalogue export of a running cluster.)"""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.lab.bench.seed import write_inputs  # the inputs exactly as the bench writes them
from bluedove.lab.workloads.paper import paper
from bluedove.spark.job import Job, read_space
from bluedove.spark.skew_stats import run


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
