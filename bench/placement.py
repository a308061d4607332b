"""Placement's evenness and movement, computed (no brokers run): what
``broker.cluster.placement.assign_replicas`` gives.

    python -m bench.placement [--brokers 12] [--topics 300]

Prints, for topics of 1 to 1,000 partitions placed one at a time (as topics are made) over
``--brokers`` equal brokers at RF 1 and 3: how many topics are uneven (replicas or preferred
leaders per broker differing by more than one: none is the bar), and the share of replicas
that move when one broker joins, beside 1/N. The topics' sizes are drawn (seeded) from
1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 256 and 1,000 partitions.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

from headrace.broker.cluster.placement import BrokerInfo, assign_replicas

SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 256, 1000]


def _uneven(placed: dict, brokers: dict) -> bool:
    replicas = Counter(b for r in placed.values() for b in r)
    leaders = Counter(r[0] for r in placed.values())
    return any(
        max(held[b] for b in brokers) - min(held[b] for b in brokers) > 1
        for held in (replicas, leaders)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", type=int, default=12)
    ap.add_argument("--topics", type=int, default=300)
    args = ap.parse_args()
    n = args.brokers
    before = {b: BrokerInfo() for b in range(n)}
    after = {b: BrokerInfo() for b in range(n + 1)}
    for rf in (1, 3):
        if rf > n:
            continue
        total = moved = uneven = 0
        for t in range(args.topics):
            size = random.Random(t).choice(SIZES)
            parts = [(f"topic-{t}", i) for i in range(size)]
            a, b = assign_replicas(parts, before, rf), assign_replicas(parts, after, rf)
            uneven += _uneven(a, before) + _uneven(b, after)
            total += size * rf
            moved += sum(len(set(b[p]) - set(a[p])) for p in a)
        print(
            f"RF {rf}, {n} -> {n + 1} brokers, {args.topics} topics: uneven {uneven}, "
            f"moved {100 * moved / total:.1f}% of replicas (1/N {100 / (n + 1):.1f}%)"
        )


if __name__ == "__main__":
    main()
