"""The autoscaler's Prometheus metrics (docs/metrics.md): what its last step saw and chose,
read from the Autoscaler when a scrape comes (on its event loop, bluedove/runtime/telemetry.py)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from bluedove.autoscaler.policy import LoadSample
from bluedove.autoscaler.relief import LIMITS, Stop
from bluedove.autoscaler.runner import Autoscaler
from bluedove.runtime.telemetry import process_registry

# Every action the policy may answer (bluedove/autoscaler/policy.py Decision.action): a bounded label.
ACTIONS = ("hold", "scale_out", "scale_in")
# Every outcome of a scale-out's check (bluedove/autoscaler/relief.py Verdict.outcome).
OUTCOMES = ("relieved", "not_relieved", "unchecked", "resumed")
NAN = float("nan")


class AutoscalerCollector(Collector):
    """The autoscaler's Prometheus metrics, read from its last step when a scrape comes."""

    def __init__(self, autoscaler: Autoscaler) -> None:
        self.a = autoscaler

    def collect(self) -> Iterator[Metric]:
        a, c = self.a, self.a.config
        for name, help_, value in (
                ("bluedove_autoscaler_scale_out_busy_ratio", "Threshold: busy (λ/μ per matcher) above it for the "
                 "whole window scales out", c.out_busy),
                ("bluedove_autoscaler_scale_in_busy_ratio", "Threshold: busy below it for the long window scales in",
                 c.in_busy),
                ("bluedove_autoscaler_target_busy_ratio", "The busy a scale-out aims at", c.target_busy),
                ("bluedove_autoscaler_min_matchers", "Fewest matchers it keeps", c.min_matchers),
                ("bluedove_autoscaler_max_matchers", "Most matchers it starts", c.max_matchers)):
            yield GaugeMetricFamily(name, help_, value=value)
        s = a.last_sample
        if s is not None:
            yield GaugeMetricFamily("bluedove_autoscaler_busy_ratio", "The input it acts on: Σλ/μ over the "
                                    "owners' dimensions, per matcher, at the last sample", value=s.busy)
            yield GaugeMetricFamily("bluedove_autoscaler_queued_messages", "Messages queued in the matchers at the "
                                    "last sample", value=s.queued)
            yield GaugeMetricFamily("bluedove_autoscaler_actual_matchers", "Owners of segments that answered the "
                                    "last sample", value=s.matchers)
            yield GaugeMetricFamily("bluedove_autoscaler_matchers_at_cpu_limit", "Owners at their CPU limit at the "
                                    "last sample (each counted as at least 1 in busy)", value=s.at_limit)
        if a.members is not None:
            yield GaugeMetricFamily("bluedove_autoscaler_running_matchers", "Matchers its backend runs "
                                    "(processes, or StatefulSet replicas)", value=a.members)
        if a.desired is not None:
            yield GaugeMetricFamily("bluedove_autoscaler_desired_matchers", "Matchers its last decision wants",
                                    value=a.desired)
        d = CounterMetricFamily("bluedove_autoscaler_decisions", "Decisions since start, by action", labels=["action"])
        for action in ACTIONS:
            d.add_metric([action], a.decisions.get(action, 0))
        yield d
        yield from self._limits(a, s)

    def _limits(self, a: Autoscaler, s: LoadSample | None) -> Iterator[Metric]:
        """The check of each scale-out, and what the autoscaler takes as the limit."""
        for name, help_, field in (
                ("bluedove_autoscaler_accepted_rate_per_second", "Messages the dispatchers accepted in the last "
                 "settled second of the cluster's series (NaN while unknown)", "accepted"),
                ("bluedove_autoscaler_publish_latency_p50_seconds", "Their publish p50 (NaN while unknown)", "p50_s"),
                ("bluedove_autoscaler_dispatcher_cpu_ratio", "The busiest dispatcher's CPU, fraction of one core, "
                 "from the heartbeats (NaN while unknown)", "dispatcher_cpu"),
                ("bluedove_autoscaler_store_cpu_ratio", "Redis's CPU, fraction of one core, from INFO cpu "
                 "(NaN while unknown)", "store_cpu"),
                ("bluedove_autoscaler_host_cpu_ratio", "This host's CPU, fraction of all its cores; local "
                 "backend only (NaN otherwise)", "host_cpu")):
            value = getattr(s, field) if s is not None else None
            yield GaugeMetricFamily(name, help_, value=NAN if value is None else value)
        stopped = isinstance(a.check, Stop)
        yield GaugeMetricFamily("bluedove_autoscaler_scale_out_stopped", "1 while scale-outs are stopped because "
                                "the last one did not relieve the load", value=1 if stopped else 0)
        g = GaugeMetricFamily("bluedove_autoscaler_limit", "1 for what limits the rate now: the stop's limit while "
                              "scale-outs are stopped, else what the last window shows", labels=["limit"])
        for limit in LIMITS:
            g.add_metric([limit], 1 if a.limit == limit else 0)
        yield g
        c = CounterMetricFamily("bluedove_autoscaler_scale_out_checks", "Checks of scale-outs since start, by "
                                "outcome", labels=["outcome"])
        for outcome in OUTCOMES:
            c.add_metric([outcome], a.checks.get(outcome, 0))
        yield c


def autoscaler_registry(autoscaler: Autoscaler) -> CollectorRegistry:
    r = process_registry("autoscaler")
    r.register(AutoscalerCollector(autoscaler))
    return r
