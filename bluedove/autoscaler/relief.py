"""Did a scale-out relieve the load? If not, what is the limit, and when to try again. Pure:
over the autoscaler's load samples (bluedove/autoscaler/policy.py LoadSample), time an argument.

A scale-out taken because the matchers were saturated starts a `Trial`, holding what the
window before it showed. Once the new matchers serve (as many owners answer as it asked
for), `check_settle_s` later, the samples of a whole `window_s` are compared with it. The
scale-out relieved the load if the cluster did better, not merely its matchers less busy
(the same work over more matchers always is):
  - the accepted rate rose by `relief_rate` (10 %); or, with the accepted rate held (not
    fallen by as much: less accepted also means less backlog and latency),
  - queues that grew before stopped growing (the backlog did not rise over the window), or
  - the publish p50 fell by `relief_latency` (20 %), from at least `relief_latency_floor_s`.
Else it is a `Stop`: no more matchers are added, and the limit is named from what the same
window shows (`name_limit`): the dispatchers, the store, the host (each by its CPU), the
publishers (the matchers are no longer saturated, yet the rate did not rise: no more is
sent), or unknown (the matchers stay saturated and nothing else is hot).

A stop ends (`resume`), and scale-outs are checked again one at a time, when:
  1. fewer matchers run than at the stop (one died, or was removed);
  2. the load dropped: every sample of a window at most `in_busy` (the matchers idle, not
     merely less busy for being more), queues not growing;
  3. the named limit went away: the dispatchers', store's or host's CPU stayed under
     `limit_cpu` − 0.1 for a window (say their HPA added dispatchers), with no store error;
     for the publishers, the accepted rate rose by `relief_rate` over the stop's;
  4. `retry_s` passed since the stop (what it cannot see may have changed).
After 3 (but the publishers') or 4 the next scale-out adds one matcher: a probe, since
nothing says the load moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from bluedove.autoscaler.policy import Decision, LoadSample, ScalingConfig, plan, saturation

# What may limit the rate (the bluedove_autoscaler_limit gauge's label values).
LIMITS = ("matchers", "dispatchers", "store", "host", "publishers", "unknown")
HYSTERESIS = 0.1


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True)
class Snapshot:
    """A window's means."""

    matchers: int
    busy: float
    rise: int  # queued at its end minus at its start
    accepted: float | None
    p50_s: float | None
    dispatcher_cpu: float | None
    store_cpu: float | None
    store_errors: int
    host_cpu: float | None

    @classmethod
    def of(cls, win: Sequence[LoadSample]) -> "Snapshot":
        return cls(matchers=win[-1].matchers, busy=sum(s.busy for s in win) / len(win),
                   rise=win[-1].queued - win[0].queued, accepted=_mean([s.accepted for s in win]),
                   p50_s=_mean([s.p50_s for s in win]), dispatcher_cpu=_mean([s.dispatcher_cpu for s in win]),
                   store_cpu=_mean([s.store_cpu for s in win]), store_errors=sum(s.store_errors for s in win),
                   host_cpu=_mean([s.host_cpu for s in win]))

    def describe(self) -> str:
        out = [f"{self.matchers} matchers busy {self.busy:.2f}", f"queued {self.rise:+d}"]
        if self.accepted is not None:
            out.append(f"accepted {self.accepted:,.0f} msg/s")
        if self.p50_s is not None:
            out.append(f"p50 {self.p50_s * 1000:,.0f} ms")
        return ", ".join(out)

    def readings(self) -> str:
        """The CPU readings, for a reason."""
        def f(v: float | None) -> str:
            return "unknown" if v is None else f"{v:.2f}"
        return (f"busiest dispatcher CPU {f(self.dispatcher_cpu)} of a core, Redis {f(self.store_cpu)} of a core"
                f"{f' ({self.store_errors} failed store reads)' if self.store_errors else ''}, "
                f"host {f(self.host_cpu)} of its cores")


@dataclass(frozen=True)
class Trial:
    """A scale-out being checked."""

    at: float
    from_n: int
    to_n: int
    before: Snapshot
    serving_at: float | None = None

    def holds(self) -> str:
        return f"the scale-out to {self.to_n} is being checked"


@dataclass(frozen=True)
class Stop:
    """Scale-outs stopped: the last one did not relieve the load."""

    at: float
    matchers: int
    limit: str
    reason: str
    accepted: float | None = None  # the accepted rate it saw (msg/s)

    def holds(self) -> str:
        return f"scale-outs are stopped since the one to {self.matchers} relieved nothing (limit: {self.limit})"


