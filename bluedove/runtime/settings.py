"""Component settings: one frozen dataclass each, units in the names, BLUEDOVE_* env read here.

An environment variable BLUEDOVE_<FIELD> (upper case) overrides a field's default; explicit
arguments (command-line flags) override both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from bluedove.core.partition.modes import MPARTITION, check_mode

T = TypeVar("T")
AUTH_MODES = ("off", "keys")


@dataclass(frozen=True)
class MatcherSettings:
    """One matcher's settings: address, store, booting, matching, table changes and TLS."""

    id: str = "m1"
    host: str = "127.0.0.1"
    port: int = 7001
    store_url: str = "redis://127.0.0.1:6379/0"
    # -- booting (bluedove/core/partition/bootstrap.py); "" = not given --
    # The address others reach us at, stored in the table and gossiped; "" = host:port.
    advertise: str = ""
    # A YAML space file: on an empty store we propose the first table over it; a stored table
    # over another space stops us. "" = wait for a table to be stored.
    space_file: str = ""
    # The first table's owners, `ID[=HOST:PORT],…`, if we write it; "" = ourselves alone.
    boot_members: str = ""
    # A partition seed file (bluedove/core/partition/seeds.py) laying out that first table; "" = equal widths.
    seed_file: str = ""
    # Gossip seeds from DNS: every address `NAME[:PORT]` resolves to (a headless Service).
    peers_dns: str = ""
    # Prometheus /metrics on this port of `host` (docs/metrics.md); 0 = none.
    metrics_port: int = 0
    # While no peer is known, the DNS name is resolved again this often.
    peers_dns_retry_s: float = 1.0
    # The window λ and μ are averaged over (the BlueDove paper's w).
    stats_window_s: float = 5.0
    # Most messages matched in one index job and written in one store transaction (a batch
    # takes whole Forward requests; a single bigger request is a batch of its own).
    batch_max: int = 1024
    # Gossip carries table changes within a round or two; the store keeps the latest table as
    # well, re-read this often, for a matcher cut off from gossip but not from the store.
    table_refresh_s: float = 5.0
    # How often the registry of spaces' generation is read: a named space made or deleted is
    # served or dropped within it (and the whole list is read every table_refresh_s).
    spaces_refresh_s: float = 1.0
    # How often the named spaces' catalogue logs are read, all in one round trip (the default
    # space's is followed by blocking reads): a change whose direct call failed, or a deleted
    # queue's removal, reaches a named space's sets within it (bluedove/matcher/named_tails.py).
    spaces_tail_s: float = 0.5
    # A named space without a direct subscription call in the last 10 s is read this often
    # instead (a slice of the idle spaces each round).
    spaces_idle_tail_s: float = 10.0
    # Named spaces whose metrics carry their own `space` label (the first met); the rest are
    # summed under `_other` (bluedove/runtime/space_labels.py).
    metrics_spaces: int = 50
    # How long one blocking read of the catalogue log waits before looping.
    catalog_block_ms: int = 1000
    # The catalogue tail applies what one read found this long after the read: the dispatchers'
    # direct calls, which follow each catalogue write, are in by then, so the tail skips their
    # changes unparsed, and it wakes at most once per linger (a batch each time).
    catalog_linger_ms: int = 100
    # After a table change shrinks our range, the moved part is kept this long: dispatchers
    # still on the old table may send us its messages until they pull the new one.
    handoff_grace_s: float = 10.0
    # SIGTERM first hands our segments to neighbours, then exits (Kubernetes scale-in); a
    # second signal exits at once. Off for `bluedove up`, which stops the whole cluster.
    leave_on_sigterm: bool = False
    # How long a removed subscription id is remembered, so a late add cannot bring it back.
    tombstone_ttl_s: float = 600.0
    # How long a publisher's message id is remembered: publishing it again delivers nothing.
    dedup_window_s: int = 600
    # A queue created before queues had bounds gets these (new queues carry their own, set by
    # the dispatcher that created them): most undelivered deliveries (0 = no cap), retention s.
    max_undelivered: int = 100_000
    retention_s: int = 0
    # Backpressure: a Forward is refused (RESOURCE_EXHAUSTED, the dispatcher tries the next
    # candidate) while this many messages of one of its dimensions wait in the input queue.
    max_queued: int = 20_000
    # Ids the dispatcher made are only retried by dispatchers (a few forward timeouts):
    # their marks can expire much sooner, which keeps the store small at high rates.
    retry_dedup_s: int = 120
    # Partition mode (bluedove/core/partition/modes.py), cluster-wide: mpartition is BlueDove; p2p and
    # full-replication are the BlueDove paper §IV-B's baselines, for benchmarks (no joins, no autoscaling).
    # Here: which subscriptions this matcher stores and which messages it accepts.
    partition: str = MPARTITION
    # -- table changes (takeover, join, leave) and their hand-off --
    # A matcher told to leave tries this long to hand its segments off before giving up.
    leave_timeout_s: float = 30.0
    # An owner gossip says left, still in the table this long after, is taken over: its own
    # hand-off has failed.
    left_owner_timeout_s: float = 30.0
    # After a table change failed, the coordinator waits this long before planning another.
    change_retry_s: float = 1.0
    # A leave whose hand-off failed tries again, on a fresh table, after this long.
    leave_retry_s: float = 0.5
    # A join reads every owner's Report to find the busiest segments; a slower owner is left out.
    report_timeout_s: float = 2.0
    # A taker loads what it gains before answering Prepare: large sets take a while.
    prepare_timeout_s: float = 30.0
    # A taker fetches each gained range from its old owner's Export; slower, it loads the catalogue.
    export_timeout_s: float = 30.0
    # -- the matcher's own loops --
    # At start, the stored table is polled this often until there is one.
    table_wait_s: float = 0.2
    # A catalogue tail read that failed (store unreachable) is retried after this long.
    catalog_retry_s: float = 1.0
    # How often the hand-off grace is checked, and how soon a failed trim is retried.
    trim_check_s: float = 0.5
    trim_retry_s: float = 1.0
    # -- TLS (bluedove/runtime/tls.py, docs/security.md "TLS"): PEM files, "" = plain --
    tls_cert: str = ""
    tls_key: str = ""
    # With a CA, the internal ports are mutual TLS: clients need a certificate it signed.
    tls_ca: str = ""
    # The name our internal channels expect in a peer's certificate, instead of the host of its
    # address (gossiped addresses may be pod IPs); "" = that host.
    tls_server_name: str = ""

    def __post_init__(self) -> None:
        check_mode(self.partition, "partition (--partition, BLUEDOVE_PARTITION)")
        if self.metrics_spaces < 0:
            raise ValueError(f"metrics_spaces (BLUEDOVE_METRICS_SPACES) {self.metrics_spaces} must not be negative")


