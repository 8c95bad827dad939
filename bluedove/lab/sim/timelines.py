"""The paper's §IV-E as simulated timelines: Fig. 9 (elasticity, split on saturation) and Fig. 10 (matcher failures)."""

from __future__ import annotations

import numpy as np

from bluedove.lab.sim import paper
from bluedove.lab.sim.engine import SimConfig, Simulator
from bluedove.lab.sim.figures import Context
from bluedove.lab.sim.layouts import build, split, with_table


def _buckets(res, width_s: float, horizon_s: float) -> list[dict]:
    out = []
    for t0 in np.arange(0.0, horizon_s, width_s):
        sel = (res.t >= t0) & (res.t < t0 + width_s)
        rt = res.rt[sel]
        ok = rt[~np.isnan(rt)]
        out.append({"t_s": round(float(t0), 1), "messages": int(sel.sum() * res.weight),
                    "loss": round(float(np.isnan(rt).mean()) if len(rt) else 0.0, 4),
                    "rt_ms": round(float(ok.mean() * 1e3), 2) if len(ok) else None})
    return out


MAX_WEIGHT = 5.0  # real messages per simulated one in the timelines


def fig_9(ctx: Context, start: int = 5, step_s: float = 20.0, steps: int = 10, check_s: float = 5.0) -> dict:
    """Start with `start` matchers at half their saturation rate and raise the rate by a tenth of
    it every `step_s` (the paper: +500 msg/s every 5 min). An autoscaler checks every `check_s`:
    when the longest backlog has grown over three checks it adds a matcher that takes the upper
    half of the busiest matcher's segment on each dimension, usable after loading its
    subscriptions (calibrated load cost) and the dispatchers' next table pull."""
    w = ctx.workload()
    layout = build("mpartition", w, start)
    sat = ctx.saturation("mpartition", start)
    horizon = step_s * steps

    def rate(t: float) -> float:
        return sat * (0.5 + 0.1 * int(t // step_s))

    cfg = SimConfig(policy="adaptive", seed=ctx.seed)
    sim = Simulator(layout, ctx.models.rtree, ctx.pool(w, start + steps), cfg)
    scaler = _SplitOnGrowth(w, check_s, ctx.models.rtree.load_s_per_sub, cfg.report_interval_s)
    # about 4 run budgets of simulated messages over the whole timeline, but at most 5 real
    # messages per simulated one: coarser, a backlog grows in lumps that the trigger takes for a rise
    top = sat * (0.5 + 0.1 * steps)
    res = sim.run(rate, horizon, min(MAX_WEIGHT, max(1.0, top * horizon / (4 * ctx.budget.messages))), 0.0, scaler)
    rows = _buckets(res, 2.0, horizon)
    for row in rows:
        row["rate"] = round(rate(row["t_s"]))
        row["matchers"] = start + sum(1 for e in scaler.events if e["in_use_s"] <= row["t_s"])
    return {"figure": "9", "unit": "mean response time per 2 s of simulated time", "rows": rows,
            "events": scaler.events, "response_drop_s": _response_drops(rows, scaler.events),
            "saturation_start": round(sat), "paper": paper.FIG_9}


class _SplitOnGrowth:
    """Fig. 9's autoscaler, a Simulator hook: every `check_s`, when the longest backlog has
    grown over three checks, a new matcher takes the upper half of the busiest matcher's segment
    on each dimension (busiest since the last check), in use after loading its subscriptions
    (`load_s_per_sub` each) and `pull_s` for the dispatchers' table pull. One at a time; a new
    layout is judged on its own checks."""

    def __init__(self, w, check_s: float, load_s_per_sub: float, pull_s: float) -> None:
        self.w, self.check_s, self.load_s_per_sub, self.pull_s = w, check_s, load_s_per_sub, pull_s
        self.next = check_s
        self.backlogs: list[float] = []
        self.busy: np.ndarray | None = None
        self.adding = False
        self.events: list[dict] = []

    def __call__(self, s: Simulator, now: float) -> None:
        if self.adding and s.pending is None:
            self.adding = False
            self.backlogs = []  # judge the new layout on its own checks
        if now < self.next:
            return
        self.next += self.check_s
        backlog = max(max(s.free_at[m] - now, 0.0) for m in range(s.layout.n))
        busy = np.array([row[:] for row in s.busy])
        prev, self.busy = self.busy, busy
        hist = self.backlogs = (self.backlogs + [backlog])[-3:]
        grew = len(hist) == 3 and hist[0] < hist[1] < hist[2] and hist[2] > 0.05
        if not grew or self.adding or prev is None:
            return
        self._add(s, now, busy[: len(prev)] - prev)

    def _add(self, s: Simulator, now: float, delta: np.ndarray) -> None:
        """A matcher splitting the busiest per dimension by `delta`, seconds of matching per
        (matcher, dimension) since the last check."""
        victims = [s.layout.members[int(np.argmax(delta[: s.layout.n, i]))] for i in range(s.layout.k)]
        new = f"m{s.layout.n}"
        table = split(s.layout.table, victims, new)
        new_layout = with_table(s.layout, table, self.w)
        moved = int(new_layout.sizes[-1].sum())
        ready = now + moved * self.load_s_per_sub + self.pull_s
        s.set_layout(new_layout, ready)
        self.adding = True
        self.events.append({"t_s": round(now, 1), "matchers": new_layout.n, "in_use_s": round(ready, 2),
                            "split": victims, "subscriptions_loaded": moved})


def _response_drops(rows: list[dict], events: list[dict]) -> list[float | None]:
    """Per added matcher, seconds from its decision to the first 2 s bucket, once it is in use,
    whose response time is under half the peak of those from 4 s before the decision until then."""
    drops = []
    for e in events:
        before = [r["rt_ms"] for r in rows if e["t_s"] - 4 <= r["t_s"] < e["in_use_s"] and r["rt_ms"]]
        peak = max(before) if before else None
        after = [r for r in rows if r["t_s"] >= e["in_use_s"] and r["rt_ms"] and peak and r["rt_ms"] < 0.5 * peak]
        drops.append(round(after[0]["t_s"] - e["t_s"], 1) if after else None)
    return drops


def fig_10(ctx: Context, n: int = 20, load: float = 0.6, period_s: float = 30.0, failures: int = 4) -> dict:
    """n matchers at `load` x saturation; one matcher stops every `period_s`. Two dispatcher
    behaviours: ours (a failed call goes to the next candidate) and the paper's prototype (a
    message sent to a dead matcher before the dispatcher notices is lost; it notices at its
    next load-report fetch)."""
    w = ctx.workload()
    rate = load * ctx.saturation("mpartition", n)
    horizon = period_s * (failures + 1)
    out = {}
    kills = [period_s * (j + 1) for j in range(failures)]
    for mode, failover in (("failover", True), ("no_failover", False)):
        cfg = SimConfig(policy="adaptive", seed=ctx.seed, failover=failover, detect_s=0.0)
        sim = Simulator(build("mpartition", w, n), ctx.models.rtree, ctx.pool(w, n), cfg)
        todo = list(kills)

        def hook(s: Simulator, now: float) -> None:
            while todo and todo[0] <= now:
                todo.pop(0)
                live = [m for m in range(s.layout.n) if m not in s.dead]
                s.kill(live[int(s.np_rng.integers(len(live)))], now)

        # about 4 run budgets of simulated messages over the whole timeline
        res = sim.run(lambda t: rate, horizon, max(1.0, rate * horizon / (4 * ctx.budget.messages)), 0.0, hook)
        out[mode] = _buckets(res, 1.0, horizon)
    rows = [{"t_s": a["t_s"], "loss_failover": a["loss"], "rt_ms_failover": a["rt_ms"],
             "loss_no_failover": b["loss"], "rt_ms_no_failover": b["rt_ms"]}
            for a, b in zip(out["failover"], out["no_failover"])]
    recov = []
    # until the no-failover loss is back to the level it settles at (the last 10 s before the next
    # failure): a message whose every candidate is dead stays lost, there is no takeover here.
    # Loss is booked at a message's arrival, so the second before the next failure already holds
    # messages queued at the matcher about to stop: the window ends a second early.
    for k in kills:
        end = k + period_s - 1
        settled = [r["loss_no_failover"] for r in rows if end - 10 <= r["t_s"] < end]
        level = float(np.mean(settled)) if settled else 0.0
        lossy = [r["t_s"] for r in rows if k <= r["t_s"] < end and r["loss_no_failover"] > level + 0.002]
        recov.append(round(max(lossy) + 1 - k, 1) if lossy else 0.0)
    return {"figure": "10", "unit": "per 1 s of simulated time", "rows": rows, "failures_at_s": kills,
            "rate": round(rate), "peak_loss": {"failover": max(r["loss_failover"] for r in rows),
                                               "no_failover": max(r["loss_no_failover"] for r in rows)},
            "recovery_s": recov, "paper": paper.FIG_10}
