"""PNG plots of the simulator's figures (matplotlib, headless Agg); both cost regimes side by side where present."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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


def plot(fig: dict, out_dir: Path) -> Path:
    name = fig["figure"]
    rows = fig["rows"]
    if name in ("9", "10"):
        f, axes = plt.subplots(figsize=(7.0, 4.2))
        axes = [axes]
    else:
        parts = _regimes(rows)
        f, axes = plt.subplots(1, len(parts), figsize=(6.0 * len(parts), 4.4), squeeze=False)
        axes = list(axes[0])
    ax = axes[0]
    if name in ("6a", "6b", "7"):
        for a, (regime, rs) in zip(axes, _regimes(rows)):
            _rates(a, rs, "matchers", True, fig["unit"])
            a.set_title(f"Fig. {name}: {TITLES.get(regime, regime)}", fontsize=10)
    elif name == "8":
        som = fig["std_over_mean"]
        for a, (regime, rs) in zip(axes, _regimes(rows)):
            s = som if regime == "rtree" else som[regime]
            xs = [r["matcher"] for r in rs]
            a.bar([x - 0.2 for x in xs], [r["bluedove"] for r in rs], 0.4, label=f"bluedove (std/mean {s['bluedove']})")
            a.bar([x + 0.2 for x in xs], [r["p2p"] for r in rs], 0.4, label=f"p2p (std/mean {s['p2p']})")
            a.set_xlabel("matcher")
            a.set_ylabel("busy fraction")
            a.set_title(f"Fig. 8: {TITLES.get(regime, regime)}", fontsize=10)
    elif name == "9":
        ax.plot([r["t_s"] for r in rows], [r["rt_ms"] or 0 for r in rows], label="mean response time (ms)")
        for e in fig["events"]:
            ax.axvline(e["t_s"], color="grey", linestyle="--")
        ax2 = ax.twinx()
        ax2.step([r["t_s"] for r in rows], [r["rate"] for r in rows], color="tab:orange", where="post", label="msg/s")
        ax2.set_ylabel("message rate (msg/s)")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("response time (ms)")
        ax.set_title("Fig. 9 (simulated, our R-tree matcher): dashed = matcher added", fontsize=10)
    elif name == "10":
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
    else:  # 11a-c
        for a, (regime, rs) in zip(axes, _regimes(rows)):
            _rates(a, rs, next(iter(rows[0])), False, fig["unit"])
            a.set_title(f"Fig. {name}: {TITLES.get(regime, regime)}", fontsize=10)
    for a in axes:
        a.legend(loc="best", fontsize=7)
    f.suptitle(f"seed 001 §IV Fig. {name}, simulated (bluedove sim)", fontsize=10)
    f.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"fig{name}.png"
    f.savefig(path, dpi=100)
    plt.close(f)
    return path
