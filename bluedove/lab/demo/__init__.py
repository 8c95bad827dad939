"""`bluedove demo`: `up` plus the traffic workload, a live progress line and a summary."""

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
    demo.add_argument("--rate", type=float, default=300.0, help="sensor messages per second")
    demo.add_argument("--drivers", type=int, default=300, help="subscribers, each with its own queue")
    demo.add_argument("--seed", type=int, default=7)
    demo.set_defaults(func=run)
