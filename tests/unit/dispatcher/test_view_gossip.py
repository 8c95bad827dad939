"""The dispatcher's view fed by its gossip node (`ClusterView._from_gossip`), on a real `Node`
and no network: only a newer table replaces ours (keeping the old one for the hand-off), a
table from elsewhere is handed to the node to spread, and members are split by role."""

from __future__ import annotations

import json
import random

from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import default_space
from bluedove.dispatcher.view import ClusterView
from bluedove.gossip.messages import DEAD, DISPATCHER, MemberState
from bluedove.gossip.peers import DnsSeeds
from bluedove.gossip.state import Node
from bluedove.runtime.settings import DispatcherSettings


def table(epoch: int, n: int = 3):
    return equal_partition(default_space(), {f"m{i}": f"a{i}" for i in range(1, n + 1)}, epoch=epoch)


def view_with_node() -> tuple[ClusterView, Node]:
    view = ClusterView(DispatcherSettings(id="d1"), store=None)
    node = view.member.node = Node("d1", "ad1", 10, rng=random.Random(1), role=DISPATCHER)
    view.member.seeds = DnsSeeds(node)
    return view, node


def test_a_newer_table_from_gossip_replaces_ours_and_the_old_one_is_kept_for_the_handoff():
    view, node = view_with_node()
    view._set_table(table(5))
    assert node.epoch == 5  # handed to the node, which spreads it
    node.offer_table(6, json.dumps(table(6, n=2).to_json()))
    view._from_gossip()
    assert view.table.epoch == 6 and list(view.table.members) == ["m1", "m2"]
    assert view.previous is not None and view.previous[0].epoch == 5
    assert view.adopted_at is not None


def test_an_older_table_never_replaces_ours():
    view, node = view_with_node()
    node.offer_table(4, json.dumps(table(4).to_json()))
    view._set_table(table(5, n=2))
    view._from_gossip()
    assert view.table.epoch == 5 and len(view.table.members) == 2 and view.previous is None


def test_members_are_split_by_role_and_keep_their_gossip_status():
    view, node = view_with_node()
    node.members["m1"] = MemberState("m1", "a1", 10)
    node.members["m2"] = MemberState("m2", "a2", 10, status=DEAD)
    node.members["d2"] = MemberState("d2", "ad2", 10, role=DISPATCHER)
    view._from_gossip()
    assert {m: g.status for m, g in view.gossip.items()} == {"m1": "alive", "m2": "dead"}
    assert set(view.dispatchers) == {"d1", "d2"}
    assert view.status("m2") == "dead" and not view.usable("m2", 0.0)


def test_seeds_are_the_tables_members_and_the_joins_never_ourselves():
    view = ClusterView(DispatcherSettings(id="d1"), store=None, seeds=("j1:7002", "ad1"))
    view.member.node = Node("d1", "ad1", 10, role=DISPATCHER)
    view.member.seeds = DnsSeeds(view.member.node, fixed=view.member.joins)
    view.member.reseed(table(5))
    assert view.member.node.seeds == ("a1", "a2", "a3", "j1:7002")
