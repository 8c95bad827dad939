"""The faults, each done to real processes of a local cluster, and how recovery is seen.

A fault is an async function `fault(env)`: it breaks something at once, waits as the fault
lasts, mends what a real operator or supervisor would mend (restarts a killed process), and
returns notes. The cluster is judged *whole* when every member that owns segments is alive
in a dispatcher's view and the dispatcher is ready (table and store reachable).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bluedove.client import AsyncClient
from bluedove.client.errors import BlueDoveError
from bluedove.lab.faults.netns import Network
from bluedove.local.cluster import LocalCluster


@dataclass
class Env:
    """What a fault acts on: the cluster, a client, the victims, and how long each fault lasts."""

    cluster: LocalCluster
    client: AsyncClient
    victim_matcher: str = "m2"
    victim_dispatcher: str = "d1"
    stop_s: float = 10.0  # how long a SIGSTOPped matcher stays stopped
    store_down_s: float = 2.0  # how long a killed redis-server stays down
    disk_full_s: float = 5.0  # how long the store's disk stays full
    partition_s: float = 8.0  # how long the network stays partitioned
    network: Network | None = None  # the matchers' namespaces, for `partition`
    # (from, to): monotonic times in which no publish may be acknowledged (the store cannot write)
    no_writes: tuple[float, float] | None = None


async def cluster_view(client: AsyncClient) -> dict | None:
    try:
        return await client.t.cluster(timeout_s=2)
    except (BlueDoveError, OSError):
        return None


def is_whole(view: dict | None) -> bool:
    if not view or not view.get("members"):
        return False
    return all(m["status"] == "alive" for m in view["members"] if not m.get("idle"))


def member(view: dict | None, name: str) -> dict | None:
    return next((m for m in (view or {}).get("members", ()) if m["id"] == name), None)


async def wait_for(check: Callable[[], Awaitable[bool]], limit_s: float, what: str, every_s: float = 0.1) -> float:
    """Monotonic time at which `check()` first held; TimeoutError naming `what` after `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if await check():
            return time.monotonic()
        await asyncio.sleep(every_s)
    raise TimeoutError(f"not within {limit_s:.0f} s: {what}")


async def wait_whole(env: Env, limit_s: float = 60.0) -> float:
    async def whole() -> bool:
        return is_whole(await cluster_view(env.client))
    return await wait_for(whole, limit_s, "every segment owner alive in the dispatcher's view")


async def wait_status(env: Env, name: str, statuses: tuple[str, ...], limit_s: float,
                      idle: bool | None = None) -> float:
    async def seen() -> bool:
        m = member(await cluster_view(env.client), name)
        return m is not None and m["status"] in statuses and (idle is None or bool(m.get("idle")) == idle)
    return await wait_for(seen, limit_s, f"{name} {'/'.join(statuses)}")


# -- the faults ----------------------------------------------------------------------------
async def matcher_kill(env: Env) -> dict:
    """SIGKILL a matcher: gossip declares it dead, its segments are taken over; then it is
    started again (same id) and rejoins by a split."""
    victim = env.cluster.child(env.victim_matcher)
    os.kill(victim.pid, signal.SIGKILL)
    t = time.monotonic()
    await asyncio.to_thread(victim.proc.wait)
    dead = await wait_status(env, victim.name, ("dead",), 30)
    whole = await wait_whole(env)
    victim.start()
    rejoined = await wait_status(env, victim.name, ("alive",), 90, idle=False)
    return {"declared_dead_s": dead - t, "taken_over_s": whole - t, "rejoined_s": rejoined - t}


async def dispatcher_kill(env: Env) -> dict:
    """SIGKILL one of the dispatchers sharing the public ports: clients retry, and the kernel
    hands their new connections to another; the dead one is started again."""
    victim = env.cluster.child(env.victim_dispatcher)
    os.kill(victim.pid, signal.SIGKILL)
    t = time.monotonic()
    await asyncio.to_thread(victim.proc.wait)
    await asyncio.sleep(2.0)  # serving with one dispatcher fewer
    victim.start()
    return {"restarted_after_s": time.monotonic() - t}


async def matcher_stop(env: Env) -> dict:
    """SIGSTOP a matcher for `stop_s`: it answers nothing, yet its sockets stay open. It is
    suspected (and, stopped longer than the detector's patience, declared dead and taken
    over); dispatchers route around it; on SIGCONT it learns the news and rejoins."""
    victim = env.cluster.child(env.victim_matcher)
    os.kill(victim.pid, signal.SIGSTOP)
    t = time.monotonic()
    try:
        notes = {}
        try:
            seen = await wait_status(env, victim.name, ("suspect", "dead"), env.stop_s)
            notes["suspected_s"] = seen - t
        except TimeoutError:
            notes["suspected_s"] = None
        try:  # taken over while stopped: whole again without it
            notes["taken_over_s"] = await wait_whole(env, max(0.1, t + env.stop_s - time.monotonic())) - t
        except TimeoutError:
            pass
        await asyncio.sleep(max(0.0, t + env.stop_s - time.monotonic()))
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    resumed = time.monotonic()
    rejoined = await wait_status(env, victim.name, ("alive",), 90, idle=False)
    notes["rejoined_after_cont_s"] = rejoined - resumed
    return notes


async def store_kill(env: Env) -> dict:
    """SIGKILL the redis-server, start it again after `store_down_s` on its AOF (same port and
    folder). What it acknowledged is in the AOF (written before each reply; fsync every second
    covers a machine crash, not a process kill)."""
    redis = env.cluster.redis
    if redis is None:
        raise RuntimeError("store_kill needs the cluster's own redis-server")
    redis.kill()
    t = time.monotonic()
    await asyncio.sleep(env.store_down_s)
    env.no_writes = (t, time.monotonic())
    await asyncio.to_thread(redis.start, 60.0)
    return {"restarted_after_s": time.monotonic() - t}


async def disk_full(env: Env) -> dict:
    """Fill the store's disk (its folder is a small tmpfs, see `store_tmpfs`) for `disk_full_s`:
    redis-server cannot append to its AOF and refuses writes; publishes are refused (503), none
    is acknowledged unwritten; once space is freed it writes again."""
    folder = env.cluster.redis.data_dir
    filler = folder / "filler"
    written = 0
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
                written += len(chunk)
        except OSError:
            pass
    t = time.monotonic()
    await asyncio.sleep(env.disk_full_s)
    # A write redis-server took before it failed to append stays in its buffer and is written
    # later: the window starts a moment after the disk filled.
    env.no_writes = (t + 0.5, time.monotonic())
    filler.unlink()
    return {"filled_mb": round(written / 2**20, 1), "freed_after_s": time.monotonic() - t}


async def partition(env: Env) -> dict:
    """Cut the matchers in two halves (each in its own network namespace, see netns.py) for
    `partition_s`; the dispatchers and the store still reach every matcher. Then heal."""
    net = env.network
    if net is None:
        raise RuntimeError("partition needs the matchers in namespaces (run.py sets them up)")
    names = sorted(net.hosts)
    half = len(names) // 2
    net.partition(names[:half], names[half:])
    t = time.monotonic()
    try:
        await asyncio.sleep(env.partition_s)
    finally:
        net.heal()
    return {"sides": f"{','.join(names[:half])} | {','.join(names[half:])}", "healed_after_s": time.monotonic() - t}


FAULTS: dict[str, Callable[[Env], Awaitable[dict]]] = {
    "matcher-kill": matcher_kill,
    "dispatcher-kill": dispatcher_kill,
    "matcher-stop": matcher_stop,
    "store-kill": store_kill,
    "disk-full": disk_full,
    "partition": partition,
}


# -- a small disk for the store -----------------------------------------------------------------
def mount_tmpfs(folder: Path, size_mb: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "bluedove-faults", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PermissionError(f"cannot mount a tmpfs on {folder} (needs root or CAP_SYS_ADMIN): "
                              f"{done.stderr.strip()}")


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)
