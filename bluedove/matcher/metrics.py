"""A matcher's Prometheus metrics (`--metrics-port`; docs/metrics.md lists them): read from the
matcher's own state when a scrape comes, on its event loop (bluedove/runtime/telemetry.py serves
them there), so nothing is counted twice and nothing changes under the reader."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from bluedove.matcher.load import BATCH_BOUNDS
from bluedove.matcher.matcher import Matcher
from bluedove.matcher.queues import MatcherQueue
from bluedove.matcher.space_state import SpaceState
from bluedove.runtime.space_labels import SpaceLabels
from bluedove.runtime.telemetry import process_registry

DIM = ["dimension"]
# A space's figures on this matcher, summed over its dimensions: (key, family, help, counter?)
PER_SPACE = (
    ("received", "bluedove_matcher_space_messages_received", "Messages of the space forwarded to this matcher", True),
    ("processed", "bluedove_matcher_space_messages_processed", "Messages of the space matched and stored", True),
    ("matches", "bluedove_matcher_space_matches", "Subscriptions of the space matched", True),
    ("deliveries", "bluedove_matcher_space_deliveries", "Deliveries of the space handed to the store", True),
    ("written", "bluedove_matcher_space_deliveries_written", "Deliveries of the space the store wrote", True),
    ("q", "bluedove_matcher_space_queue_messages", "Messages of the space waiting, being matched or stored", False),
)


class MatcherCollector(Collector):
    """A matcher's Prometheus metrics, read from its own state when a scrape comes."""

    def __init__(self, matcher: Matcher) -> None:
        self.m = matcher
        self.labels = SpaceLabels(matcher.s.metrics_spaces)

    def collect(self) -> Iterator[Metric]:
        m = self.m
        names = list(m.table.space.names) if m.table is not None else []
        yield GaugeMetricFamily("bluedove_matcher_ready", "1 once the matcher has loaded its subscriptions and "
                                "serves", value=1 if m.ready else 0)
        yield GaugeMetricFamily("bluedove_matcher_table_epoch", "Epoch of the segment table the matcher holds",
                                value=m.table.epoch if m.table is not None else 0)
        transport = m.membership.transport
        yield CounterMetricFamily("bluedove_matcher_gossip_sent_bytes", "Gossip bytes this matcher sent",
                                  value=transport.bytes_sent)
        yield CounterMetricFamily("bluedove_matcher_gossip_sent_messages", "Gossip messages this matcher sent",
                                  value=transport.sent)
        if m.queue is None or len(m.stats) != len(names):
            return  # still booting: no table, no queues yet
        yield from self._per_space([m.default, *(sv.state for sv in list(m.named.served.values()))])
        yield from self._per_dimension(m, m.queue, names)
        totals = m.queue.totals
        yield CounterMetricFamily("bluedove_matcher_deliveries_written", "Deliveries the store wrote (a message "
                                  "it has seen before writes none)", value=totals.written)
        yield CounterMetricFamily("bluedove_matcher_deliveries_dropped", "Deliveries refused because their queue "
                                  "held its cap of undelivered deliveries", value=m.store.dropped)
        yield CounterMetricFamily("bluedove_matcher_forwards_refused", "Forward calls refused because a "
                                  "dimension's input queue was over its bound (backpressure)",
                                  value=m.refused)
        cpu = m.queue.cpu.read(time.monotonic())  # zeros where no limit is known
        limited = cpu.cores > 0
        for name, help_, value in (
                ("bluedove_matcher_cpu_limit_cores", "CPU limit of the matcher's cgroup (quota / period); 0 where "
                 "none is known", cpu.cores),
                ("bluedove_matcher_cpu_limit_used_ratio", "CPU used over the stats window as a fraction of the limit "
                 "(NaN without one)", cpu.used if limited else math.nan),
                ("bluedove_matcher_cpu_throttled_ratio", "Share of its CFS periods with work in which it was "
                 "throttled, over the stats window (NaN without a limit)", cpu.throttled if limited else math.nan)):
            yield GaugeMetricFamily(name, help_, value=value)
        h = HistogramMetricFamily("bluedove_matcher_batch_messages", "Messages per matched and stored batch")
        cum, buckets = 0, []
        for bound, n in zip((*map(str, BATCH_BOUNDS), "+Inf"), totals.batches):
            cum += n
            buckets.append((f"{float(bound)}" if bound != "+Inf" else bound, cum))
        h.add_metric([], buckets, sum_value=totals.batch_messages)
        yield h

    def _per_space(self, states: list[SpaceState]) -> Iterator[Metric]:
        """The families labelled by space (bounded: bluedove/runtime/space_labels.py), each space's
        dimensions summed: a space served here but not yet started counts 0."""
        sums: dict[str, dict[str, float]] = {}
        for st in states:
            at = sums.setdefault(self.labels(st.name), dict.fromkeys((k for k, *_ in PER_SPACE), 0))
            q = st.queue
            if q is None:
                continue
            at["received"] += sum(w.total_arrived for w in st.stats)
            at["processed"] += sum(w.total_processed for w in st.stats)
            at["matches"] += sum(q.totals.matches)
            at["deliveries"] += sum(q.totals.deliveries)
            at["written"] += q.totals.written
            at["q"] += sum(q.queued(i) for i in range(len(st.stats)))
        for key, name, help_, counter in PER_SPACE:
            fam = (CounterMetricFamily if counter else GaugeMetricFamily)(name, help_, labels=["space"])
            for label, at in sums.items():
                fam.add_metric([label], at[key])
            yield fam

    @staticmethod
    def _per_dimension(m: Matcher, queue: MatcherQueue, names: list[str]) -> Iterator[Metric]:
        """The families labelled by dimension: arrivals, matches, deliveries, q, λ, μ, λ/μ, set sizes."""
        fam: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "received": CounterMetricFamily("bluedove_matcher_messages_received", "Messages forwarded to this "
                                            "matcher, by the dimension they came for", labels=DIM),
            "processed": CounterMetricFamily("bluedove_matcher_messages_processed", "Messages matched against the "
                                             "dimension's subscription set and stored", labels=DIM),
            "matches": CounterMetricFamily("bluedove_matcher_matches", "Subscriptions matched (a message matching "
                                           "n subscriptions counts n)", labels=DIM),
            "deliveries": CounterMetricFamily("bluedove_matcher_deliveries", "Deliveries (message, queue) handed to "
                                              "the store, by dimension", labels=DIM),
            "q": GaugeMetricFamily("bluedove_matcher_queue_messages", "Messages waiting, being matched or being "
                                   "stored (q)", labels=DIM),
            "lam": GaugeMetricFamily("bluedove_matcher_arrival_rate_per_second", "Arrival rate λ: messages per "
                                     "second over the stats window", labels=DIM),
            "mu": GaugeMetricFamily("bluedove_matcher_service_rate_per_second", "Matching rate μ: messages matched "
                                    "per second of matching work", labels=DIM),
            "whole": GaugeMetricFamily("bluedove_matcher_whole_rate_per_second", "Service rate: messages served "
                                       "per second of the matcher's whole work (its CPU over a batch's path, of "
                                       "the CPU it may use); the autoscaler's demand is λ over it", labels=DIM),
            "cong": GaugeMetricFamily("bluedove_matcher_congestion_ratio", "λ/μ: above 1 sustained, the queue "
                                      "grows (absent while μ is 0)", labels=DIM),
            "subs": GaugeMetricFamily("bluedove_matcher_subscriptions", "Subscriptions in the dimension's set",
                                      labels=DIM),
        }
        now = time.monotonic()
        counts = m.sets.counts() if m.sets is not None else [0] * len(names)
        totals = queue.totals
        for i, name in enumerate(names):
            st = m.stats[i]
            lam, mu = st.rates(now)
            fam["received"].add_metric([name], st.total_arrived)
            fam["processed"].add_metric([name], st.total_processed)
            fam["matches"].add_metric([name], totals.matches[i])
            fam["deliveries"].add_metric([name], totals.deliveries[i])
            fam["q"].add_metric([name], queue.queued(i))
            fam["lam"].add_metric([name], lam)
            fam["mu"].add_metric([name], mu)
            fam["whole"].add_metric([name], queue.service[i].rates(now)[1])
            if mu > 0 and math.isfinite(lam / mu):
                fam["cong"].add_metric([name], lam / mu)
            fam["subs"].add_metric([name], counts[i])
        yield from fam.values()


def matcher_registry(matcher: Matcher) -> CollectorRegistry:
    r = process_registry("matcher")
    r.register(MatcherCollector(matcher))
    return r
