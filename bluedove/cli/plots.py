"""PNG plots of the simulator's figures (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(fig: dict, out_dir: Path) -> Path:
    name = fig["figure"]
    rows = fig["rows"]
    f, ax = plt.subplots(figsize=(6.4, 4.2))
    if name in ("6a", "6b", "7"):
        keys = [k for k in rows[0] if k != "matchers" and "_over_" not in k]
        for k in keys:
            ax.plot([r["matchers"] for r in rows], [r[k] for r in rows], marker="o", label=k)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("matchers")
        ax.set_ylabel(fig["unit"])
    elif name == "8":
        xs = [r["matcher"] for r in rows]
        ax.bar([x - 0.2 for x in xs], [r["bluedove"] for r in rows], 0.4,
               label=f"bluedove (std/mean {fig['std_over_mean']['bluedove']})")
        ax.bar([x + 0.2 for x in xs], [r["p2p"] for r in rows], 0.4, label=f"p2p (std/mean {fig['std_over_mean']['p2p']})")
        ax.set_xlabel("matcher")
        ax.set_ylabel("busy fraction")
    elif name == "9":
        ax.plot([r["t_s"] for r in rows], [r["rt_ms"] or 0 for r in rows], label="mean response time (ms)")
        for e in fig["events"]:
            ax.axvline(e["t_s"], color="grey", linestyle="--")
        ax2 = ax.twinx()
        ax2.step([r["t_s"] for r in rows], [r["rate"] for r in rows], color="tab:orange", where="post", label="msg/s")
        ax2.set_ylabel("message rate (msg/s)")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("response time (ms)")
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
    else:  # 11a-c
        xkey = next(iter(rows[0]))
        ax.plot([r[xkey] for r in rows], [r["bluedove"] for r in rows], marker="o", label="bluedove")
        if "p2p_uniform" in rows[0]:
            ax.plot([r[xkey] for r in rows], [r["p2p_uniform"] for r in rows], linestyle="--", label="p2p, uniform")
        ax.set_xlabel(xkey)
        ax.set_ylabel(fig["unit"])
    ax.set_title(f"Fig. {name} (simulated; seed 001 §IV)")
    ax.legend(loc="best", fontsize=8)
    f.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"fig{name}.png"
    f.savefig(path, dpi=110)
    plt.close(f)
    return path
