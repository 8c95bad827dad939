"""Named spaces' table epochs on the gossip: a change spreads within a round, not only by the
store (pure: time is an argument).

A named space's table changes in the store by compare-and-set, and its owners adopt it at once
by `Prepare`; a dispatcher learned of it from a matcher's refusal or its periodic store read,
an owner cut off at the change from its periodic read. Each member now keeps the epochs it has
heard of, and pushes (and answers a push with) those that rose in the last `NEWS_S` seconds,
at most `NEWS_MOST` of them, the newest: a member that holds an older table of the space reads
it again. An entry no longer news is not pushed, and hearing it again does not make it news
(only a higher epoch does), so the pushes carry nothing in a steady cluster; a burst of more
changes than NEWS_MOST (a death that moves a thousand spaces) spreads the newest, the rest by
the store. A space deleted and made again under its name starts at epoch 1 again: its changes
spread by the store until its epoch passes the old one's (a process that starts anew knows none).
"""

from __future__ import annotations

from collections.abc import Iterable

NEWS_S = 30.0
NEWS_MOST = 128


class SpaceEpochs:
    """The epochs one member has heard of, those that are news, and those its owner has not
    taken yet."""

    def __init__(self) -> None:
        self.known: dict[str, int] = {}
        self._news: dict[str, float] = {}  # name -> when its epoch rose here, oldest first
        self._rises: dict[str, int] = {}  # not taken by the owner yet
        self.rose = 0  # how many rises this member has heard of: news to push harder

    def offer(self, name: str, epoch: int, now: float) -> bool:
        """Note `name`'s table at `epoch`; True (and news) if that is newer than known."""
        if epoch <= self.known.get(name, 0):
            return False
        self.known[name] = epoch
        self._news.pop(name, None)
        self._news[name] = now
        self._rises[name] = epoch
        self.rose += 1
        return True

    def merge(self, entries: Iterable[tuple[str, int]], now: float) -> None:
        for name, epoch in entries:
            self.offer(name, epoch, now)

    def news(self, now: float) -> tuple[tuple[str, int], ...]:
        """What a push carries: the epochs that rose in the last NEWS_S s, the newest NEWS_MOST."""
        while self._news:
            name, at = next(iter(self._news.items()))
            if now - at <= NEWS_S and len(self._news) <= NEWS_MOST:
                break
            del self._news[name]
        return tuple((n, self.known[n]) for n in self._news)

    def take_rises(self) -> dict[str, int]:
        """The spaces whose epoch rose since the last call, each at its newest."""
        out, self._rises = self._rises, {}
        return out
