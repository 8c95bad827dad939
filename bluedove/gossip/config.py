"""Every timing of the gossip protocol, in one frozen dataclass (env: BLUEDOVE_<FIELD>)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GossipConfig:
    """Every timing of the gossip protocol: rounds, failure detection, probes, suspicion."""

    # One round: bump our heartbeat, push our view to ceil(log2 N) + fanout_extra peers, check
    # the failure detector. The paper's §III-C gossips every second; 0.2 s keeps detection ≤ 3 s.
    interval_s: float = 0.2
    fanout_extra: int = 1
    # Peers per round while this member has heard no news (only heartbeats and load moved):
    # every push carries the whole view, so a member pushed to by 3 a round on average hears
    # every heartbeat about once a round. News (a member joining, suspected, dead or back, a
    # new table, a space's new epoch) is pushed to the full fanout for `news_rounds` rounds by
    # every member that learns it, so it still spreads in O(log N) rounds.
    quiet_fanout: int = 3
    news_rounds: int = 3
    # Phi-accrual (Hayashibara et al.; Cassandra, Akka): suspicion level at which a member is
    # probed. 8 means a 1e-8 chance that the heartbeat is merely late, given past arrivals.
    phi_threshold: float = 8.0
    # Inter-arrival samples the detector keeps per member.
    phi_window: int = 100
    # Floor of the arrival-interval standard deviation: with a very regular network the
    # estimated deviation is tiny, and one GC pause or busy event loop would look fatal.
    phi_min_std_s: float = 0.1
    # A probe is a direct ping plus indirect pings through up to `indirect_probes` others (seed
    # 004: ask the neighbour's neighbour; SWIM's ping-req). No ack within this → suspect.
    probe_timeout_s: float = 0.5
    indirect_probes: int = 3
    # A suspect that does not refute (bump its incarnation) within this is declared dead.
    # It must cover a suspicion reaching the member and the refutation coming back: a few
    # rounds of log2 N each.
    suspect_timeout_s: float = 1.0
    # A member named in the segment table but never heard from is expected for this long
    # (processes of one cluster start together, some slowly), then probed like any other: a
    # matcher that never comes up is declared dead and taken over.
    join_grace_s: float = 30.0
    # How long a forwarded (indirect) ping is remembered while waiting for its ack.
    relay_ttl_s: float = 2.0
    # With this probability per round, also push to one member believed dead, so that a
    # healed partition or a refuted death is learned without a restart.
    dead_push_prob: float = 0.1
