"""Prometheus metrics of one dispatcher process (and the matcher loads it sees)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.published = Counter("bluedove_messages_published", "Messages accepted (202)", registry=r)
        self.publish_failures = Counter("bluedove_publish_failures", "Messages refused for lack of a matcher", registry=r)
        self.publish_seconds = Histogram(
            "bluedove_publish_seconds", "Time from accepting a publish request to every delivery stored",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5), registry=r)
        self.subscriptions = Counter("bluedove_subscriptions_created", "Subscriptions created", registry=r)
        self.polled = Counter("bluedove_deliveries_polled", "Deliveries handed to pollers", registry=r)
        self.acked = Counter("bluedove_deliveries_acked", "Deliveries acked", registry=r)
        self.failovers = Gauge("bluedove_forward_failovers",
                               "Messages sent on to another candidate after a forward failed (since start)", registry=r)
        labels = ["matcher", "dimension"]
        self.queue_len = Gauge("bluedove_matcher_queue_length", "Input queue length (q)", labels, registry=r)
        self.arrival = Gauge("bluedove_matcher_arrival_rate", "Arrival rate λ (msg/s)", labels, registry=r)
        self.matching = Gauge("bluedove_matcher_matching_rate", "Matching rate μ (msg/s of work)", labels, registry=r)
        self.set_size = Gauge("bluedove_matcher_subscriptions", "Subscriptions in the set", labels, registry=r)
        self.events = Gauge("bluedove_cluster_events", "Cluster events since the store was created "
                            "(takeover, split, merge, scale_out, scale_in)", ["action"], registry=r)
        self.matchers = Gauge("bluedove_cluster_matchers", "Matchers owning segments in the table", registry=r)
        self.sampled = Counter("bluedove_sampled_messages", "Published messages written to the message sample",
                               registry=r)
        self.sample_dropped = Counter("bluedove_sample_dropped", "Samples dropped: the sample's buffer was full",
                                      registry=r)
        self.gossip_bytes = Gauge("bluedove_matcher_gossip_bytes_sent",
                                  "Gossip bytes a matcher sent since it started", ["matcher"], registry=r)

    def refresh(self, cluster, failovers: int = 0, events: dict[str, int] | None = None) -> None:
        self.failovers.set(failovers)
        for action, n in (events or {}).items():
            self.events.labels(action).set(n)
        if cluster.table is None:
            return
        self.matchers.set(len(cluster.table.members))
        names = cluster.table.space.names
        for (m, i), rep in list(cluster.reports.items()):
            lab = (m, names[i])
            self.queue_len.labels(*lab).set(rep.q)
            self.arrival.labels(*lab).set(rep.lam)
            self.matching.labels(*lab).set(rep.mu)
            self.set_size.labels(*lab).set(rep.subs)
        for m, (sent, _) in list(cluster.gossip_sent.items()):
            self.gossip_bytes.labels(m).set(sent)
