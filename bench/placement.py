"""Placement's evenness and movement, computed (no brokers run): what
``broker.cluster.placement.assign_replicas`` gives.

    python -m bench.placement [--brokers 12] [--topics 300]

Prints, for topics of 1 to 1,000 partitions made one at a time over ``--brokers`` equal
brokers at RF 1 and 3: how many topics are uneven (replicas or preferred leaders per broker
differing by more than one: none is the bar), and the share of replicas that move when one
broker joins, beside 1/N: as the controller moves them (``rebalance_topics``, from where they
are), and as placing every topic afresh would. The topics' sizes are drawn (seeded) from
1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 256 and 1,000 partitions. ``--plot PATH``
draws the share moved by topic size (matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from headrace.broker.cluster.placement import (
    BrokerInfo,
    assign_replicas,
    extras_held,
    rebalance_topics,
)

SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 256, 1000]


def _uneven(replicas: list[list[int]], brokers) -> bool:
    held = Counter(b for r in replicas for b in r)
    led = Counter(r[0] for r in replicas)
    return any(max(c[b] for b in brokers) - min(c[b] for b in brokers) > 1 for c in (held, led))


def _moved(before: dict, after: dict) -> int:
    return sum(
        len(set(a) - set(b)) for t in before for a, b in zip(after[t], before[t], strict=True)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", type=int, default=12)
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--plot", type=Path, help="draw the share moved by topic size here (PNG)")
    args = ap.parse_args()
    n = args.brokers
    before = {b: BrokerInfo() for b in range(n)}
    after = {b: BrokerInfo() for b in range(n + 1)}
    by_size: dict[int, dict[str, list[float]]] = {}
    for rf in (1, 3):
        if rf > n:
            continue
        made: dict[str, list[list[int]]] = {}
        afresh: dict[str, list[list[int]]] = {}
        for t in range(args.topics):
            size = random.Random(t).choice(SIZES)
            name = f"topic-{t:04}"
            parts = [(name, i) for i in range(size)]
            placed = assign_replicas(parts, before, rf, extras_held(made.values(), before))
            made[name] = [placed[p] for p in parts]
            placed = assign_replicas(parts, after, rf, extras_held(afresh.values(), after))
            afresh[name] = [placed[p] for p in parts]
        joined = rebalance_topics(made, after)
        total = sum(len(r) * rf for r in made.values())
        uneven = sum(_uneven(r, before) for r in made.values())
        uneven += sum(_uneven(r, after) for r in joined.values())
        held = Counter(b for r in joined.values() for p in r for b in p)
        print(
            f"RF {rf}, {n} -> {n + 1} brokers, {args.topics} topics: uneven {uneven}, "
            f"moved {100 * _moved(made, joined) / total:.1f}% of replicas "
            f"(1/N {100 / (n + 1):.1f}%; placed afresh {100 * _moved(made, afresh) / total:.1f}%), "
            f"replicas per broker {min(held.values())}-{max(held.values())}"
        )
        for way, placing in (("rebalanced", joined), ("afresh", afresh)):
            shares = by_size.setdefault(rf, {}).setdefault(way, [])
            for size in SIZES:
                names = [t for t in made if len(made[t]) == size]
                moved = _moved({t: made[t] for t in names}, placing)
                shares.append(100 * moved / max(1, len(names) * size * rf))
    if args.plot:
        _plot(by_size, n, args.plot)


def _plot(by_size: dict[int, dict[str, list[float]]], n: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_size), figsize=(6 * len(by_size), 4), sharey=True)
    for ax, (rf, ways) in zip(axes if len(by_size) > 1 else [axes], by_size.items()):
        x = range(len(SIZES))
        ax.bar([i - 0.2 for i in x], ways["afresh"], 0.4, color="#bbbbbb", label="placed afresh")
        ax.bar([i + 0.2 for i in x], ways["rebalanced"], 0.4, color="#1f77b4", label="rebalanced")
        ax.axhline(100 / (n + 1), color="k", lw=0.8, ls="--", label="1/N")
        ax.set_xticks(list(x), [str(s) for s in SIZES], fontsize=7)
        ax.set_xlabel("partitions in the topic")
        ax.set_title(f"RF {rf}: {n} -> {n + 1} brokers")
        ax.legend(fontsize=8)
    axes_list = axes if len(by_size) > 1 else [axes]
    axes_list[0].set_ylabel("% of the topic's replicas moved")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
