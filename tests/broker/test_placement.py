"""Placement: rendezvous picks and replica assignment, simulated on 100 brokers (no processes).

Every topic of 1 to 1,000 partitions over 1 to 12 equal brokers, at replication factor 1 to 3:
replicas and preferred leaders per broker differ by at most one. The bars for 10,000
partitions on 100 brokers, at replication factor 1 and 3 (the latter on 10 racks): the busiest
broker holds at most 5% more than the mean; a broker joining moves at
most 1/N of the replicas plus 2%; a broker leaving moves its own replicas plus at most 2%;
the answer does not depend on the order of the inputs or on the process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from headrace.broker.cluster import placement
from headrace.broker.cluster.placement import BrokerInfo, assign_replicas, partition_key, rebalance, rendezvous

PARTITIONS = [(f"topic-{i % 97}", i // 97) for i in range(10_000)]
BROKERS = 100
LEAVING = 37  # any broker


def _cluster(count: int, racks: int | None, without: int | None = None) -> dict[int, BrokerInfo]:
    return {
        b: BrokerInfo(1.0, None if racks is None else f"rack-{b % racks}")
        for b in range(count)
        if b != without
    }


def _loads(assignment) -> Counter:
    return Counter(b for replicas in assignment.values() for b in replicas)


def _moved(before, after) -> int:
    """Replicas that are on a broker after that they were not on before."""
    return sum(len(set(after[p]) - set(before[p])) for p in before)


def _digest(assignment) -> str:
    canonical = sorted([t, p, r] for (t, p), r in assignment.items())
    return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()


@functools.cache
def _simulate(rf: int, racks: int | None):
    """The placements before, after broker 100 joins, and after broker ``LEAVING`` leaves."""
    base = assign_replicas(PARTITIONS, _cluster(BROKERS, racks), rf)
    joined = assign_replicas(PARTITIONS, _cluster(BROKERS + 1, racks), rf)
    left = assign_replicas(PARTITIONS, _cluster(BROKERS, racks, without=LEAVING), rf)
    return rf, racks, base, joined, left


@pytest.fixture(params=[(1, None), (3, 10)], ids=["rf1", "rf3-racks"])
def simulation(request):
    return _simulate(*request.param)


def test_busiest_broker_within_five_percent_of_the_mean(simulation):
    rf, _, base, _, _ = simulation
    loads = _loads(base)
    mean = len(PARTITIONS) * rf / BROKERS
    assert len(loads) == BROKERS
    assert max(loads.values()) <= mean * 1.05


def test_preferred_leaders_are_spread(simulation):
    _, _, base, _, _ = simulation
    leaders = Counter(replicas[0] for replicas in base.values())
    assert max(leaders.values()) <= len(PARTITIONS) / BROKERS * 1.1


def test_replicas_are_on_distinct_brokers_and_racks(simulation):
    rf, racks, base, _, _ = simulation
    for replicas in base.values():
        assert len(set(replicas)) == rf
        if racks is not None:
            assert len({b % racks for b in replicas}) == rf


def test_a_joining_broker_moves_at_most_its_share_plus_two_percent(simulation):
    rf, racks, base, joined, _ = simulation
    total = len(PARTITIONS) * rf
    assert _moved(base, joined) <= total * (1 / (BROKERS + 1) + 0.02)
    assert _loads(joined)[BROKERS] > 0.9 * total / (BROKERS + 1)  # the newcomer takes its share
    # the controller's way, from where the replicas are: its share and nothing more
    rebalanced = placement.rebalance(base, _cluster(BROKERS + 1, racks), rf)
    assert _moved(base, rebalanced) == _loads(rebalanced)[BROKERS] <= total / (BROKERS + 1) + 1
    # it leads its share, and few other leaderships change hands on the way (the replicas it
    # takes are mostly followers: it takes leaderships over from brokers leading more)
    led = [p for p in base if rebalanced[p][0] == BROKERS]
    assert len(led) == len(PARTITIONS) // (BROKERS + 1)
    assert sum(rebalanced[p][0] != base[p][0] for p in base) <= 3 * len(led)


def test_a_leaving_broker_moves_its_replicas_plus_at_most_two_percent(simulation):
    rf, _, base, _, left = simulation
    total = len(PARTITIONS) * rf
    own = _loads(base)[LEAVING]
    assert LEAVING not in _loads(left)
    assert _moved(base, left) <= own + total * 0.02


def test_same_answer_in_another_process_from_inputs_in_another_order():
    rf, racks, base, _, _ = _simulate(3, 10)
    script = (
        "import hashlib, json, random, sys\n"
        "from headrace.broker.cluster.placement import BrokerInfo, assign_replicas\n"
        "rf, racks, count = json.loads(sys.argv[1])\n"
        "parts = [(f'topic-{i % 97}', i // 97) for i in range(10_000)]\n"
        "random.Random(7).shuffle(parts)\n"
        "brokers = {b: BrokerInfo(1.0, None if racks is None else f'rack-{b % racks}')\n"
        "           for b in reversed(range(count))}\n"
        "result = assign_replicas(iter(parts), brokers, rf)\n"
        "canonical = sorted([t, p, r] for (t, p), r in result.items())\n"
        "print(hashlib.sha256(json.dumps(canonical).encode()).hexdigest())\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps([rf, racks, BROKERS])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == _digest(base)


def test_a_broker_of_weight_two_gets_about_twice_the_partitions():
    brokers = {b: BrokerInfo(2.0 if b % 2 else 1.0) for b in range(20)}
    parts = [("t", i) for i in range(6_000)]
    loads = _loads(assign_replicas(parts, brokers, 1))
    heavy = sum(loads[b] for b in brokers if b % 2) / 10
    light = sum(loads[b] for b in brokers if not b % 2) / 10
    assert 1.9 <= heavy / light <= 2.1
    for b, info in brokers.items():
        share = len(parts) * info.weight / 30
        assert math.floor(share) <= loads[b] <= math.ceil(share)


def test_same_inputs_in_another_order_give_the_same_answer():
    parts = [(f"t{i % 5}", i) for i in range(500)]
    shuffled = parts[:]
    random.Random(3).shuffle(shuffled)
    brokers = {b: BrokerInfo(1.0 + b % 3, f"r{b % 4}") for b in range(12)}
    reordered = dict(reversed(list(brokers.items())))
    assert assign_replicas(parts, brokers, 3) == assign_replicas(shuffled + parts, reordered, 3)


def test_scores_match_the_module_score_function():
    ids, weights = [3, 11, 42], [1.0, 2.0, 0.5]
    keys = [("orders", 0), ("orders", 1), ("payments", 7)]
    for key, ranking in zip(keys, placement._rankings(keys, ids, weights), strict=True):
        for negative, i in ranking:
            assert -negative == pytest.approx(
                placement.score(partition_key(*key), ids[i], weights[i])
            )
        assert [s for s, _ in ranking] == sorted(s for s, _ in ranking)


def test_weight_zero_brokers_take_nothing():
    brokers = {b: BrokerInfo(0.0 if b == 2 else 1.0) for b in range(5)}
    result = assign_replicas([("t", i) for i in range(200)], brokers, 2)
    assert 2 not in _loads(result)
    assert rendezvous("group", {b: info.weight for b, info in brokers.items()}, k=5) == [
        b for b in rendezvous("group", {0: 1.0, 1: 1.0, 3: 1.0, 4: 1.0}, k=4)
    ]


def test_fewer_racks_than_replicas_spread_as_evenly_as_possible():
    brokers = {b: BrokerInfo(1.0, f"r{b % 2}") for b in range(6)}
    result = assign_replicas([("t", i) for i in range(300)], brokers, 3)
    for replicas in result.values():
        assert len(set(replicas)) == 3
        assert sorted(Counter(b % 2 for b in replicas).values()) == [1, 2]


def test_a_small_rack_still_gets_one_replica_of_each_partition():
    # Rack "a" is one broker of the eleven, yet every partition needs a replica there.
    brokers = {0: BrokerInfo(1.0, "a"), **{b: BrokerInfo(1.0, "b") for b in range(1, 11)}}
    result = assign_replicas([("t", i) for i in range(200)], brokers, 2)
    assert all(0 in replicas and len(set(replicas)) == 2 for replicas in result.values())


def test_bad_replication_factors_and_weights_are_refused():
    brokers = {b: BrokerInfo() for b in range(3)}
    with pytest.raises(ValueError):
        assign_replicas([("t", 0)], brokers, 4)
    with pytest.raises(ValueError):
        assign_replicas([("t", 0)], brokers, 0)
    with pytest.raises(ValueError):
        assign_replicas([("t", 0)], {**brokers, 3: BrokerInfo(-1.0)}, 1)
    assert assign_replicas([], brokers, 3) == {}


def test_rendezvous_picks_the_highest_scores():
    nodes = {1: 1.0, 2: 3.0, 7: 0.5, 9: 0.0}
    for key in ("group-a", "group-b", b"txn-1"):
        expected = sorted(
            (n for n in nodes if nodes[n] > 0), key=lambda n: -placement.score(key, n, nodes[n])
        )
        assert rendezvous(key, nodes, k=3) == expected
        assert rendezvous(key, nodes) == expected[:1]
    assert rendezvous("g", {5: 1.0}) == [5]


def test_rendezvous_single_picks_follow_weights_and_move_little():
    keys = [f"group-{i}" for i in range(3_000)]
    nodes = {b: 1.0 for b in range(10)}
    before = {k: rendezvous(k, nodes)[0] for k in keys}
    after = {k: rendezvous(k, {**nodes, 10: 1.0})[0] for k in keys}
    changed = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == 10 for k in changed)
    assert len(changed) < len(keys) / 11 * 1.3


SIZES = [*range(1, 65), 96, 100, 127, 250, 499, 1000]


@pytest.mark.parametrize("rf", [1, 2, 3])
def test_every_topic_is_even_over_equal_brokers(rf):
    """Over 3 brokers a topic of 3 partitions has one leader on each (plain capacities left one
    broker idle for it); at every size, placed afresh or moved for a broker that joins, the
    busiest broker holds at most one replica and one leadership more than the idlest."""
    uneven = []
    for count in range(rf, 13):
        brokers = {b: BrokerInfo() for b in range(1, count + 1)}
        joined = {**brokers, count + 1: BrokerInfo()}
        for size in SIZES:
            placed = assign_replicas([(f"t{size}", i) for i in range(size)], brokers, rf)
            # and as the controller moves them when a broker joins
            for members, placing in ((brokers, placed), (joined, rebalance(placed, joined, rf))):
                replicas = Counter(b for r in placing.values() for b in r)
                leaders = Counter(r[0] for r in placing.values())
                for held in (replicas, leaders):
                    loads = [held[b] for b in members]
                    if max(loads) - min(loads) > 1:
                        uneven.append((len(members), size, loads))
                assert all(len(set(r)) == rf for r in placing.values())
    assert not uneven, uneven[:5]


def _made_one_at_a_time(count: int, rf: int, topics: int) -> dict[str, list[list[int]]]:
    """Topics of 1 to 1,000 partitions made one after another over ``count`` brokers, as
    CreateTopics places them (beside the ones there are)."""
    brokers = {b: BrokerInfo() for b in range(count)}
    made: dict[str, list[list[int]]] = {}
    for t in range(topics):
        size = random.Random(t).choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 256, 1000])
        name = f"topic-{t:03}"
        placed = assign_replicas(
            [(name, i) for i in range(size)],
            brokers,
            rf,
            placement.extras_held(made.values(), brokers),
        )
        made[name] = [placed[(name, i)] for i in range(size)]
    return made


def _even(replicas: list[list[int]], brokers) -> bool:
    return all(
        max(held[b] for b in brokers) - min(held[b] for b in brokers) <= 1
        for held in (Counter(b for r in replicas for b in r), Counter(r[0] for r in replicas))
    )


@pytest.mark.parametrize("rf", [1, 3])
def test_a_join_moves_one_nth_of_topics_made_one_at_a_time_and_every_topic_stays_even(rf):
    """12 brokers become 13 under 150 topics of 1 to 1,000 partitions: the controller's
    ``rebalance_topics`` moves at most 1/N + 2% of the replicas (placing every topic afresh
    moved 10-11%), every topic stays even, the newcomer holds its share, and a second pass
    moves almost nothing."""
    made = _made_one_at_a_time(12, rf, 150)
    assert all(_even(r, range(12)) for r in made.values())
    assert placement.rebalance_topics(made, {b: BrokerInfo() for b in range(12)}) == made  # as made
    brokers = {b: BrokerInfo() for b in range(13)}
    joined = placement.rebalance_topics(made, brokers)
    total = sum(len(r) * rf for r in made.values())
    moved = sum(len(set(a) - set(b)) for t in made for a, b in zip(joined[t], made[t], strict=True))
    assert moved <= total * (1 / 13 + 0.02)
    assert all(_even(r, brokers) for r in joined.values())
    loads = Counter(b for r in joined.values() for p in r for b in p)
    assert max(loads.values()) - min(loads.values()) <= 20  # all topics: within a few
    again = placement.rebalance_topics(joined, brokers)
    assert (
        sum(len(set(a) - set(b)) for t in joined for a, b in zip(again[t], joined[t], strict=True))
        < total * 0.005
    )


@pytest.mark.parametrize("rf", [1, 3])
def test_a_leave_moves_the_leavers_replicas_and_little_else_and_every_topic_stays_even(rf):
    made = _made_one_at_a_time(12, rf, 150)
    brokers = {b: BrokerInfo() for b in range(12) if b != 5}
    left = placement.rebalance_topics(made, brokers)
    own = sum(1 for r in made.values() for p in r for b in p if b == 5)
    moved = sum(len(set(a) - set(b)) for t in made for a, b in zip(left[t], made[t], strict=True))
    assert own <= moved <= own + sum(len(r) * rf for r in made.values()) * 0.0025
    assert all(_even(r, brokers) for r in left.values())


def test_rebalancing_an_even_placement_changes_nothing():
    for count in (1, 3, 5, 12):
        brokers = {b: BrokerInfo() for b in range(count)}
        for rf in range(1, min(3, count) + 1):
            for size in (1, 2, 3, 7, 12, 30, 100):
                placed = assign_replicas([(f"t{size}", i) for i in range(size)], brokers, rf)
                assert placement.rebalance(placed, brokers, rf) == placed


def test_a_broker_replaced_in_its_rack_hands_its_replicas_to_its_replacement():
    """Broker 3 drained (weight 0) as broker 15 joins its rack: the racks keep their shape, so
    15 takes 3's replicas and nothing else moves; no partition has two replicas in a rack."""
    racked = {b: BrokerInfo(1.0, f"rack-{b % 4}") for b in range(12)}
    before = assign_replicas([("racked", i) for i in range(200)], racked, 3)
    racked[3] = BrokerInfo(0.0, "rack-3")
    racked[15] = BrokerInfo(1.0, "rack-3")
    after = placement.rebalance(before, racked, 3)
    assert all(len({b % 4 for b in r}) == 3 for r in after.values())
    loads = Counter(b for r in after.values() for b in r)
    assert 3 not in loads and max(loads.values()) - min(loads.values()) <= 1
    assert _moved(before, after) == loads[15] == _loads(before)[3]
