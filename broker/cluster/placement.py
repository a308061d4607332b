"""Where things live among brokers: weighted rendezvous (highest random weight) hashing.

How this works
--------------
Every (key, broker) pair gets a score ``-weight / ln(h)``, where ``h`` is uniform in (0, 1)
and comes from a stable 64-bit hash of the key and of the broker id (blake2b, then a 64-bit
mix; never Python's salted ``hash()``). A broker of weight ``w`` wins a key with probability
``w / sum(weights)``, and a broker joining or leaving changes only the keys it wins or held.

``rendezvous(key, nodes, k)`` is the plain form: the ``k`` highest scores, used for single
picks such as a group's or a transactional id's coordinator.

``assign_replicas(partitions, brokers, replication_factor)`` places every partition's
replicas. Plain rendezvous is not balanced enough for that: with 100 partitions per broker the
busiest broker holds about 25% more than the mean, and a topic of 3 partitions on 3 brokers
often leaves one idle. So each broker gets a capacity: its weighted share of the replicas
rounded down, and one more for the brokers with the largest remainders until the capacities
add up to the replicas (equal remainders, as with equal weights: first the brokers that the
most partitions rank among their best, so the fewest are pushed along, then a rendezvous order
of the topic). The placement is the greedy one over all (partition, broker) pairs in descending
score: a pair is taken when the partition still needs a replica, the broker has room and the
broker's rack is not yet used by the partition. Brokers and partitions both rank each other by
the same scores, so this is the unique stable assignment between them; it depends only on the
scores and not on any processing order (it is computed with one heap, lazily walking each
partition's ranking). With capacities that leave no room to spare, a partition can end short
when the brokers it may still take are full; it then takes a full broker's place and pushes
one of that broker's partitions on to another broker with room (an augmenting path, ``_fill``).
Only when no path exists (racks of very unequal weight) does a partition go over a capacity:
its best brokers with a free rack, then its best brokers regardless of rack.

Racks: no two replicas of a partition share a rack while there are at least as many racks as
replicas; with fewer racks, no rack holds more than ``ceil(replication_factor / racks)``.
A broker without a rack counts as a rack of its own.

The first replica is the preferred leader. Leaders are balanced the same way among each
partition's replicas, except that which brokers may lead one more than their share rounded
down depends on where the replicas went: each may lead its share rounded up, and then a broker
leading fewer than its share rounded down takes a leadership over from one that leads more,
along a chain of its replicas' leaders if need be (``_even_out``). The other replicas follow by
score.

Moving from where partitions are (``rebalance``): a partition keeps the brokers it has that
are still members, as many as its capacity allows; a broker over its capacity lets go of the
replicas it scores lowest, of partitions a broker with room can take (racks allowing); the
places left are filled as above (greedy, then augmenting paths), and the leaders that stay
lead on, the rest balanced as above (and brokers over their share rounded up hand
leaderships over). Which brokers take the one more of an uneven split: those holding the
fewest such over all topics (``held``, ``extras_held``), a broker that holds it now before
one that holds up to two fewer. ``assign_replicas`` is ``rebalance`` from nothing;
``rebalance_topics`` rebalances every topic, as the controller does, each against the others
as placed so far.

Guarantees: equal brokers without racks hold replicas and preferred leaders that differ by
at most one, for every topic (tests/broker/test_placement.py checks 1-1,000 partitions over
1-12 brokers at RF 1-3), placed afresh or rebalanced. Placed afresh, with 100 equal brokers
and 10,000 partitions, a broker joining moves 1.8% of the replicas at RF 1 and 1.9% at RF 3
on 10 racks (1/N is 1.0%: the rest is partitions pushed along when every capacity drops by
1%); rebalanced, it moves its share and nothing else (1.0%), and at RF 3 some 2.5 times as
many leaderships change hands as it takes over (it mostly takes followers, then leaderships
from brokers leading more, along chains). Over 300 topics of 1 to 1,000
partitions made one after another, 12 brokers becoming 13 move 7.7% of the replicas at RF 1
and 3 (1/N is 7.7%; placing each topic afresh moved 10.7-11.6%), and a broker leaving moves its
own replicas and almost nothing else (``python -m bench.placement``). The answer is a pure
function of the partitions (and where they are), the brokers' ids, weights and racks, and the
replication factor (ties in score go to the lower broker id): the order of the inputs and the
process do not matter. Placing 10,000 partitions on 100 brokers takes under a second.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import operator
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_MASK = (1 << 64) - 1
_TWO_52 = float(1 << 52)


@dataclass(frozen=True)
class BrokerInfo:
    """What placement needs to know about a broker: its weight (0 takes nothing) and rack."""

    weight: float = 1.0
    rack: str | None = None


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _unit(key_hash: int, node_hash: int) -> float:
    """The 64-bit mix of two hashes, mapped to the open interval (0, 1)."""
    x = key_hash ^ node_hash
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK
    x ^= x >> 33
    return 1.0 - ((x >> 12) | 1) / _TWO_52


def _key_hash(key: str | bytes) -> int:
    return _hash64(key.encode() if isinstance(key, str) else bytes(key))


def _node_hash(node: object) -> int:
    return _hash64(str(node).encode())


def score(key: str | bytes, node: object, weight: float = 1.0) -> float:
    """The rendezvous score of ``node`` (identified by ``str(node)``) for ``key``."""
    return -weight / math.log(_unit(_key_hash(key), _node_hash(node)))


def rendezvous(key: str | bytes, nodes: Mapping[object, float], k: int = 1) -> list:
    """The ``k`` nodes with the highest scores for ``key``, best first (ties by ``str(node)``)."""
    key_hash = _key_hash(key)
    ranked = sorted(
        (
            (-w / math.log(_unit(key_hash, _node_hash(n))), str(n), n)
            for n, w in nodes.items()
            if w > 0
        ),
        key=lambda t: (-t[0], t[1]),
    )
    return [n for _, _, n in ranked[:k]]


def partition_key(topic: str, partition: int) -> bytes:
    """The bytes a partition is hashed by."""
    return f"{topic}\x00{partition}".encode()


def assign_replicas(
    partitions: Iterable[tuple[str, int]],
    brokers: Mapping[int, BrokerInfo],
    replication_factor: int,
    held: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], list[int]]:
    """Each (topic, partition)'s replica brokers, the preferred leader first: ``rebalance``
    from nothing."""
    return rebalance(dict.fromkeys(partitions, ()), brokers, replication_factor, held)


def rebalance(
    current: Mapping[tuple[str, int], Sequence[int]],
    brokers: Mapping[int, BrokerInfo],
    replication_factor: int,
    held: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], list[int]]:
    """Each partition's replica brokers, the preferred leader first, changed from ``current``
    (a partition's brokers now, leader first; empty for a new partition) only as much as
    evenness asks. ``held``: in how many other topics each broker holds the one more of an
    uneven split (``extras_held``); this topic's go to those holding the fewest.

    Brokers of weight 0 take nothing. Raises ValueError when the replication factor is below 1
    or above the number of brokers that can take replicas.
    """
    rf = replication_factor
    if any(info.weight < 0 or not math.isfinite(info.weight) for info in brokers.values()):
        raise ValueError("broker weights must be finite and not negative")
    ids = sorted(b for b, info in brokers.items() if info.weight > 0)
    if rf < 1 or rf > len(ids):
        raise ValueError(f"replication factor {rf} with {len(ids)} available brokers")
    keys = sorted(current)
    if not keys:
        return {}
    weights = [float(brokers[b].weight) for b in ids]
    racks = _rack_indexes([brokers[b].rack for b in ids], ids)
    rack_limit = -(-rf // (max(racks) + 1))
    ranks = _rankings(keys, ids, weights)

    def rack_fits(broker: int, picked: list[int]) -> bool:
        return sum(1 for b in picked if racks[b] == racks[broker]) < rack_limit

    index = {b: i for i, b in enumerate(ids)}
    chosen: list[list[int]] = [[] for _ in keys]
    for p, key in enumerate(keys):  # what stays: the brokers still members, racks allowing
        for b in current[key]:
            i = index.get(b, -1)
            if i >= 0 and i not in chosen[p] and len(chosen[p]) < rf and rack_fits(i, chosen[p]):
                chosen[p].append(i)
    kept = [list(picked) for picked in chosen]
    load = [0] * len(ids)
    for picked in chosen:
        for b in picked:
            load[b] += 1
    order = _extras_order(
        keys, ranks, rf, ids, weights, load, [(held or {}).get(b, 0) for b in ids]
    )
    capacity = _capacities(len(keys) * rf, weights, order)
    _let_go(ranks, chosen, capacity, load, rack_fits)
    _greedy(ranks, chosen, capacity, load, rack_fits, rf)
    _fill(ranks, chosen, capacity, load, rack_fits, rf, kept)
    candidates = [_scored(ranking, picked) for ranking, picked in zip(ranks, chosen, strict=True)]
    leaders = _leaders(candidates, kept, [len(keys) * w / sum(weights) for w in weights])
    placement = {}
    for p, key in enumerate(keys):
        # the leader, then the replicas that stay in their order, then the new ones by score
        stay = [i for i in kept[p] if i in chosen[p]]
        rest = stay + [i for _, i in candidates[p] if i not in stay]
        placement[key] = [ids[i] for i in [leaders[p], *(i for i in rest if i != leaders[p])]]
    return placement


def rebalance_topics(
    topics: Mapping[str, Sequence[Sequence[int]]], brokers: Mapping[int, BrokerInfo]
) -> dict[str, list[list[int]]]:
    """``rebalance`` each topic (its partitions' brokers, leader first) over ``brokers`` at its
    replication factor (no more than the brokers), in name order, each one more of an uneven
    split going to the brokers that hold the fewest over all the topics as placed so far."""
    held = extras_held(topics.values(), brokers)
    placed: dict[str, list[list[int]]] = {}
    for name in sorted(topics):
        replicas = topics[name]
        if not replicas:
            placed[name] = []
            continue
        for b, n in extras_held([replicas], brokers).items():
            held[b] -= n
        rf = min(len(replicas[0]), sum(1 for info in brokers.values() if info.weight > 0))
        new = rebalance({(name, i): r for i, r in enumerate(replicas)}, brokers, max(rf, 1), held)
        placed[name] = [new[(name, i)] for i in range(len(replicas))]
        for b, n in extras_held([placed[name]], brokers).items():
            held[b] = held.get(b, 0) + n
    return placed


def extras_held(
    topics: Iterable[Sequence[Sequence[int]]], brokers: Mapping[int, BrokerInfo]
) -> dict[int, int]:
    """How many of ``topics`` (each its partitions' replica brokers) each broker holds more
    replicas of than its share rounded down: the ``held`` that ``rebalance`` evens out."""
    weights = {b: info.weight for b, info in brokers.items() if info.weight > 0}
    whole = sum(weights.values())
    held: dict[int, int] = {}
    for replicas in topics:
        load: dict[int, int] = {}
        for picked in replicas:
            for b in picked:
                load[b] = load.get(b, 0) + 1
        total = sum(load.values())
        for b, n in load.items():
            if b in weights and n > math.floor(total * weights[b] / whole):
                held[b] = held.get(b, 0) + 1
    return held


def _extras_order(keys, ranks, rf, ids, weights, load, held) -> list[int]:
    """Which brokers take the one more when the replicas do not divide evenly: those holding
    the fewest of other topics (``held``), a broker that does not hold this topic's now
    counting two more (so it takes it over only from one holding three more: deleting topics
    moves a replica now and then, not one per topic); then those that the most partitions
    rank among their best (so fewest are pushed along); then a rendezvous order of the topic."""
    whole, total = sum(weights), len(keys) * rf
    without = [load[b] <= math.floor(total * w / whole) for b, w in enumerate(weights)]
    wanted_by = [0] * len(weights)
    for ranking in ranks:
        for _, b in ranking[:rf]:
            wanted_by[b] += 1
    topic_order = [b for _, b in _rankings([(keys[0][0], -1)], ids, weights)[0]]
    return sorted(
        topic_order,
        key=lambda b: (
            (held[b] + 2 * without[b]) / weights[b],
            without[b],
            -wanted_by[b] / weights[b],
        ),
    )


def _let_go(
    ranks: list[list[tuple[float, int]]],
    chosen: list[list[int]],
    capacity: list[int],
    load: list[int],
    fits,
) -> None:
    """A broker over its capacity lets go of the replicas it scores lowest, of partitions that
    a broker with room can take (``fits``: the racks), one replica a partition where it can
    (so that one taker can fill each place)."""
    room = [b for b in range(len(load)) if load[b] < capacity[b]]

    def no_taker(p: int, broker: int) -> bool:
        rest = [b for b in chosen[p] if b != broker]
        return not any(r not in rest and fits(r, rest) for r in room)

    emptied: set[int] = set()
    for broker in range(len(load)):
        if load[broker] > capacity[broker]:
            holding = [p for p, picked in enumerate(chosen) if broker in picked]
            holding.sort(
                key=lambda p: (p in emptied, no_taker(p, broker), _score(ranks[p], broker))
            )
            for p in holding[: load[broker] - capacity[broker]]:
                chosen[p].remove(broker)
                emptied.add(p)
            load[broker] = capacity[broker]


def _leaders(
    candidates: list[list[tuple[float, int]]], kept: list[list[int]], shares: list[float]
) -> list[int]:
    """Each partition's preferred leader among its replicas (``candidates``, best first):
    the one it had where that stays (``kept``: its brokers before, leader first), the others
    balanced as the replicas are. Which brokers could lead one more depends on where the
    replicas went, so each may lead its share rounded up, and then the ones below it rounded
    down take leaderships over (and those over it rounded up hand them over)."""
    capacity, load = [math.ceil(s) for s in shares], [0] * len(shares)
    leaders: list[list[int]] = [[] for _ in candidates]
    for p, was in enumerate(kept):
        if was and any(b == was[0] for _, b in candidates[p]):
            leaders[p].append(was[0])
            load[was[0]] += 1
    anyone = lambda broker, picked: True  # noqa: E731
    _greedy(candidates, leaders, capacity, load, anyone, 1)
    _fill(candidates, leaders, capacity, load, anyone, 1, [was[:1] for was in kept])
    _even_out(candidates, leaders, [math.floor(s) for s in shares], capacity, load)
    return [leader for (leader,) in leaders]


def _score(ranking: list[tuple[float, int]], broker: int) -> float:
    """``broker``'s score in a partition's ranking."""
    return -next(s for s, b in ranking if b == broker)


def _rack_indexes(racks: list[str | None], ids: list[int]) -> list[int]:
    """Each broker's rack as a small int; a broker without a rack is a rack of its own."""
    names: dict[object, int] = {}
    return [
        names.setdefault(("rack", r) if r is not None else ("broker", b), len(names))
        for r, b in zip(racks, ids, strict=True)
    ]


def _capacities(total: int, weights: list[float], order: list[int]) -> list[int]:
    """``total`` split by weight into whole numbers that add up to it: each broker gets the
    floor of its share, and the brokers with the largest remainders one more (equal remainders,
    as with equal weights: the first in ``order``). So equal brokers differ by at most one."""
    whole = sum(weights)
    shares = [total * w / whole for w in weights]
    capacity = [math.floor(s) for s in shares]
    rest = total - sum(capacity)
    rank = {b: i for i, b in enumerate(order)}
    by_remainder = sorted(range(len(weights)), key=lambda b: (capacity[b] - shares[b], rank[b]))
    for b in by_remainder[:rest]:
        capacity[b] += 1
    return capacity


def _rankings(
    keys: list[tuple[str, int]], ids: list[int], weights: list[float]
) -> list[list[tuple[float, int]]]:
    """Each partition's brokers as (-score, broker index), best first.

    This is a million ``_unit`` calls for 10,000 partitions on 100 brokers, so it runs on all
    brokers at once. One big int holds every broker's hash in its own 128-bit lane (a 64-bit
    value times a 64-bit constant fits in 128 bits, so no lane carries into the next), and
    each step of the mix is one big-int operation masked back to 64 bits per lane. The top 52
    bits of each lane (lowest bit set) become the mantissa of a double ``d`` in (1, 2), read
    straight from the bytes, and ``h = 2 - d``: exactly ``_unit``. The rest are C-level maps.
    """
    lanes = len(ids)
    ones = sum(1 << (128 * i) for i in range(lanes))
    low = _MASK * ones
    exponent = (0x3FF << 52 | 1) * ones  # doubles in (1, 2), mantissa lowest bit set
    packed = sum(_node_hash(b) << (128 * i) for i, b in enumerate(ids))
    unpack = struct.Struct("<" + "d8x" * lanes).unpack
    twos, indexes = [2.0] * lanes, range(lanes)
    log, sub, div = math.log, operator.sub, operator.truediv
    ranks = []
    for topic, partition in keys:
        x = packed ^ (_hash64(partition_key(topic, partition)) * ones)
        x ^= x >> 33 & low
        x = x * 0xFF51AFD7ED558CCD & low
        x ^= x >> 33 & low
        x = x * 0xC4CEB9FE1A85EC53 & low
        x ^= x >> 33 & low
        d = unpack((x >> 12 | exponent).to_bytes(16 * lanes, "little"))
        ranks.append(sorted(zip(map(div, weights, map(log, map(sub, twos, d))), indexes)))
    return ranks


def _greedy(
    ranks: list[list[tuple[float, int]]],
    chosen: list[list[int]],
    capacity: list[int],
    load: list[int],
    fits,
    wanted: int,
) -> None:
    """Take (partition, broker) pairs in descending score while the partition wants more than it
    has in ``chosen`` (``wanted``), the broker has room and ``fits(broker, picked)`` (the racks).

    One heap holds each partition's next candidate; a rejected broker stays rejected (loads and
    racks only fill up), so this equals walking all pairs in sorted order.
    """
    heap = [(ranking[0][0], p, 0) for p, ranking in enumerate(ranks) if len(chosen[p]) < wanted]
    heapq.heapify(heap)
    while heap:
        _, p, at = heapq.heappop(heap)
        broker = ranks[p][at][1]
        if load[broker] < capacity[broker] and broker not in chosen[p] and fits(broker, chosen[p]):
            load[broker] += 1
            chosen[p].append(broker)
            if len(chosen[p]) == wanted:
                continue
        if at + 1 < len(ranks[p]):
            heapq.heappush(heap, (ranks[p][at + 1][0], p, at + 1))


def _fill(
    ranks: list[list[tuple[float, int]]],
    chosen: list[list[int]],
    capacity: list[int],
    load: list[int],
    fits,
    wanted: int,
    had: list[list[int]],
) -> None:
    """Give the partitions the greedy left short what they want, moving others along.

    A short partition takes a broker with room where it can; where every broker it may take is
    full, it takes a full one's place and that broker's partition moves on to another broker
    (an augmenting path, searched depth first, each broker once per search; a partition that
    was placed there just now before one that ``had`` it), so the loads stay within the
    capacities. Only when no such path exists does a partition go over a capacity: its best
    brokers that fit, then any.
    """
    holders: list[list[int]] = [[] for _ in capacity]
    for p, picked in enumerate(chosen):
        for broker in picked:
            holders[broker].append(p)

    def take(p: int, seen: set[int], busy: set[int]) -> bool:
        """``p`` takes one more broker; ``busy``: the partitions on the path, not to be moved
        again (what was checked of their brokers would no longer hold)."""
        busy.add(p)
        for _, broker in ranks[p]:
            if broker in seen or broker in chosen[p] or not fits(broker, chosen[p]):
                continue
            seen.add(broker)
            if load[broker] < capacity[broker]:
                load[broker] += 1
            elif not any(
                take(q, seen, busy) and leave(q, broker)
                for q in sorted(holders[broker], key=lambda q: broker in had[q])
                if q not in busy
            ):
                continue
            chosen[p].append(broker)
            holders[broker].append(p)
            return True
        return False

    def leave(q: int, broker: int) -> bool:
        chosen[q].remove(broker)
        holders[broker].remove(q)
        return True

    for p, picked in enumerate(chosen):
        while len(picked) < wanted and take(p, set(), set()):
            pass
        for check in (fits, lambda broker, picked: True):
            for _, broker in ranks[p]:
                if len(picked) < wanted and broker not in picked and check(broker, picked):
                    picked.append(broker)
                    load[broker] += 1


def _even_out(
    candidates: list[list[tuple[float, int]]],
    leaders: list[list[int]],
    least: list[int],
    most: list[int],
    load: list[int],
) -> None:
    """Brokers leading fewer than ``least`` take leaderships over, then brokers leading more
    than ``most`` hand them over: a broker takes one of its replicas' leadership from a broker
    that leads more than its bound, or from one that takes another over in turn (a chain,
    searched depth first, each broker once per search)."""
    led_by: list[list[int]] = [[] for _ in load]
    replica_of: list[list[int]] = [[] for _ in load]
    for p, (leader,) in enumerate(leaders):
        led_by[leader].append(p)
        for _, broker in candidates[p]:
            replica_of[broker].append(p)

    def pull(broker: int, seen: set[int], bound: list[int]) -> bool:
        for q in replica_of[broker]:
            other = leaders[q][0]
            if other in seen:
                continue
            seen.add(other)
            if load[other] > bound[other] or pull(other, seen, bound):
                led_by[other].remove(q)
                load[other] -= 1
                leaders[q] = [broker]
                led_by[broker].append(q)
                load[broker] += 1
                return True
        return False

    for broker in range(len(load)):
        while load[broker] < least[broker] and pull(broker, {broker}, least):
            pass
    for broker in range(len(load)):
        while (
            load[broker] < most[broker]
            and any(n > m for n, m in zip(load, most, strict=True))
            and pull(broker, {broker}, most)
        ):
            pass


def _scored(ranking: list[tuple[float, int]], picked: list[int]) -> list[tuple[float, int]]:
    """The entries of ``ranking`` for the brokers in ``picked``, best first."""
    found = []
    for entry in ranking:
        if entry[1] in picked:
            found.append(entry)
            if len(found) == len(picked):
                break
    return found


__all__ = [
    "BrokerInfo",
    "assign_replicas",
    "extras_held",
    "partition_key",
    "rebalance",
    "rebalance_topics",
    "rendezvous",
    "score",
]