@dataclass(frozen=True)
class Verdict:
    """What the review of a check concluded, and why: relieved, not relieved, unchecked or resumed."""

    outcome: str  # "relieved" | "not_relieved" | "unchecked" | "resumed"
    reason: str
    limit: str | None = None
    probe: bool = False  # resumed on a guess (rules 3, 4): the next scale-out adds one matcher


def _window(loads: Sequence[LoadSample], since: float, until: float) -> list[LoadSample]:
    return [s for s in loads if since <= s.at <= until]


def start(loads: Sequence[LoadSample], now: float, from_n: int, to_n: int, config: ScalingConfig) -> Trial:
    """The check of a scale-out from `from_n` to `to_n` decided at `now`."""
    win = _window(loads, now - config.window_s, now) or list(loads[-1:])
    return Trial(now, from_n, to_n, Snapshot.of(win))


def relief(before: Snapshot, win: Sequence[LoadSample], c: ScalingConfig) -> str | None:
    """How the window after a scale-out shows it relieved the load, or None. Matchers that are
    merely less busy do not count: with the same work spread over more of them they always
    are; the cluster must do better (more accepted, sooner) or its backlog stop growing."""
    after = Snapshot.of(win)
    if before.accepted and after.accepted is not None and after.accepted >= before.accepted * (1 + c.relief_rate):
        return f"the accepted rate rose: {before.accepted:,.0f} → {after.accepted:,.0f} msg/s"
    # The rest only while the accepted rate held: less accepted also makes less backlog and latency.
    if before.accepted and after.accepted is not None and after.accepted < before.accepted * (1 - c.relief_rate):
        return None
    if before.rise >= c.queue_growth and after.rise <= 0:
        return f"the queues stopped growing: {before.rise:+d} → {after.rise:+d} over {c.window_s:.0f} s"
    if (before.p50_s is not None and after.p50_s is not None and before.p50_s >= c.relief_latency_floor_s
            and after.p50_s <= before.p50_s * (1 - c.relief_latency)):
        return f"the p50 fell: {before.p50_s * 1000:,.0f} → {after.p50_s * 1000:,.0f} ms"
    return None


def name_limit(win: Sequence[LoadSample], c: ScalingConfig) -> tuple[str, str]:
    """What limits the rate, from a window of samples: (one of LIMITS, why)."""
    s = Snapshot.of(win)
    hot = c.limit_cpu
    if s.dispatcher_cpu is not None and s.dispatcher_cpu >= hot:
        return "dispatchers", (f"the dispatchers: the busiest uses {s.dispatcher_cpu:.2f} of a core (at least "
                               f"{hot}); more dispatchers would help (on Kubernetes their HPA adds them on CPU)")
    if s.store_errors or (s.store_cpu is not None and s.store_cpu >= hot):
        return "store", (f"the store: Redis uses {s.store_cpu if s.store_cpu is not None else float('nan'):.2f} "
                         f"of a core, {s.store_errors} store reads failed")
    if s.host_cpu is not None and s.host_cpu >= hot:
        return "host", (f"this host: {s.host_cpu:.0%} of its cores are busy; the matchers share them with the "
                        "dispatchers and the store, and another matcher adds no core")
    why, _ = saturation(win, c)
    if why is not None:
        return "matchers", f"the matchers: {why}"
    return "publishers", (f"the publishers: the matchers are not saturated (busy {s.busy:.2f}) and no dispatcher, "
                          "store or host reading is at its limit; the rate is what is sent")


def bottleneck(win: Sequence[LoadSample], c: ScalingConfig) -> str:
    """What limits the rate now (the gauge): the matchers when saturated, else as name_limit."""
    if saturation(win, c)[0] is not None:
        return "matchers"
    return name_limit(win, c)[0]


def _cooled(values: Sequence[float | None], limit: float) -> bool:
    known = [v for v in values if v is not None]
    return bool(known) and max(known) < limit - HYSTERESIS


