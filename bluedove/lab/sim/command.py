"""`bluedove sim calibrate|figure`: fit the cost model on the real matcher, then reproduce the paper's §IV figures."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bluedove.lab.sim.costmodel import REGIMES, Models
from bluedove.lab.sim.figures import Context, fig_6a, fig_6b, fig_7, fig_8, fig_11
from bluedove.lab.sim.saturation import Budget
from bluedove.lab.sim.timelines import fig_9, fig_10

FIGURES = ("6a", "6b", "7", "8", "9", "10", "11a", "11b", "11c")


def add_parser(sub) -> None:
    s = sub.add_parser("sim", help="the scale simulator (see docs/reproduction.md)")
    s.add_argument("action", choices=("calibrate", "figure", "refit"))
    s.add_argument("name", nargs="?", default="all",
                   help=f"figure: {', '.join(FIGURES)}, a comma-separated list, or all")
    s.add_argument("--model", default=None, help="cost model JSON from `sim calibrate` (default: calibrate now)")
    s.add_argument("--out", default=None, help="calibrate: file to write; figure: folder for PNGs (default sim-out)")
    s.add_argument("--json", action="store_true", help="print one JSON object per figure")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--max-matchers", type=int, default=1000, help="largest cluster of the extended 6a and 7")
    s.add_argument("--messages", type=int, default=Budget.messages,
                   help="discrete-event runs (Fig. 9, 10): simulated messages per run")
    s.add_argument("--horizon", type=float, default=Budget.horizon_s, help="simulated seconds per saturation run")
    s.add_argument("--jobs", type=int, default=2, help="processes for the saturation searches (default 2)")
    s.add_argument("--regimes", default=",".join(REGIMES),
                   help="cost regimes, the first one at the top level of each row (default: rtree,per_dimension)")
    s.add_argument("--counting", action="store_true",
                   help="calibrate: time our matcher's walk as a counting matcher runs it (no matches gathered; what "
                        "`sim refit` compares with `bench e2e --deliver count`) instead of with the matches in dicts")
    s.add_argument("--runs", default="",
                   help="refit: capped `bench e2e --matcher-cpu … --json` results (comma-separated files) to fit "
                        "the matcher's whole per-message cost to and compare the simulator with; --out: a PNG")
    s.set_defaults(func=run_sim)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _model(args) -> Models:
    if args.model:
        return Models.load(args.model)
    from bluedove.lab.sim.calibrate import calibrate  # the only place that times the real matcher

    _log("sim: no --model given; calibrating on the real matcher first (about a minute)")
    return calibrate(seed=args.seed, say=_log)


def _flat(row: dict) -> dict:
    """A nested regime (`per_dimension: {...}`) as `per_dimension.key` columns."""
    out = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def print_table(fig: dict) -> None:
    rows = [_flat(r) for r in fig["rows"]]
    print(f"Fig. {fig['figure']} — {fig['unit']}")
    if len(rows) > 40:  # timelines: every few rows
        step = len(rows) // 30 + 1
        rows = rows[::step]
    keys = list(rows[0])
    cells = [[("" if r.get(k) is None else f"{r[k]:,}" if isinstance(r.get(k), int) else str(r[k])) for k in keys]
             for r in rows]
    width = [max(len(k), *(len(c[j]) for c in cells)) for j, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, width)))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, width)))
    for key in ("std_over_mean", "events", "response_drop_s", "peak_loss", "recovery_s"):
        if key in fig:
            print(f"{key}: {json.dumps(fig[key])}")
    print(f"paper: {json.dumps(fig['paper'])}")
    print()


def _calibrate(args: argparse.Namespace) -> int:
    from bluedove.lab.sim.calibrate import calibrate

    models = calibrate(seed=args.seed, say=_log, counting=args.counting)
    out = Path(args.out or "sim-model.json")
    models.save(out)
    for regime in REGIMES:
        m = models.get(regime)
        fit = m.meta["fit"]
        print(f"{regime}: cost = {m.describe()}")
        print(f"  fit on {fit['rows']} sets, scored on {fit['held_out_rows']} held-out sets: R² {fit['r2_test']:.3f}"
              f" (train {fit['r2_train']:.3f}), relative RMS {fit['rel_rms_test']:.1%},"
              f" worst {fit['rel_max_test']:.1%}")
    print(f"load {models.rtree.load_s_per_sub * 1e6:.2f} us/subscription; written to {out}")
    return 0


def _context(args: argparse.Namespace, models: Models, regimes: tuple[str, ...]) -> Context:
    large = tuple(n for n in (50, 200, 1000) if n <= args.max_matchers)
    if args.max_matchers not in large and args.max_matchers > 20:
        large += (args.max_matchers,)
    budget = replace(Budget(), messages=args.messages, horizon_s=args.horizon,
                     warmup_s=min(Budget.warmup_s, args.horizon / 4))
    return Context(models=models, seed=args.seed, budget=budget, say=_log, sizes_large=large, regimes=regimes,
                   jobs=args.jobs)


def _figures(ctx: Context, names: tuple[str, ...], t0: float) -> tuple[dict[str, dict], dict[str, float]]:
    """Each figure of `names` (11a-c run together), and the seconds each took."""
    done: dict[str, dict] = {}
    took: dict[str, float] = {}
    for name in names:
        if name in done:
            continue
        _log(f"sim: figure {name} ({time.perf_counter() - t0:.0f} s so far)")
        t1 = time.perf_counter()
        if name.startswith("11"):
            for f in fig_11(ctx):
                done[f["figure"]] = f
                took[f["figure"]] = time.perf_counter() - t1
        else:
            done[name] = {"6a": fig_6a, "6b": fig_6b, "7": fig_7, "8": fig_8, "9": fig_9, "10": fig_10}[name](ctx)
            took[name] = time.perf_counter() - t1
    return done, took


def _refit(args: argparse.Namespace) -> int:
    from bluedove.lab.sim.refit import compare, read_runs

    paths = [p for p in args.runs.split(",") if p]
    if not paths or not args.model:
        print("sim refit: give --runs (capped bench e2e results) and --model (from sim calibrate)", file=sys.stderr)
        return 2
    result = compare(Models.load(args.model), read_runs(paths), args.seed, say=_log)
    if args.out:
        from bluedove.lab.plots import plot_refit

        result["png"] = str(plot_refit(result, args.out))
    if args.json:
        print(json.dumps(result))
        return 0
    f = result["fit"]
    print(f"service = walk + {f['c0_us']} us + {f['c_call_us']} us / (messages per call); "
          f"fitted on {f['rows']} rows, relative RMS {f['rel_rms']:.1%}")
    for r in result["rows"]:
        print(f"  {r['system']:<16} {r['matchers']} x {r['cores']} core: real {r['real']:>7,} msg/s, "
              f"simulated {r['simulated']:>7,} ({r['sim_over_real']:.2f}x)")
    for r in result["ratios"]:
        print(f"  {r['matchers']} matchers, BlueDove / {r['over']}: real {r['real']:.2f}, simulated "
              f"{r['simulated']:.2f} (agreement {r['agreement']:.2f})")
    return 0


def run_sim(args: argparse.Namespace) -> int:
    if args.action == "calibrate":
        return _calibrate(args)
    if args.action == "refit":
        return _refit(args)
    names = FIGURES if args.name == "all" else tuple(args.name.split(","))
    if any(n not in FIGURES for n in names):
        print(f"sim figure: expected one of {', '.join(FIGURES)} or all, got {args.name!r}", file=sys.stderr)
        return 2
    models = _model(args)
    regimes = tuple(r for r in args.regimes.split(",") if r)
    if not regimes or any(r not in REGIMES for r in regimes):
        print(f"sim figure: --regimes expects some of {', '.join(REGIMES)}, got {args.regimes!r}", file=sys.stderr)
        return 2
    out_dir = Path(args.out or "sim-out")
    t0 = time.perf_counter()
    done, took = _figures(_context(args, models, regimes), names, t0)
    from bluedove.lab.plots import PlotsUnavailable, plot

    for name in names:
        fig = done[name]
        try:
            fig["png"] = str(plot(fig, out_dir))
        except PlotsUnavailable as exc:
            _log(f"sim: no PNG of figure {name}: {exc}")
            fig["png"] = None
        fig["model"] = {r: {"terms": models.get(r).terms, "fit": models.get(r).meta.get("fit"),
                            "date": models.get(r).meta.get("date"), "machine": models.get(r).meta.get("machine")}
                        for r in regimes}
        fig["seconds"] = round(took.get(name, 0.0), 1)
        if args.json:
            print(json.dumps(fig))
        else:
            print_table(fig)
    _log(f"sim: done in {time.perf_counter() - t0:.0f} s; plots in {out_dir}")
    return 0
