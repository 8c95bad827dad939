"""The message sample: a fraction of the published messages' points, written to JSON-lines
files for offline jobs (the skew statistics of `bluedove seed`).

The publish path only decides and appends: a countdown drawn from a geometric distribution
says how many messages to pass over before the next sample (one draw per sample, not one
random number per message), and a sample goes into a bounded buffer; a full buffer drops it
and counts it. A daemon thread writes the buffer out:

    DIR/space.json
    DIR/<dispatcher id>/messages-<UTC start %Y%m%dT%H%M%S>-<seq>.jsonl.part   being written
    DIR/<dispatcher id>/messages-<UTC start %Y%m%dT%H%M%S>-<seq>.jsonl        whole

one `{"ts": <unix seconds>, "point": [floats in the space's order]}` per line; in a typed space
the line also holds `"attributes"`, the message's attributes as its stored body holds them (every
attribute the space declares that the message carries, so an offline job sees the attributes
that are not cut too). A file is
renamed to `.jsonl` when it is rotated (older than rotate_s, or larger than rotate_mb) or
closed, so a reader globbing `DIR/*/*.jsonl` sees only whole files; the newest `keep` whole
files are kept, older ones deleted.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import random
import threading
import time
from pathlib import Path
from typing import TextIO

import numpy as np
import numpy.typing as npt
from prometheus_client import Counter

from bluedove.core.space import Space

log = logging.getLogger("bluedove.dispatcher.sampler")

BUFFER_MAX = 100_000  # samples waiting for the writer; beyond, new ones are dropped
WRITE_EVERY_S = 0.2  # how often the writer wakes


class Sampler:
    """One dispatcher's message sample: the countdown, the bounded buffer and the thread writing it."""

    def __init__(self, rate: float, directory: str | Path, dispatcher_id: str, space: Space, rotate_s: float,
                 rotate_mb: float, keep: int, sampled: Counter, dropped: Counter,
                 buffer_max: int = BUFFER_MAX) -> None:
        self.rate = rate
        self.root = Path(directory)
        self.dir = self.root / dispatcher_id
        self.space = space
        self.rotate_s = rotate_s
        self.rotate_bytes = rotate_mb * 1024 * 1024
        self.keep = keep
        self._sampled = sampled
        self._dropped = dropped
        self._buffer_max = buffer_max
        self._buffer: collections.deque[tuple[float, list[float], bytes | None]] = collections.deque()
        self._rng = random.Random()
        self._log1m = math.log1p(-rate) if 0 < rate < 1 else 0.0
        self._skip = self._draw()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file: TextIO | None = None
        self._path: Path | None = None
        self._opened = 0.0
        self._size = 0
        self._seq = 0

    # -- the publish path ------------------------------------------------------------------
    def _draw(self) -> int:
        """Messages to pass over before the next sample: geometric, so each is sampled with `rate`."""
        if self.rate >= 1:
            return 0
        return int(math.log(1.0 - self._rng.random()) / self._log1m)

    def offer(self, ts: float, points: npt.NDArray[np.float64], attributes: list[bytes] | None = None) -> None:
        """Messages of values `points` (one row each) accepted at `ts`: the sampled ones go to the
        buffer, in a typed space with their `attributes` (the JSON texts of decode.py's `Batch`)."""
        n = len(points)
        if self._skip >= n:  # the usual case at a small rate: one comparison per call
            self._skip -= n
            return
        i = self._skip
        buf = self._buffer
        while i < n:
            if len(buf) < self._buffer_max:
                buf.append((ts, points[i].tolist(), None if attributes is None else attributes[i]))
            else:
                self._dropped.inc()
            i += 1 + self._draw()
        self._skip = i - n

    # -- the writer ------------------------------------------------------------------------
    def start(self) -> "Sampler":
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".space.json.{self.dir.name}.tmp"  # each dispatcher its own, then one rename
        tmp.write_text(json.dumps(self.space.to_json()))
        tmp.replace(self.root / "space.json")
        self._seq = self._recover()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Write what is buffered, close the current file (renamed to .jsonl) and end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _recover(self) -> int:
        """A `.part` left by a process that died: cut at its last whole line and renamed, so no
        sample it wrote is lost and no reader sees half a line. Returns the next sequence number."""
        seqs = [-1]
        for part in sorted(self.dir.glob("messages-*.jsonl.part")):
            data = part.read_bytes()
            whole = data[:data.rfind(b"\n") + 1]
            if whole:
                part.write_bytes(whole)
                part.rename(part.with_name(part.name[:-len(".part")]))
            else:
                part.unlink()
        for f in self.dir.glob("messages-*.jsonl"):
            seq = f.name[:-len(".jsonl")].rsplit("-", 1)[-1]
            seqs.append(int(seq) if seq.isdigit() else -1)
        self._prune()
        return max(seqs) + 1

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(WRITE_EVERY_S)
            try:
                self._write_buffered()
                if self._file is not None and (stopping or time.time() - self._opened >= self.rotate_s):
                    self._close()
            except OSError as exc:  # a full disk, a removed folder: the samples are lost, the dispatcher goes on
                log.warning("message sample: could not write %s: %s", self._path, exc)
                self._buffer.clear()
                self._abandon()
            if stopping:
                return

    def _write_buffered(self) -> None:
        buf = self._buffer
        while buf:
            file = self._file if self._file is not None else self._open()
            lines = []
            size = self._size
            while buf and size < self.rotate_bytes:
                ts, point, attrs = buf.popleft()
                # The values are finite floats (validated), whose repr is JSON: ~4x cheaper than json.dumps;
                # the attributes are JSON already.
                more = "" if attrs is None else f',"attributes":{attrs.decode()}'
                line = f'{{"ts":{ts!r},"point":[{",".join(map(repr, point))}]{more}}}\n'
                lines.append(line)
                size += len(line)
            file.write("".join(lines))
            self._size = size
            self._sampled.inc(len(lines))
            if size >= self.rotate_bytes:
                self._close()

    def _open(self) -> TextIO:
        self._opened = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._opened))
        self._path = self.dir / f"messages-{stamp}-{self._seq:06d}.jsonl.part"
        self._seq += 1
        self._file = open(self._path, "w", encoding="utf-8")  # noqa: SIM115 - kept open across writes
        self._size = 0
        return self._file

    def _close(self) -> None:
        file, path = self._file, self._path
        assert file is not None and path is not None  # called only while a file is open
        file.close()
        path.rename(path.with_name(path.name[:-len(".part")]))
        self._file = self._path = None
        self._prune()

    def _abandon(self) -> None:
        try:
            if self._file is not None:
                self._file.close()
        except OSError:
            pass
        self._file = self._path = None

    def _prune(self) -> None:
        """Delete whole files beyond the newest `keep` (names sort by start time, then sequence)."""
        whole = sorted(self.dir.glob("messages-*.jsonl"), key=lambda f: f.name)
        for old in whole[:max(0, len(whole) - self.keep)]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass


def check_sample_settings(rate: float, directory: str, rotate_s: float, rotate_mb: float, keep: int) -> str | None:
    """What is wrong with the sample settings, naming the flag; None when they are usable."""
    if not 0 <= rate <= 1:  # NaN fails too
        return f"--sample-rate (BLUEDOVE_SAMPLE_RATE) {rate}: expected a fraction from 0 to 1"
    if not rotate_s > 0:
        return f"--sample-rotate-s (BLUEDOVE_SAMPLE_ROTATE_S) {rotate_s}: expected seconds above 0"
    if not rotate_mb > 0:
        return f"--sample-rotate-mb (BLUEDOVE_SAMPLE_ROTATE_MB) {rotate_mb}: expected megabytes above 0"
    if keep < 1:
        return f"--sample-keep (BLUEDOVE_SAMPLE_KEEP) {keep}: expected 1 or more files"
    if rate > 0:
        if not directory:
            return "--sample-dir (BLUEDOVE_SAMPLE_DIR) is required when --sample-rate is above 0"
        try:
            Path(directory).mkdir(parents=True, exist_ok=True)
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        except OSError as exc:
            return f"--sample-dir (BLUEDOVE_SAMPLE_DIR) {directory}: {exc.strerror or exc}"
    return None
