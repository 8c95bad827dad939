"""PNG plots (matplotlib, headless Agg): the simulator's figures, both cost regimes side by side
where present, and the elastic bench's timeline. matplotlib is the `plots` extra, imported
only when a plot is drawn."""

from __future__ import annotations

from pathlib import Path


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot():
    """matplotlib.pyplot on the headless Agg backend."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise PlotsUnavailable("plots need matplotlib: pip install 'bluedove[plots]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


TITLES = {"rtree": "our R-tree matcher", "per_dimension": "paper's regime (per-dimension index)"}


def _regimes(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """[(regime, rows of that regime)]: the top level is the first regime, nested dicts the others."""
    nested = [k for k, v in rows[0].items() if isinstance(v, dict)]
    first = [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in rows]
    out = [("rtree", first)]
    for regime in nested:
        out.append((regime, [{**{k: v for k, v in r.items() if not isinstance(v, dict)}, **r[regime]} for r in rows]))
    return out


def _rates(ax, rows: list[dict], xkey: str, log: bool, unit: str) -> None:
    keys = [k for k in rows[0] if k != xkey and "_over_" not in k and not k.startswith("over_")
            and isinstance(rows[0][k], (int, float)) and k not in ("max_over_mean_subs",)]
    for k in keys:
        ax.plot([r[xkey] for r in rows], [r[k] for r in rows], marker="o", label=k,
                linestyle="--" if k == "p2p_uniform" else "-")
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xkey)
    ax.set_ylabel(unit)


def _fig_8(fig: dict, axes: list, rows: list[dict]) -> None:
    som = fig["std_over_mean"]
    for a, (regime, rs) in zip(axes, _regimes(rows)):
        s = som if regime == "rtree" else som[regime]
        xs = [r["matcher"] for r in rs]
        a.bar([x - 0.2 for x in xs], [r["bluedove"] for r in rs], 0.4, label=f"bluedove (std/mean {s['bluedove']})")
        a.bar([x + 0.2 for x in xs], [r["p2p"] for r in rs], 0.4, label=f"p2p (std/mean {s['p2p']})")
        a.set_xlabel("matcher")
        a.set_ylabel("busy fraction")
        a.set_title(f"Fig. 8: {TITLES.get(regime, regime)}", fontsize=10)


def _fig_9(fig: dict, ax, rows: list[dict]) -> None:
    ax.plot([r["t_s"] for r in rows], [r["rt_ms"] or 0 for r in rows], label="mean response time (ms)")
    for e in fig["events"]:
        ax.axvline(e["t_s"], color="grey", linestyle="--")
    ax2 = ax.twinx()
    ax2.step([r["t_s"] for r in rows], [r["rate"] for r in rows], color="tab:orange", where="post", label="msg/s")
    ax2.set_ylabel("message rate (msg/s)")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("response time (ms)")
    ax.set_title("Fig. 9 (simulated, our R-tree matcher): dashed = matcher added", fontsize=10)


def _fig_10(fig: dict, ax, rows: list[dict]) -> None:
    t = [r["t_s"] for r in rows]
    ax.plot(t, [r["loss_no_failover"] for r in rows], label="loss, paper's dispatcher (no failover)")
    ax.plot(t, [r["loss_failover"] for r in rows], label="loss, ours (failover)")
    for k in fig["failures_at_s"]:
        ax.axvline(k, color="grey", linestyle="--")
    ax2 = ax.twinx()
    ax2.plot(t, [r["rt_ms_failover"] or 0 for r in rows], color="tab:green", alpha=0.6, label="rt ms (ours)")
    ax2.set_ylabel("response time (ms)")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("fraction of messages lost")
    ax.set_title("Fig. 10 (simulated, our R-tree matcher): dashed = matcher fails", fontsize=10)


def _rates_per_regime(fig: dict, axes: list, rows: list[dict], xkey: str, log: bool) -> None:
    for a, (regime, rs) in zip(axes, _regimes(rows)):
        _rates(a, rs, xkey, log, fig["unit"])
        a.set_title(f"Fig. {fig['figure']}: {TITLES.get(regime, regime)}", fontsize=10)


def plot(fig: dict, out_dir: Path) -> Path:
    """One simulated figure of `bluedove sim figure` as out_dir/fig<name>.png."""
    plt = pyplot()
    name = fig["figure"]
    rows = fig["rows"]
    if name in ("9", "10"):
        f, axes = plt.subplots(figsize=(7.0, 4.2))
        axes = [axes]
    else:
        f, axes = plt.subplots(1, len(_regimes(rows)), figsize=(6.0 * len(_regimes(rows)), 4.4), squeeze=False)
        axes = list(axes[0])
    if name in ("6a", "6b", "7"):
        _rates_per_regime(fig, axes, rows, "matchers", True)
    elif name == "8":
        _fig_8(fig, axes, rows)
    elif name == "9":
        _fig_9(fig, axes[0], rows)
    elif name == "10":
        _fig_10(fig, axes[0], rows)
    else:  # 11a-c
        _rates_per_regime(fig, axes, rows, next(iter(rows[0])), False)
    for a in axes:
        a.legend(loc="best", fontsize=7)
    f.suptitle(f"the paper's §IV Fig. {name}, simulated (bluedove sim)", fontsize=10)
    f.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"fig{name}.png"
    f.savefig(path, dpi=100)
    plt.close(f)
    return path


def plot_elastic(result: dict, path: str) -> None:
    """`bluedove bench elastic --plot`: offered and accepted rates, p50 and matchers over time."""
    plt = pyplot()
    tl = result["timeline"]
    t = [p["t"] for p in tl]
    fig, (a1, a2, a3) = plt.subplots(3, 1, sharex=True, figsize=(9, 7))
    a1.plot(t, [p["offered"] for p in tl], label="offered msg/s")
    a1.plot(t, [p["accepted"] for p in tl], label="accepted msg/s")
    a1.legend(loc="upper left")
    a2.plot(t, [p["p50_ms"] if p["p50_ms"] is not None else float("nan") for p in tl], color="tab:red")
    a2.set_ylabel("batch p50 (ms)")
    a2.set_yscale("log")
    a3.step(t, [p["matchers"] for p in tl], where="post", color="tab:green")
    a3.set_ylabel("matchers")
    a3.set_xlabel("seconds")
    for e in result["events"]:
        color = {"split": "tab:green", "merge": "tab:orange", "scale_out_stopped": "tab:red",
                 "scale_out_resumed": "tab:purple"}.get(e["action"])
        if color:
            for ax in (a1, a2, a3):
                ax.axvline(e["t"], color=color, alpha=0.4 if e["action"] in ("split", "merge") else 0.8,
                           linestyle="--" if e["action"] in ("split", "merge") else "-")
    fig.suptitle("bluedove bench elastic (the paper's Fig. 9): green = join/split, orange = leave/merge,\n"
                 "red = scale-outs stopped (the last relieved nothing), purple = resumed", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_refit(result: dict, path: str) -> str:
    """`bluedove sim refit --out`: each system's saturation against the matchers, real capped
    processes (points) beside the simulator on the refitted model (lines)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for i, system in enumerate(("mpartition", "p2p", "full-replication")):
        rows = sorted((r for r in result["rows"] if r["system"] == system), key=lambda r: r["matchers"])
        if not rows:
            continue
        n = [r["matchers"] for r in rows]
        color = f"C{i}"
        ax.plot(n, [r["simulated"] for r in rows], color=color, label=f"{system}, simulated")
        ax.plot(n, [r["real"] for r in rows], "o", color=color, label=f"{system}, real processes")
    cores = sorted({r["cores"] for r in result["rows"]})
    ax.set_xlabel(f"matchers, each capped at {', '.join(f'{c:g}' for c in cores)} core")
    ax.set_ylabel("msg/s at saturation")
    ax.legend(loc="best", fontsize=7)
    fig.suptitle("Fig. 6a on capped matchers: real processes beside the simulator (bluedove sim refit)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
