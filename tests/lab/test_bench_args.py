"""The bench command's flags and the e2e bench's pure parts."""


def test_cluster_bench_flags_default_in_one_place_and_share_existing_ones():
    import argparse

    from lab.bench.flags import FLAGS, add_cluster_bench_flags, resolve
    from bluedove.cli.main import build_parser

    args, _ = build_parser().parse_known_args(["bench", "delivery", "--matchers", "3", "--rate", "5000"])
    resolve(args)
    assert (args.kind, args.matchers, args.rate) == ("delivery", 3, 5000.0)
    assert args.pollers == FLAGS["--pollers"][0] and args.sample == FLAGS["--sample"][0]
    p = argparse.ArgumentParser()
    p.add_argument("--matchers", type=int, default=4)  # another bench's flag of the same name
    add_cluster_bench_flags(p)
    assert resolve(p.parse_args([])).matchers == 4 and resolve(p.parse_args(["--feeders", "1"])).feeders == 1


def test_delivery_bench_defaults_its_own_connections_and_the_poll_interval():
    from lab.bench.delivery import POLLER_CONNECTIONS, delivery_args
    from lab.bench.flags import FLAGS
    from bluedove.cli.main import build_parser

    args = delivery_args(build_parser().parse_known_args(["bench", "delivery"])[0])
    assert args.connections == POLLER_CONNECTIONS != FLAGS["--connections"][0]
    assert args.poll_interval == FLAGS["--poll-interval"][0] == 10.0
    args = delivery_args(build_parser().parse_known_args(["bench", "delivery", "--connections", "4",
                                                          "--poll-interval", "0"])[0])
    assert (args.connections, args.poll_interval) == (4, 0.0)


def test_bench_e2e_systems_workloads_and_ratios():
    import argparse

    import pytest

    from lab.bench.systems import parse_systems, ratios, workload

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
