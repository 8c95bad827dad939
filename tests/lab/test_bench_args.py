"""The bench command's flags and the e2e bench's pure parts."""


def test_each_bench_declares_its_own_flags_with_its_own_defaults():
    import pytest

    from bluedove.cli.main import build_parser
    from bluedove.lab.bench import parse

    args = build_parser().parse_args(["bench", "delivery", "--workload", "sparse", "--duration", "8"])
    assert (args.kind, args.flags) == ("delivery", ["--workload", "sparse", "--duration", "8"])
    args = parse(["delivery", "--matchers", "3", "--rate", "5000"])
    assert (args.kind, args.matchers, args.rate) == ("delivery", 3, 5000.0)
    assert (args.pollers, args.sample, args.feeders, args.duration) == (2, 40, 3, 10.0)
    assert (parse(["e2e"]).matchers, parse(["e2e"]).batch, parse(["publish"]).batch) == (4, 200, 100)
    assert (parse(["e2e"]).step_s, parse(["elastic"]).step_s) == (6.0, 30.0)
    assert parse(["handoff"]).subs == parse(["elastic"]).subs == 40_000
    assert parse(["kernel"]).n_subs is None and parse(["kernel", "--subs", "9"]).n_subs == 9
    with pytest.raises(SystemExit):
        parse(["gossip", "--rate", "1"])  # a flag of another bench


def test_delivery_bench_defaults_its_own_connections_and_the_poll_interval():
    from bluedove.lab.bench import parse
    from bluedove.lab.bench.delivery import POLLER_CONNECTIONS

    args = parse(["delivery"])
    assert args.connections == POLLER_CONNECTIONS != parse(["publish"]).connections
    assert args.poll_interval == 10.0
    args = parse(["delivery", "--connections", "4", "--poll-interval", "0"])
    assert (args.connections, args.poll_interval) == (4, 0.0)


def test_bench_e2e_systems_workloads_and_ratios():
    import argparse

    import pytest

    from bluedove.lab.bench.systems import parse_systems, ratios, workload

    assert parse_systems(None) == ["mpartition"]
    assert parse_systems(["mpartition,p2p", "full-replication", "p2p"]) == ["mpartition", "p2p", "full-replication"]
    with pytest.raises(ValueError, match="--partition"):
        parse_systems(["mpartition,chord"])

    def args(name, **kw):
        return argparse.Namespace(workload=name, seed=1, n_subs=kw.pop("n_subs", 600), sigma=None, adverse=None,
                                  dims=None, **kw)

    assert workload(args("paper")).n_subs == 600 and workload(args("paper")).n_queues == 600
    assert workload(args("sparse")).n_queues == 60  # 10 subscriptions per queue
    t = workload(args("traffic"))
    assert t.n_subs == 600 and t.n_queues == 200 and t.space.names[0] == "longitude"
    with pytest.raises(ValueError, match="not of traffic"):
        workload(argparse.Namespace(workload="traffic", seed=1, n_subs=None, sigma=500.0, adverse=None, dims=None))
    with pytest.raises(ValueError, match="--workload"):
        workload(args("zipf"))

    runs = {"mpartition": {"msgs_per_s": 3000}, "p2p": {"msgs_per_s": 1500}, "full-replication": {"msgs_per_s": 0}}
    assert ratios(runs) == {"bluedove_over_p2p": 2.0, "bluedove_over_full_replication": None}
    assert ratios({"p2p": {"msgs_per_s": 10}}) == {"bluedove_over_p2p": None}
    assert ratios({"mpartition": {"msgs_per_s": 10}}) == {}
