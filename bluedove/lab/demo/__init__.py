"""`bluedove demo`: `up` plus the traffic (or orders) workload, a live progress line and a summary."""

from __future__ import annotations

import argparse

from bluedove.local.flags import add_cluster_flags


def run(args: argparse.Namespace) -> int:
    from bluedove.lab.demo.command import run_demo

    return run_demo(args)


def add_parser(sub) -> None:
    demo = sub.add_parser("demo", help="`up` plus the traffic workload, a live progress line and a summary")
    add_cluster_flags(demo, 0)
    demo.add_argument("--data-dir", default=None, help="default: a fresh temporary folder")
    demo.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    demo.add_argument("--workload", choices=("traffic", "orders"), default="traffic",
                      help="traffic: drivers and sensors on a space of numbers; orders: a shop's orders on a "
                           "typed space (strings, booleans, optional attributes; docs/workloads.md)")
    demo.add_argument("--rate", type=float, default=None,
                      help="messages per second (default 300 sensor readings, or 100 orders)")
    demo.add_argument("--drivers", type=int, default=None,
                      help="subscribers, each with its own queue (default 300 drivers of 3 subscriptions, "
                           "or 100 subscribers of 3 orders subscriptions)")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=run)