def resume(stop: Stop, loads: Sequence[LoadSample], members: int, now: float,
           c: ScalingConfig) -> tuple[str, bool] | None:
    """Why scale-outs may resume after `stop` and whether on a guess (then the next adds one
    matcher), or None (the rules in the module's docstring)."""
    if members < stop.matchers:
        return f"{members} matchers run, fewer than the {stop.matchers} at the stop", False
    win = _window(loads, max(stop.at, now - c.window_s), now)
    whole = len(win) >= 3 and win[0].at - (now - c.window_s) <= 0.2 * c.window_s
    if whole:
        if max(s.busy for s in win) <= c.in_busy and win[-1].queued <= win[0].queued + c.queue_growth // 2:
            return f"the load dropped: busy at most {c.in_busy} per matcher for {c.window_s:.0f} s", False
        rate = _mean([s.accepted for s in win])
        if stop.limit == "publishers" and stop.accepted and rate is not None and \
                rate >= stop.accepted * (1 + c.relief_rate):
            return f"the publishers send more: accepted {stop.accepted:,.0f} → {rate:,.0f} msg/s", False
        readings = {"dispatchers": [s.dispatcher_cpu for s in win], "store": [s.store_cpu for s in win],
                    "host": [s.host_cpu for s in win]}.get(stop.limit)
        if readings is not None and _cooled(readings, c.limit_cpu) and not (
                stop.limit == "store" and any(s.store_errors for s in win)):
            return (f"the {stop.limit} CPU reading stayed under {c.limit_cpu - HYSTERESIS:.2f} "
                    f"for {c.window_s:.0f} s"), True
    if now - stop.at >= c.retry_s:
        return f"{c.retry_s:.0f} s since the stop: one more scale-out may be tried", True
    return None


def review(check: Trial | Stop | None, loads: Sequence[LoadSample], members: int, now: float,
           c: ScalingConfig) -> tuple[Trial | Stop | None, Verdict | None]:
    """The check's next state, and its verdict when it reached one."""
    if isinstance(check, Stop):
        resumed = resume(check, loads, members, now, c)
        return (check, None) if resumed is None else (None, Verdict("resumed", f"scale-outs resume: {resumed[0]}",
                                                                    probe=resumed[1]))
    if check is None:
        return None, None
    t = check
    serving_at = t.serving_at
    if serving_at is None:
        served = [s.at for s in loads if s.at >= t.at and s.matchers >= t.to_n]
        if served:
            serving_at = served[0]
            t = replace(t, serving_at=serving_at)
        elif now - t.at > c.check_timeout_s:
            return None, Verdict("unchecked", f"the scale-out to {t.to_n} was not checked: fewer than {t.to_n} "
                                              f"matchers served within {c.check_timeout_s:.0f} s")
        else:
            return t, None
    begin = serving_at + c.check_settle_s
    if now < begin + c.window_s:
        return t, None
    win = _window(loads, begin, now)
    if len(win) < 3:
        if now - begin > c.window_s + c.check_timeout_s:
            return None, Verdict("unchecked", f"the scale-out to {t.to_n} was not checked: too few load samples")
        return t, None
    after = Snapshot.of(win)
    how = relief(t.before, win, c)
    if how is not None:
        return None, Verdict("relieved", f"the scale-out {t.from_n} → {t.to_n} relieved the load: {how}")
    limit, why = name_limit(win, c)
    if limit == "matchers":
        limit, why = "unknown", (f"unknown: the matchers stay saturated with {after.matchers} of them, yet one "
                                 "more did not help and no dispatcher, store or host reading is at its limit "
                                 "(matchers sharing a node's CPU look like this)")
    reason = (f"the scale-out {t.from_n} → {t.to_n} did not relieve the load (before: {t.before.describe()}; "
              f"after: {after.describe()}); no more matchers are added. The limit is {why}. "
              f"Readings: {after.readings()}")
    return Stop(now, t.to_n, limit, reason, after.accepted), Verdict("not_relieved", reason, limit)


def step(check: Trial | Stop | None, loads: Sequence[LoadSample], members: int, now: float,
         last_change_at: float | None, c: ScalingConfig) -> tuple[Decision, Trial | Stop | None, Verdict | None]:
    """One autoscaler step: review the check, ask the policy, and start a check after a
    scale-out taken for saturation (one up to the minimum has nothing to relieve). Returns the
    decision, the check to carry to the next step, and the review's verdict if it reached one."""
    check, verdict = review(check, loads, members, now, c)
    d = plan(loads, members, now, last_change_at, c, check)
    if d.action == "scale_out" and verdict is not None and verdict.probe and d.target > members + 1:
        d = replace(d, target=members + 1, reason=f"{d.reason}; one matcher, as {verdict.reason}")
    if d.action == "scale_out" and members >= c.min_matchers:
        check = start(loads, now, members, d.target, c)
    elif d.action != "hold":
        check = None
    return d, check, verdict
