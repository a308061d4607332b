"""KIP-848 consumer, share and streams groups kept in ``__consumer_offsets``: a restarted (or
killed) coordinator loads them back, members keep their ids, epochs and assignments.

One broker for the module, killed (-9) and restarted in place between the steps.
"""

from __future__ import annotations

import pytest

from headrace.protocol import ApiKey, ErrorCode, messages

from kafkawire import WireClient

from test_group_consumer_protocol import consumer_describe, hb, parts
from test_group_protocol import FAST, commit, commit_errors, create_topic

pytestmark = pytest.mark.timeout(120)

SETTINGS = {**FAST, "group.consumer.session.timeout.ms": "45000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from headrace.broker.tools.process import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("persist"), SETTINGS).start()
    yield b
    b.kill()


def crash(broker):
    broker.kill()
    broker.start()


def test_consumer_group_members_keep_ids_epochs_and_assignments(broker):
    with WireClient(broker.port) as c:
        create_topic(c, "cp", 4)
        a = hb(c, "m-a", 0, ["cp"], group="cgp")
        tid = a.assignment.topic_partitions[0].topic_id
        a = hb(c, "m-a", a.member_epoch, owned={tid: [0, 1, 2, 3]}, group="cgp")
        d = hb(c, "m-d", 0, ["cp"], group="cgp")
        a3 = hb(c, "m-a", a.member_epoch, group="cgp")
        kept = parts(a3)
        a4 = hb(c, "m-a", a.member_epoch, owned={tid: kept}, group="cgp")
        d2 = hb(c, "m-d", d.member_epoch, group="cgp")
        mine = parts(d2)
        assert sorted(mine + kept) == [0, 1, 2, 3]
        d3 = hb(c, "m-d", d2.member_epoch, owned={tid: mine}, group="cgp")
        assert d3.error_code == 0
        assert commit_errors(commit(c, "cgp", [("cp", 0, 7)], a4.member_epoch, "m-a")) == [0]
        before = consumer_describe(c, "cgp")
        assert before.group_state == "Stable"
    crash(broker)
    with WireClient(broker.port) as c:
        loaded = consumer_describe(c, "cgp")  # before any member heartbeats
        assert loaded.error_code == 0 and loaded.group_state == "Stable"
        assert loaded.group_epoch == before.group_epoch
        assert loaded.assignment_epoch == before.assignment_epoch

        def members(described):
            return {
                m.member_id: (m.member_epoch, sorted(
                    p for t in m.assignment.topic_partitions for p in t.partitions))
                for m in described.members
            }

        assert members(loaded) == members(before)
        # the members go on with their epochs: no rebalance, the assignment sent again
        a5 = hb(c, "m-a", a4.member_epoch, owned={tid: kept}, group="cgp")
        assert a5.error_code == 0 and a5.member_epoch == a4.member_epoch
        assert parts(a5) == kept
        d4 = hb(c, "m-d", d3.member_epoch, owned={tid: mine}, group="cgp")
        assert d4.error_code == 0 and d4.member_epoch == d3.member_epoch
        O = messages.OffsetFetchRequest
        fetched = c.request(ApiKey.OFFSET_FETCH, 8, O(groups=[O.OffsetFetchRequestGroup(
            group_id="cgp", topics=None)])).groups[0]
        assert [(t.name, p.partition_index, p.committed_offset) for t in fetched.topics
                for p in t.partitions] == [("cp", 0, 7)]
        # a member leaves: its records get tombstones
        assert hb(c, "m-a", -1, group="cgp").error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert [m.member_id for m in consumer_describe(c, "cgp").members] == ["m-d"]
        assert hb(c, "m-a", a5.member_epoch, group="cgp").error_code == (
            ErrorCode.UNKNOWN_MEMBER_ID)
        # the last one leaves, the group is deleted: nothing comes back
        assert hb(c, "m-d", -1, group="cgp").error_code == 0
        D = messages.DeleteGroupsRequest
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, D(groups_names=["cgp"])).results
        assert deleted[0].error_code == 0
    crash(broker)
    with WireClient(broker.port) as c:
        assert consumer_describe(c, "cgp").error_code == ErrorCode.GROUP_ID_NOT_FOUND
