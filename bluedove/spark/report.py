"""The seed's report in words: string coordinates read back as text, whole-number cuts on the
dimensions whose coordinates are whole numbers, and the choice of the partition attributes.

Pure, no Spark: `skew_stats` calls it on the aggregates it has collected, and `bluedove seed`
prints a running table's string ranges with it. A string's coordinate is its first 6 bytes of
UTF-8 read as a whole number (bluedove/core/attributes.py), so `decode` gives those 6 bytes back:
the prefix every string at that coordinate starts with.

Choosing the partition attributes (docs/spark.md, "Choosing the partition attributes"): per
attribute, `constrained` is the share of subscriptions with a condition on it, and the
selectivity the mean fraction a condition admits: of the sampled messages where the sample holds
the attribute (the partition attributes), else of the attribute's coordinate range. Its score is
constrained × (1 − selectivity), the mean share of the messages (or of the range) a
subscription rules out on it; the recommended partition is the highest scores, ties to the more
often constrained, then the space's order, leaving out attributes no condition narrows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

WIDTH = 6  # bytes of a string in its coordinate (bluedove/core/attributes.py)
WHOLE = ("string", "boolean")  # types whose coordinates are whole numbers
RULE = ("score = constrained x (1 - selectivity), selectivity the mean fraction of the sampled messages "
        "(else of the attribute's range) a condition admits; the highest scores, ties to the more often "
        "constrained, attributes with a score of 0 left out")


def decode(coordinate: float) -> str:
    """The 6-byte prefix a string coordinate stands for, trailing NULs dropped; bytes that are
    not whole UTF-8 (a character cut by the 6th byte) as escapes."""
    c = min(max(int(math.floor(coordinate)), 0), 256 ** WIDTH - 1)
    text: str = c.to_bytes(WIDTH, "big").rstrip(b"\0").decode("utf-8", errors="backslashreplace")
    return text


def label(coordinate: float, kind: str, high: float) -> str:
    """A boundary as a reader names it: a string's prefix in quotes (the end of the range as
    `end`), a boolean's value, a number as it is."""
    if kind == "string":
        return "end" if coordinate >= high else f'"{decode(coordinate)}"'
    if kind == "boolean":
        return "end" if coordinate >= high else ("true" if coordinate >= 1 else "false")
    return f"{coordinate:.6g}"


def whole_cuts(cuts: Sequence[float], lo: float, hi: float) -> list[float]:
    """Cuts of a dimension of whole-number coordinates rounded up to whole numbers: the same
    coordinates fall on each side (x < c iff x < ceil(c) for a whole x), and a boundary then
    names a string prefix exactly. Unchanged when rounding would leave two cuts equal."""
    up = [float(math.ceil(c)) for c in cuts]
    bounds = [lo, *up, hi]
    return up if all(a < b for a, b in zip(bounds, bounds[1:])) else list(cuts)


def recommend(rows: Sequence[dict[str, Any]], partition: Sequence[str], count: int | None) -> list[str]:
    """The attributes to partition by (the module docstring's rule): at most `count` (default:
    as many as `partition`), from rows with `name`, `constrained` and `score`."""
    n = count if count is not None else len(partition)
    order = {r["name"]: i for i, r in enumerate(rows)}
    ranked = sorted((r for r in rows if r["score"] > 0),
                    key=lambda r: (-r["score"], -r["constrained"], order[r["name"]]))
    return [r["name"] for r in ranked[:n]]


def attribute_rows(attributes: Sequence[tuple[str, str, float, float]], partition: Sequence[str],
                   counts: dict[str, tuple[int, float, float | None]], n_subs: int) -> list[dict[str, Any]]:
    """One row per attribute: its type, whether it is a partition attribute, `constrained`, the
    mean `domain_fraction` and `message_fraction` (None: not in the sample) its conditions
    admit, the `selectivity` used and the `score`. `counts[name]` is (subscriptions naming it,
    their summed domain fractions, their summed message fractions or None)."""
    rows = []
    for name, kind, _, _ in attributes:
        named, domain, messages = counts.get(name, (0, 0.0, None))
        mean_domain = domain / named if named else 1.0
        mean_messages = messages / named if named and messages is not None else None
        constrained = named / n_subs if n_subs else 0.0
        selectivity = mean_messages if mean_messages is not None else mean_domain
        rows.append({"name": name, "type": kind, "partition": name in partition, "constrained": constrained,
                     "domain_fraction": mean_domain, "message_fraction": mean_messages,
                     "selectivity": selectivity, "score": constrained * (1.0 - min(max(selectivity, 0.0), 1.0))})
    return rows


def summary(report: dict[str, Any]) -> list[str]:
    """The attribute report's lines for the seed's human summary."""
    out = [f"  {r['name']}: constrained by {r['constrained']:.0%} of subscriptions, admitting "
           f"{r['selectivity']:.3g} of the {'messages' if r['message_fraction'] is not None else 'range'} "
           f"(score {r['score']:.3g})" for r in report["by_attribute"]]
    return ["seed: attributes, as the subscriptions constrain them:", *out,
            f"recommended partition: {', '.join(report['recommended']) or 'none'} "
            f"(now: {', '.join(report['partition'])})"]
