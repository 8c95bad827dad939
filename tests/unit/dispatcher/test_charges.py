"""Charges, the adaptive policy's account of the work sent each matcher since its report: charged
one message at a time or through the batch ranking's array, reset by a report, kept only under
`adaptive`."""

from __future__ import annotations

import numpy as np
import pytest

from bluedove.dispatcher.charges import Charges


def test_charges_add_up_per_member_until_its_report():
    c = Charges(adaptive=True)
    c.charge("m1", 0.001)
    c.charge("m1", 0.002)
    c.charge("m2", 0.01)
    assert c.by_member() == {"m1": pytest.approx(0.003), "m2": 0.01}
    c.reset("m1")
    c.reset("m3")  # never charged: nothing to forget
    assert c.by_member() == {"m2": 0.01}


def test_the_batch_ranking_charges_the_array_and_the_account_takes_it_back():
    c = Charges(adaptive=True)
    c.charge("m2", 0.5)
    members = ["m1", "m2", "m3"]
    sent = c.array(members)
    assert sent.dtype == np.float64 and sent.tolist() == [0.0, 0.5, 0.0]
    sent += [0.25, 0.25, 0.0]  # as `rank_batch` charges each message's first choice, in place
    c.take_back(members, sent)
    assert c.by_member() == {"m1": 0.25, "m2": 0.75}  # m3, never charged, stays out


def test_the_other_policies_keep_no_account():
    c = Charges(adaptive=False)
    c.charge("m1", 0.001)
    c.take_back(["m1"], np.array([0.5]))
    assert c.by_member() == {} and c.array(["m1"]).tolist() == [0.0]
