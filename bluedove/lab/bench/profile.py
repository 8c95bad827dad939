"""`bench e2e --profile DIR`: py-spy on one dispatcher and one matcher during a saturated step,
and the summary of its samples as CPU per message by category ("where every microsecond goes").

py-spy (the `lab` extra) samples each process's Python stacks `RATE` times a second without
changing it; `--format raw` writes one line per distinct stack, frames outermost first:
`func (file:line);func (file:line);… count`. A sample of a thread that is not idle is 1/RATE s
of that thread's CPU.

A stack's category is decided from its innermost frame outwards by the first frame a rule
names. Frames of the service's own code (`PROJECT`) that no rule names decide "other"; frames
of libraries that no rule names (json, dataclasses, typing, …) pass the decision on to their
caller, so that the JSON a dispatcher encodes for a message body counts where the body is built,
not as HTTP.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 100  # samples per second

DECODE = "request decode (HTTP, JSON, PubSub protobuf)"
VALIDATION = "validation"
RANKING = "ranking"
PB_BUILD = "protobuf build (ForwardRequest, message body)"
GRPC = "gRPC calls and server"
MATCHER_DECODE = "matcher decode (ForwardRequest to points)"
WALK = "index walk"
RESULTS = "match results to counts and deliveries"
STORE = "store write"
ASYNCIO = "asyncio overhead"
OTHER = "other"
CATEGORIES = (DECODE, VALIDATION, RANKING, PB_BUILD, GRPC, MATCHER_DECODE, WALK, RESULTS, STORE, ASYNCIO, OTHER)

# Innermost frames of a thread that waits: py-spy takes a thread for busy when the OS says it
# may run, and on a loaded machine a thread woken from epoll or a lock stays runnable (waiting
# for a core) long enough to be sampled. These samples are left out of the shares.
IDLE = re.compile(r"^(EpollSelector\.select|Thread\.run|_worker|Condition\.wait|Event\.wait|Queue\.get|"
                  r"select|sleep|poll)$")

PROJECT = re.compile(r"^bluedove/")

# (file pattern, function pattern or None, category), per process kind; looked up innermost first.
_COMMON = [
    (r"^(bluedove/store/|redis/|hiredis)", None, STORE),
    (r"(^|/)grpc/_common\.py$", r"^serialize$", PB_BUILD),
    (r"(^|/)(asyncio/|selectors\.py|concurrent/futures/|threading\.py|queue\.py|contextvars|uvloop/)", None, ASYNCIO),
]
RULES: dict[str, list[tuple[str, str | None, str]]] = {
    "dispatcher": [
        (r"^bluedove/dispatcher/(deps\.py|routes/)", None, DECODE),
        (r"^bluedove/dispatcher/grpc_api\.py$", r"message_json", DECODE),
        (r"(^|/)grpc/_common\.py$", r"^deserialize$", DECODE),
        (r"^bluedove/core/model\.py$", None, VALIDATION),
        (r"^bluedove/dispatcher/operations/common\.py$", r"check_range", VALIDATION),
        (r"^(bluedove/core/forwarding\.py|bluedove/core/partition/segments\.py|bluedove/dispatcher/view\.py)$",
         None, RANKING),
        (r"^bluedove/dispatcher/publish/forwarder\.py$", r"publish|_charge_next", RANKING),
        (r"^bluedove/dispatcher/operations/publish\.py$", r"outgoing", PB_BUILD),
        (r"^bluedove/store/ids\.py$", None, PB_BUILD),
        # a lane call's own lines build the ForwardRequest; the call itself is in grpc's frames
        (r"^bluedove/dispatcher/publish/forwarder\.py$", r"Forwarder\._forward$|_packed", PB_BUILD),
        (r"^bluedove/dispatcher/batcher\.py$", None, GRPC),
        (r"^bluedove/dispatcher/grpc_api\.py$", None, GRPC),
        (r"(^|/)(uvicorn|httptools|h11|starlette|fastapi|anyio|pydantic)/", None, DECODE),
        (r"(^|/)(grpc|google/protobuf)/", None, GRPC),
        *_COMMON,
    ],
    "matcher": [
        # the walk's ids to counts and deliveries (bluedove/matcher/matches.py)
        (r"^bluedove/matcher/matches\.py$", None, RESULTS),
        (r"^bluedove/matcher/index\.py$", r"match_batch|\.matches$", RESULTS),
        (r"^bluedove/matcher/(index|packed|levels)\.py$", None, WALK),
        (r"(^|/)numba/", None, WALK),
        (r"^bluedove/matcher/(matcher|servicer|space_state)\.py$", r"forward|Forward", MATCHER_DECODE),
        (r"^bluedove/matcher/sets_owner\.py$", r"owns", MATCHER_DECODE),
        (r"(^|/)grpc/_common\.py$", r"^deserialize$", MATCHER_DECODE),
        (r"(^|/)(grpc|google/protobuf)/", None, GRPC),
        *_COMMON,
    ],
}
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def parse_raw(text: str) -> list[tuple[list[tuple[str, str]], int]]:
    """py-spy's raw output as [(frames outermost first as (function, file), samples)]."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for f in stack.split(";"):
            m = _FRAME.match(f.strip())
            frames.append((m["func"], m["file"]) if m else (f.strip(), ""))
        out.append((frames, int(count)))
    return out