@dataclass(frozen=True)
class DispatcherSettings:
    """One dispatcher's settings: ports, store, forwarding, API limits, sampling, auth and TLS."""

    id: str = "d1"
    host: str = "127.0.0.1"
    http_port: int = 8080
    # The public gRPC API; 0 = any free port. Dispatchers share it with SO_REUSEPORT.
    grpc_port: int = 50051
    store_url: str = "redis://127.0.0.1:6379/0"
    policy: str = "adaptive"
    # The dispatcher's own gossip port (gRPC, one per dispatcher; 0 = any free port), the
    # address other members reach it at (default HOST:gossip port), and a DNS name whose
    # addresses are gossip seeds (NAME[:PORT], default port 7001: the matchers' headless Service).
    gossip_port: int = 7002
    advertise: str = ""
    peers_dns: str = ""
    # The table comes by gossip; while no matcher is usable it is read from the store this often.
    store_fallback_s: float = 1.0
    # How often each matcher's load report is fetched.
    load_interval_s: float = 1.0
    # A forward call slower than this fails over to the next candidate.
    forward_timeout_s: float = 5.0
    # Most messages carried by one Forward call (all dimensions together), and most concurrent
    # calls per matcher: a further call goes out beside one under way only once half of
    # forward_batch_max waits (bluedove/dispatcher/publish/forwarder.py).
    forward_batch_max: int = 512
    forward_inflight: int = 4
    # A matcher whose call failed is passed over as first choice for this long.
    down_backoff_s: float = 2.0
    # After a table change, subscriptions also go to the previous table's owners this long
    # (the matchers' hand-off grace).
    handoff_grace_s: float = 10.0
    # A subscription call to a matcher slower than this is left to the catalogue log.
    subscribe_timeout_s: float = 3.0
    visibility_timeout_s: float = 30.0
    max_subscriptions_per_queue: int = 10_000
    max_batch: int = 1000
    max_payload_bytes: int = 256 * 1024
    max_wait_s: float = 20.0
    # -- the HTTP server's door (bluedove/dispatcher/door.py, docs/operations.md "The HTTP server
    # and load balancers") --
    # Most bytes of a request body: a larger Content-Length is refused (413) before its body is
    # read, a chunked body as soon as it passes this. Batches are bounded by it before max_batch
    # and max_payload_bytes can be (1,000 maximal payloads would be 256 MiB). It sets the gRPC
    # API's request limit too: this plus 1 MiB (protobuf can run a little over the same JSON).
    max_body_bytes: int = 16 * 1024 * 1024
    # A request's headers must be whole this long after its first byte (or after the connection
    # opened), its body this long after its headers; then 408 and the connection is closed.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    # An idle keep-alive connection is closed this long after its last response: longer than
    # clients and load balancers keep theirs (they must close first, see docs/operations.md).
    idle_timeout_s: int = 75
    # A new queue's bounds unless its creation asks for others (docs/api.md, "Queues"): most
    # undelivered deliveries it holds (0 = no cap), and how long a delivery is kept (0 = until acked).
    max_undelivered: int = 100_000
    retention_s: int = 0
    # Backpressure: most messages waiting in this dispatcher's forwarder; a publish beyond it is
    # refused at once (503 unavailable, Retry-After) rather than buffered.
    max_outstanding: int = 50_000
    # Where subscriptions are sent and which matchers a message may go to (partitioning.py).
    partition: str = MPARTITION
    # -- the message sample (bluedove/dispatcher/sampler.py): points of published messages for offline jobs --
    # The fraction of published messages sampled (0 = off, 1 = all), and the folder they go to.
    sample_rate: float = 0.0
    sample_dir: str = ""
    # A new sample file after this many seconds or megabytes; the newest sample_keep files are kept.
    sample_rotate_s: float = 300.0
    sample_rotate_mb: float = 64.0
    sample_keep: int = 48
    # API keys (docs/api.md, "API keys"): "off" (anyone may publish and create queues) or
    # "keys" (publishing and creating queues and subscriptions need a key of the right scope).
    auth: str = "off"
    # With keys: how often the store's key generation is read (a revoke takes effect within it).
    auth_refresh_s: float = 0.25
    # How often the store's registry of spaces is checked for a change (a deleted space's
    # purge resumes within it on a dispatcher that did not take the DELETE).
    spaces_refresh_s: float = 1.0
    # A file of spaces the dispatcher makes at its start unless they exist as declared ("" = none).
    spaces_file: str = ""
    # Named spaces whose metrics carry their own `space` label (as the matcher's).
    metrics_spaces: int = 50
    # Replays (docs/api.md, "Replay"): most logged messages one replay reads a second (0: no
    # bound but the pacing that rests three times as long as it works), and how long a replay's worker holds
    # its lease unrenewed before another dispatcher takes the replay over.
    replay_rate: float = 0.0
    replay_lease_s: float = 15.0
    # -- TLS (bluedove/runtime/tls.py, docs/security.md "TLS"): PEM files, "" = plain --
    tls_cert: str = ""
    tls_key: str = ""
    # With a CA, the internal ports are mutual TLS: clients need a certificate it signed.
    tls_ca: str = ""
    # The name our internal channels expect in a peer's certificate, instead of the host of its
    # address (gossiped addresses may be pod IPs); "" = that host.
    tls_server_name: str = ""

    def __post_init__(self) -> None:
        check_mode(self.partition, "partition (--partition, BLUEDOVE_PARTITION)")
        if self.metrics_spaces < 0:
            raise ValueError(f"metrics_spaces (BLUEDOVE_METRICS_SPACES) {self.metrics_spaces} must not be negative")
        if self.max_body_bytes <= self.max_payload_bytes:
            raise ValueError(f"max_body_bytes (BLUEDOVE_MAX_BODY_BYTES) {self.max_body_bytes} must be over "
                             f"max_payload_bytes {self.max_payload_bytes}: a message at the payload limit "
                             "could not be sent")
        if self.auth not in AUTH_MODES:
            raise ValueError(f"auth (--auth, BLUEDOVE_AUTH) {self.auth!r}: expected one of {', '.join(AUTH_MODES)}")


@dataclass(frozen=True)
class TlsSettings:
    """TLS alone, for a process with no other settings here (the autoscaler, the `seed` command)."""
    tls_cert: str = ""
    tls_key: str = ""
    # With a CA, the internal ports are mutual TLS: clients need a certificate it signed.
    tls_ca: str = ""
    # The name our internal channels expect in a peer's certificate, instead of the host of its
    # address (gossiped addresses may be pod IPs); "" = that host.
    tls_server_name: str = ""


def from_env(cls: type[T], **overrides: Any) -> T:
    """Build `cls` from defaults, then BLUEDOVE_* variables, then non-None overrides."""
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        env = os.environ.get(f"BLUEDOVE_{f.name.upper()}")
        default: Any = f.default  # every field has one
        if env is not None:
            try:
                if isinstance(default, bool):
                    if env.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                        raise ValueError
                    values[f.name] = env.lower() in ("1", "true", "yes", "on")
                else:
                    values[f.name] = type(default)(env) if default is not None else env
            except ValueError:
                raise ValueError(f"BLUEDOVE_{f.name.upper()}={env!r}: expected {type(default).__name__}") from None
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)
