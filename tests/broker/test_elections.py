"""Leader election and the leader-epoch cache as pure functions (no cluster): the cases the
controller and the followers meet."""

from __future__ import annotations

from headrace.broker.cluster.elections import elect, preferred
from headrace.broker.cluster.partition_state import PartitionState
from headrace.storage import LeaderEpochCache


def state(leader, epoch, isr):
    return PartitionState(leader, epoch, tuple(isr), 0, 5)


def test_a_live_leader_stays_and_dead_followers_leave_the_isr():
    assert elect(state(1, 3, [1, 2, 3]), [1, 2, 3], {1, 2, 3}) is None
    new = elect(state(1, 3, [1, 2, 3]), [1, 2, 3], {1, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 3, (1, 3))


def test_a_dead_leader_is_replaced_from_the_isr_in_replica_order_with_a_new_epoch():
    new = elect(state(1, 3, [1, 3, 2]), [1, 2, 3], {2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (3, 2))


def test_never_outside_the_isr_unless_unclean():
    new = elect(state(1, 3, [1]), [1, 2, 3], {2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (-1, 4, (1,))  # offline, ISR kept
    assert elect(new, [1, 2, 3], {2, 3}) is None  # nothing more to do until 1 is back
    back = elect(new, [1, 2, 3], {1, 2, 3}, restarted={1})
    assert (back.leader, back.leader_epoch, back.isr) == (1, 5, (1,))
    unclean = elect(state(1, 3, [1]), [1, 2, 3], {2, 3}, unclean=True)
    assert (unclean.leader, unclean.leader_epoch, unclean.isr) == (2, 4, (2,))


def test_a_restarted_leader_gives_way_to_another_isr_member():
    new = elect(state(1, 3, [1, 2, 3]), [1, 2, 3], {1, 2, 3}, restarted={1})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (2, 3))
    alone = elect(state(1, 3, [1]), [1], {1}, restarted={1})  # one replica: it leads again
    assert (alone.leader, alone.leader_epoch) == (1, 4)


def test_preferred_election():
    assert preferred(state(2, 4, [1, 2, 3]), [1, 2, 3], {1, 2, 3}, 0).leader == 1
    assert preferred(state(2, 4, [2, 3]), [1, 2, 3], {1, 2, 3}, 0) is None  # 1 not in sync
    assert preferred(state(1, 4, [1, 2, 3]), [1, 2, 3], {1, 2, 3}, 0) is None


def test_the_leader_epoch_cache_answers_and_truncates_as_kafka_does(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(2, 100)
    cache.assign(5, 250)
    assert cache.end_offset_for(5, 300) == (5, 300)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 300) == (2, 250)  # the largest epoch <= 3, and its end
    assert cache.end_offset_for(1, 300) == (0, 100)
    assert not cache.assign(4, 260)  # never backwards
    cache.write()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 100\n5 250\n"
    assert LeaderEpochCache.load(tmp_path).entries == [(0, 0), (2, 100), (5, 250)]
    cache.truncate_from_end(250)
    assert cache.entries == [(0, 0), (2, 100)]
    cache.truncate_from_start(120)
    assert cache.entries == [(2, 120)]
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n99999999999\n")
    assert LeaderEpochCache.load(tmp_path).entries == []  # a claimed size is not allocated