def categorise(frames: list[tuple[str, str]], kind: str) -> str:
    rules = RULES[kind]
    for func, file in reversed(frames):
        for file_re, func_re, cat in rules:
            if re.search(file_re, file) and (func_re is None or re.search(func_re, func)):
                return cat
        if PROJECT.search(file):
            return OTHER  # the service's own code that no rule names
    return OTHER


def summarise(text: str, kind: str, top: int = 12) -> dict:
    """Samples by category (every category listed; a waiting thread's apart, `waiting`), each
    category's share of the busy samples, and the `top` functions by self samples."""
    by_cat: Counter[str] = Counter({c: 0 for c in CATEGORIES})
    self_time: Counter[str] = Counter()
    waiting = 0
    for frames, n in parse_raw(text):
        func, file = frames[-1]
        if IDLE.match(func):
            waiting += n
            continue
        by_cat[categorise(frames, kind)] += n
        self_time[f"{func} ({file})"] += n
    busy = sum(by_cat.values())
    return {"samples": busy, "waiting": waiting, "by_category": dict(by_cat),
            "share": {c: round(n / busy, 4) if busy else 0.0 for c, n in by_cat.items()},
            "top_self": [{"function": f, "samples": n} for f, n in self_time.most_common(top)]}


def per_message(summary: dict, messages: float, process_cpu_s: float, rate: int = RATE) -> dict:
    """µs per message of each category: the process's CPU per message as the OS counts it
    (psutil), split by the categories' shares of the busy samples. Beside it the busy samples'
    own µs per message (samples / rate): above the process's when runnable threads that waited
    for a core were sampled (a loaded machine), below it when threads py-spy does not see
    (gRPC's C-core) worked."""
    if not messages:
        return {"us_per_msg": None}
    process_us = process_cpu_s * 1e6 / messages
    return {"us_per_msg": {c: round(share * process_us, 2) for c, share in summary["share"].items()},
            "process_us_per_msg": round(process_us, 2),
            "sampled_us_per_msg": round(summary["samples"] / rate * 1e6 / messages, 2)}


def py_spy() -> str | None:
    """The py-spy binary (the `lab` extra installs it beside this Python), or None."""
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


@dataclass
class Recording:
    """One py-spy run on one process, for `duration_s`."""

    kind: str  # "dispatcher" or "matcher"
    name: str  # d1, m1
    path: Path
    proc: subprocess.Popen

    @classmethod
    def start(cls, kind: str, name: str, pid: int, path: Path, duration_s: float) -> "Recording":
        exe = py_spy()
        if exe is None:
            raise RuntimeError("--profile needs py-spy: pip install 'bluedove[lab]'")
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
                                 "--rate", str(RATE), "--nonblocking", "--format", "raw", "--output", str(path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return cls(kind, name, path, proc)

    def finish(self, timeout_s: float = 60.0) -> dict:
        """The summary of the samples (py-spy's error when it could not attach)."""
        _, err = self.proc.communicate(timeout=timeout_s)
        if self.proc.returncode != 0 or not self.path.exists():
            return {"error": (err or "").strip()[-300:] or f"py-spy exited {self.proc.returncode}"}
        return summarise(self.path.read_text(), self.kind)


def profiled_step(step, url: str, rate: float, args, bodies: list, probe, pids: dict[str, int], folder: Path,
                  label: str, **kw) -> dict:
    """One more step at `rate` (a saturating one) with py-spy on the first dispatcher and the
    first matcher for the step's length: the step, and per process the summary of its samples
    and the µs per message of each category (a matcher's per message it matched)."""
    picks = [(kind, name) for kind, prefix in (("dispatcher", "d"), ("matcher", "m"))
             for name in sorted(n for n in pids if n.startswith(prefix))[:1]]
    recs: list[Recording] = []

    def hook():
        recs.extend(Recording.start(kind, name, pids[name], folder / f"{label}-{name}.txt", args.step_s)
                    for kind, name in picks)
        return lambda: [r.finish() for r in recs]

    s = step(url, rate, args.step_s, bodies, args.batch, args.publishers, probe=probe, hook=hook, **kw)
    cpu = s.get("cpu") or {}
    out = {}
    for rec, summary in zip(recs, s.pop("hook_result", [])):
        entry = {"raw": str(rec.path), **summary}
        if "error" not in summary and cpu:
            window = min(args.step_s, cpu["seconds"]) / cpu["seconds"]  # py-spy's share of the step
            messages = (cpu["matcher_messages_by"][rec.name] if rec.kind == "matcher" else cpu["messages"]) * window
            process_s = cpu["us_per_msg"][rec.name] * cpu["messages"] / 1e6 * window
            entry.update(messages=round(messages), process_cpu_s=round(process_s, 4),
                         **per_message(summary, messages, process_s))
        out[rec.name] = entry
    return {"offered": s["offered"], "achieved": s["achieved"], "processes": out}


def resummarise(result: dict) -> dict:
    """A `bench e2e --profile` JSON result with its profiles summarised again from the raw files
    (after a change of the rules here): `python -m bluedove.lab.bench.profile RESULT.json`."""
    for system in result.get("systems", {}).values():
        for name, entry in (system.get("profile") or {}).get("processes", {}).items():
            if "error" in entry or not Path(entry["raw"]).exists():
                continue
            kind = "matcher" if name.startswith("m") else "dispatcher"
            summary = summarise(Path(entry["raw"]).read_text(), kind)
            entry.update(summary, **per_message(summary, entry["messages"], entry["process_cpu_s"]))
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(resummarise(json.loads(Path(sys.argv[1]).read_text()))))
