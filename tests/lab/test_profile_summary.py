"""The py-spy summary of `bench e2e --profile` (bluedove/lab/bench/profile.py) on a small hand-made raw profile:
each stack's category, waiting threads left out, and the per-message split of the process's CPU."""

from __future__ import annotations

import pytest

from bluedove.lab.bench.profile import (
    ASYNCIO,
    CATEGORIES,
    DECODE,
    GRPC,
    MATCHER_DECODE,
    OTHER,
    PB_BUILD,
    RANKING,
    RESULTS,
    STORE,
    VALIDATION,
    WALK,
    categorise,
    parse_raw,
    per_message,
    resummarise,
    summarise,
)

LOOP = ("<module> (bluedove:8);main (bluedove/cli/main.py:360);run (asyncio/runners.py:190);"
        "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)")
ROUTE = (f"{LOOP};FastAPI.__call__ (fastapi/applications.py:1224);"
         "publish_batch (bluedove/dispatcher/routes/messages.py:22)")
DISPATCHER = "\n".join([
    # json.loads under the route's body reader: request decode
    f"{ROUTE};json_body (bluedove/dispatcher/deps.py:19);loads (json/__init__.py:346);"
    "JSONDecoder.raw_decode (json/decoder.py:353) 30",
    f"{ROUTE};publish_rest_batch (bluedove/dispatcher/operations/publish.py:99);"
    "parse_batch (bluedove/core/model.py:160);"
    "parse_message (bluedove/core/model.py:120) 10",
    # the message body's JSON is the body's build, not HTTP: json passes the decision on
    f"{ROUTE};publish_parsed (bluedove/dispatcher/operations/publish.py:193);"
    "outgoing (bluedove/dispatcher/operations/publish.py:60);"
    "dumps (json/__init__.py:238);JSONEncoder.iterencode (json/encoder.py:258) 20",
    f"{ROUTE};publish_parsed (bluedove/dispatcher/operations/publish.py:193);"
    "outgoing (bluedove/dispatcher/operations/publish.py:60);"
    "__create_fn__.<locals>.__init__ (<string>:3) 5",
    f"{ROUTE};publish_parsed (bluedove/dispatcher/operations/publish.py:196);"
    "Forwarder.publish (bluedove/dispatcher/publish/forwarder.py:105);"
    "ClusterView.ranked_candidates (bluedove/dispatcher/view.py:210);rank (bluedove/core/forwarding.py:120) 15",
    f"{LOOP};Forwarder._forward (bluedove/dispatcher/publish/forwarder.py:160);"
    "UnaryUnaryCall._invoke (grpc/aio/_call.py:560) 8",
    # the lane call's own lines build the ForwardRequest
    f"{LOOP};Forwarder._forward (bluedove/dispatcher/publish/forwarder.py:159) 2",
    # asyncio's own work at the leaf, under the service's code
    f"{ROUTE};publish_parsed (bluedove/dispatcher/operations/publish.py:196);"
    "Forwarder.publish (bluedove/dispatcher/publish/forwarder.py:115);"
    "gather (asyncio/tasks.py:800) 6",
    f"{LOOP} 4",
    # the service's code that no rule names
    f"{ROUTE};publish_parsed (bluedove/dispatcher/operations/publish.py:201);"
    "Series.on_publish (bluedove/dispatcher/series.py:40) 3",
    # waiting threads: left out
    "<module> (bluedove:8);BaseEventLoop._run_once (asyncio/base_events.py:1886);"
    "EpollSelector.select (selectors.py:468) 50",
    "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045);"
    "Thread.run (threading.py:982) 7",
    "not a stack line",
    "",
])
MATCHER = "\n".join([
    "Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:83);"
    "MatcherQueue._match (bluedove/matcher/queues.py:168);SubscriptionSet.match_batch (bluedove/matcher/index.py:190);"
    "SubscriptionSet.match_ids (bluedove/matcher/index.py:174);PackedTree.query (bluedove/matcher/packed.py:93) 40",
    "Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:83);"
    "MatcherQueue._match (bluedove/matcher/queues.py:168);Directory.matches (bluedove/matcher/matches.py:99) 10",
    f"{LOOP};_handle_unary (grpc/aio/_server.py:1);deserialize (grpc/_common.py:88) 6",
    f"{LOOP};MatcherServicer.Forward (bluedove/matcher/servicer.py:45);"
    "SpaceState.forward (bluedove/matcher/space_state.py:170) 14",
    f"{LOOP};MatcherQueue._finish (bluedove/matcher/queues.py:190) 5",
    f"{LOOP};Store.deliver (bluedove/store/store.py:300);Pipeline.execute (redis/asyncio/client.py:1500) 5",
    "Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:81) 30",
])


