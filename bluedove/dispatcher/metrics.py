"""Prometheus metrics of one dispatcher process (docs/metrics.md lists them).

Several dispatchers may share one HTTP port (SO_REUSEPORT; `bluedove up --dispatchers N`), and
each scrape of that port reaches one of them. With `PROMETHEUS_MULTIPROC_DIR` set (`up` sets
it to a directory of the cluster's, emptied at start), every process writes its counters,
histograms and gauges to files there and whichever answers a scrape sums all of them: a
counter is the cluster's total and never goes back, whichever process answers. The process
collector reads only its own process, so in that mode each dispatcher also copies its CPU time
into a counter and its memory and descriptors into gauges (summed over live processes) once a
second. The cluster-wide values (matchers in the table, events in the store) are read at
scrape time by the process that answers: they are the same from any of them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.runtime.space_labels import SpaceLabels
from bluedove.runtime.telemetry import MULTIPROC_ENV, BuildInfo, exposition, process_registry

if TYPE_CHECKING:
    from bluedove.dispatcher.view import ClusterView

# How often a dispatcher copies its process figures (and failovers) into the shared files.
TICK_S = 1.0

# In multiprocess mode, the process collector's gauges each process copies: name, help, how
# the processes' values combine.
PROCESS_GAUGES: tuple[tuple[str, str, Literal["livesum", "livemin"]], ...] = (
    ("process_resident_memory_bytes", "Resident memory size in bytes", "livesum"),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes", "livesum"),
    ("process_open_fds", "Number of open file descriptors", "livesum"),
    ("process_max_fds", "Maximum number of open file descriptors", "livemin"),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds", "livemin"),
)


class _ClusterFacts(Collector):
    """Values read from the cluster view and the store when a scrape comes."""

    def __init__(self) -> None:
        self.matchers: int | None = None
        self.events: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        ev = CounterMetricFamily("bluedove_cluster_events", "Cluster events stored since the store was created, "
                                 "by action (takeover, split, merge, scale_out, scale_in, space_scale_out, "
                                 "space_scale_in, reseed)",
                                 labels=["action"])
        for action, n in sorted(self.events.items()):
            ev.add_metric([action], n)
        yield ev
        if self.matchers is not None:
            yield GaugeMetricFamily("bluedove_cluster_matchers", "Matchers owning segments in the table this "
                                    "dispatcher holds", value=self.matchers)


@dataclass(frozen=True, slots=True)
class SpaceMetrics:
    """One `space` label's children of the labelled metrics, looked up once per space."""

    published: Counter
    publish_failures: Counter
    publish_seconds: Histogram
    subscriptions: Counter
    label: str


SPACE = ["space"]


