"""The index thread: one job at a time, small ones on the event loop when nothing else runs."""

from __future__ import annotations

import asyncio
import threading
import time

from bluedove.matcher.index_thread import IndexThread


def test_a_small_job_runs_on_the_event_loop_when_the_index_is_idle() -> None:
    async def main() -> None:
        index = IndexThread()
        try:
            assert await index.run_small(threading.get_ident) == threading.get_ident()
            assert index.inline == 1
            assert await index.run(threading.get_ident) != threading.get_ident()  # `run` always hops
            assert index.inline == 1
        finally:
            index.shutdown()

    asyncio.run(main())


def test_a_small_job_waits_for_a_running_job_on_the_thread_and_never_overlaps_it() -> None:
    """While a job (a bulk insert, a reload) holds the index, a small match queues behind it on
    the thread instead of walking sets being changed."""
    async def main() -> None:
        index = IndexThread()
        log: list[str] = []
        started = threading.Event()

        def long_job() -> None:
            started.set()
            log.append("long begins")
            time.sleep(0.2)
            log.append("long ends")

        def small_job() -> int:
            log.append("small")
            return threading.get_ident()

        try:
            long = asyncio.ensure_future(index.run(long_job))
            await asyncio.get_running_loop().run_in_executor(None, started.wait)
            ran_on = await index.run_small(small_job)
            await long
            assert log == ["long begins", "long ends", "small"]
            assert ran_on != threading.get_ident()
            assert index.inline == 0
        finally:
            index.shutdown()

    asyncio.run(main())


def test_an_exception_frees_the_index() -> None:
    async def main() -> None:
        index = IndexThread()

        def boom() -> None:
            raise ValueError("bad job")

        try:
            for run in (index.run_small, index.run):
                try:
                    await run(boom)
                except ValueError:
                    pass
                else:
                    raise AssertionError("the job's exception is the caller's")
            assert not index.lock.locked()
            assert await index.run_small(lambda: 7) == 7
        finally:
            index.shutdown()

    asyncio.run(main())