def test_raw_lines_parse_into_frames_and_counts():
    rows = parse_raw(DISPATCHER)
    assert len(rows) == 12  # the line without a count and the empty one are skipped
    frames, n = rows[0]
    assert n == 30 and frames[0] == ("<module>", "bluedove") and frames[-1] == ("JSONDecoder.raw_decode",
                                                                               "json/decoder.py")


def test_each_dispatcher_stack_lands_in_its_category():
    cats = [categorise(frames, "dispatcher") for frames, _ in parse_raw(DISPATCHER)[:10]]
    assert cats == [DECODE, VALIDATION, PB_BUILD, PB_BUILD, RANKING, GRPC, PB_BUILD, ASYNCIO, ASYNCIO, OTHER]


def test_the_summary_leaves_waiting_threads_out_and_shares_add_up():
    s = summarise(DISPATCHER, "dispatcher")
    assert list(s["by_category"]) == list(CATEGORIES)
    assert s["waiting"] == 57 and s["samples"] == 30 + 10 + 25 + 15 + 10 + 10 + 3
    assert s["by_category"][DECODE] == 30 and s["by_category"][PB_BUILD] == 27 and s["by_category"][GRPC] == 8
    assert s["by_category"][WALK] == 0 and sum(s["share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert s["top_self"][0] == {"function": "JSONDecoder.raw_decode (json/decoder.py)", "samples": 30}


def test_matcher_stacks_and_the_split_of_its_cpu_per_message():
    s = summarise(MATCHER, "matcher")
    assert s["waiting"] == 30 and s["samples"] == 80
    assert s["by_category"][WALK] == 40 and s["by_category"][MATCHER_DECODE] == 20
    assert s["by_category"][RESULTS] == 10  # the walk's ids to counts and deliveries
    assert s["by_category"][STORE] == 5 and s["by_category"][OTHER] == 5
    # 2 s of process CPU over 10,000 messages: 200 µs per message, split by the shares
    out = per_message(s, 10_000, 2.0)
    assert out["process_us_per_msg"] == 200.0
    assert out["us_per_msg"][WALK] == pytest.approx(200 * 40 / 80, abs=0.01)
    assert sum(out["us_per_msg"].values()) == pytest.approx(200.0, abs=0.05)
    assert out["sampled_us_per_msg"] == pytest.approx(80 / 100 * 1e6 / 10_000)
    assert per_message(s, 0, 2.0) == {"us_per_msg": None}


def test_a_result_is_summarised_again_from_its_raw_files(tmp_path):
    raw = tmp_path / "m1.txt"
    raw.write_text(MATCHER)
    result = {"systems": {"mpartition": {"profile": {"processes": {
        "m1": {"raw": str(raw), "messages": 10_000, "process_cpu_s": 2.0, "by_category": {}},
        "d1": {"error": "py-spy could not attach"}}}}}}
    procs = resummarise(result)["systems"]["mpartition"]["profile"]["processes"]
    assert procs["m1"]["by_category"][WALK] == 40 and procs["m1"]["us_per_msg"][WALK] == pytest.approx(100.0)
    assert procs["d1"] == {"error": "py-spy could not attach"}