class Metrics:
    """The Prometheus counters, histograms and gauges one dispatcher process updates."""

    def __init__(self, metrics_spaces: int = 50) -> None:
        self.multiprocess_dir = os.environ.get(MULTIPROC_ENV) or None
        # In multiprocess mode the values live in the shared files, and the objects sit in a
        # registry of their own that no scrape reads; the scrape registry reads the files.
        r = CollectorRegistry() if self.multiprocess_dir else process_registry("dispatcher")
        self.labels = SpaceLabels(metrics_spaces)
        self._spaces: dict[str, SpaceMetrics] = {}
        self.published = Counter("bluedove_messages_published", "Messages accepted (202)", SPACE, registry=r)
        self.publish_failures = Counter("bluedove_publish_failures", "Messages refused for lack of a matcher",
                                        SPACE, registry=r)
        self.publish_seconds = Histogram(
            "bluedove_publish_duration_seconds", "Time from accepting a publish request to every delivery stored",
            SPACE, buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5), registry=r)
        self.subscriptions = Counter("bluedove_subscriptions_created", "Subscriptions created", SPACE, registry=r)
        self.quota_refused = Counter("bluedove_quota_refused", "Requests a space's quota refused (429 "
                                     "quota_exceeded), by the quota", ["space", "quota"], registry=r)
        self.space(DEFAULT_SPACE)  # the default space's series from the start, at 0
        self.polled = Counter("bluedove_deliveries_polled", "Deliveries handed to pollers", registry=r)
        self.acked = Counter("bluedove_deliveries_acked", "Deliveries acked", registry=r)
        self.undeliverable = Counter("bluedove_undeliverable", "Deliveries a poll set aside (moved to the queue's "
                                     "dead-letter queue, else removed) because their stored text cannot be "
                                     "rendered", registry=r)
        self.failovers = Counter("bluedove_forward_failovers", "Messages sent on to another candidate after a "
                                 "forward failed", registry=r)
        self.forward_calls = Counter("bluedove_forward_calls", "Forward calls made to matchers (each carries one "
                                     "or more messages of one or more dimensions)", registry=r)
        self.forwarded = Counter("bluedove_forwarded_messages", "Messages carried by Forward calls (a failover "
                                 "carries a message again): over forward_calls, the messages per call", registry=r)
        self.refused = Counter("bluedove_publish_refused", "Publish calls refused with 503 by backpressure: over the "
                               "dispatcher's max_outstanding, or every candidate matcher over its input bound",
                               registry=r)
        self.sampled = Counter("bluedove_sampled_messages", "Published messages written to the message sample",
                               registry=r)
        self.sample_dropped = Counter("bluedove_sample_dropped", "Samples dropped: the sample's buffer was full",
                                      registry=r)
        self.parked = Gauge("bluedove_parked_polls", "Long polls and Listen reads parked, waiting for a delivery "
                            "to their queue", registry=r, multiprocess_mode="livesum")
        # How many polls are parked now (the store's count), read at each tick.
        self.parked_now: Callable[[], int] | None = None
        self.replaying = Gauge("bluedove_replays_running", "Replays this dispatcher works on now",
                               registry=r, multiprocess_mode="livesum")
        self.replayed = Counter("bluedove_replayed_deliveries", "Deliveries written by replays of a space's log",
                                registry=r)
        self.replays_now: Callable[[], tuple[int, int]] | None = None  # (running, replayed so far), at each tick
        self._facts = _ClusterFacts()
        self._seen = {"failovers": 0, "calls": 0, "forwarded": 0, "refused": 0, "undeliverable": 0, "replayed": 0}
        if self.multiprocess_dir:
            self._cpu = Counter("process_cpu_seconds", "Total user and system CPU time spent in seconds",
                                registry=r)
            self._gauges = {name: Gauge(name, help_, registry=r, multiprocess_mode=mode)
                            for name, help_, mode in PROCESS_GAUGES}
            self._process = ProcessCollector(registry=None)
            self._cpu_seen = 0.0
            self.registry = CollectorRegistry()
            # prometheus_client leaves this one unannotated
            multiprocess.MultiProcessCollector(self.registry, self.multiprocess_dir)  # type: ignore[no-untyped-call]
            self.registry.register(BuildInfo("dispatcher"))
        else:
            self.registry = r
        self.registry.register(self._facts)

    def space(self, name: str) -> SpaceMetrics:
        """The labelled metrics' children for space `name` (under `_other` past the bound)."""
        m = self._spaces.get(name)
        if m is None:
            label = self.labels(name)
            m = self._spaces.get(label)
            if m is None:
                m = SpaceMetrics(self.published.labels(label), self.publish_failures.labels(label),
                                 self.publish_seconds.labels(label), self.subscriptions.labels(label), label)
                self._spaces[label] = m
            if label == name:
                self._spaces[name] = m
        return m

    def refused_by_quota(self, space: str, quota: str) -> None:
        self.quota_refused.labels(self.space(space).label, quota).inc()

    def _sync(self, name: str, counter: Counter, value: int) -> None:
        if value > self._seen[name]:
            counter.inc(value - self._seen[name])
            self._seen[name] = value

    def count_undeliverable(self, total: int) -> None:
        """Copy the store's count of deliveries set aside (it only grows)."""
        self._sync("undeliverable", self.undeliverable, total)

    def tick(self, failovers: int, calls: int = 0, forwarded: int = 0, refused: int = 0) -> None:
        """Copy the forwarder's counts and (in multiprocess mode) this process's figures."""
        self._sync("failovers", self.failovers, failovers)
        self._sync("calls", self.forward_calls, calls)
        self._sync("forwarded", self.forwarded, forwarded)
        self._sync("refused", self.refused, refused)
        if self.parked_now is not None:
            self.parked.set(self.parked_now())
        if self.replays_now is not None:
            running, replayed = self.replays_now()
            self.replaying.set(running)
            self._sync("replayed", self.replayed, replayed)
        if not self.multiprocess_dir:
            return
        for fam in self._process.collect():
            for s in fam.samples:
                if s.name == "process_cpu_seconds_total":
                    if s.value > self._cpu_seen:
                        self._cpu.inc(s.value - self._cpu_seen)
                        self._cpu_seen = s.value
                elif s.name in self._gauges:
                    self._gauges[s.name].set(s.value)

    async def run(self, counts: Callable[[], tuple[int, ...]]) -> None:
        """Tick every TICK_S until cancelled; `counts()` reads the forwarder's (failovers,
        calls, messages forwarded, publish calls refused)."""
        while True:
            self.tick(*counts())
            await asyncio.sleep(TICK_S)

    def render(self, cluster: ClusterView, counts: int | tuple[int, ...], events: dict[str, int]) -> bytes:
        self.tick(*(counts if isinstance(counts, tuple) else (counts,)))
        self._facts.events = dict(events)
        self._facts.matchers = len(cluster.table.members) if cluster.table is not None else None
        return exposition(self.registry)

    def close(self) -> None:
        """In multiprocess mode: this process's live gauges leave the sums (its counters stay)."""
        if self.multiprocess_dir:
            # prometheus_client leaves this one unannotated
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)  # type: ignore[no-untyped-call]

