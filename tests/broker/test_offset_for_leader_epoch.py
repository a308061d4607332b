"""OffsetForLeaderEpoch (23) at a broker on its own: every partition has been led in leader
epoch 0 since its log began, so epoch 0 ends at the log end (as Kafka's epoch cache with that
one epoch answers). A Java consumer resuming from an offset committed with leader epoch 0
checks its position so; the answer (-1, -1) made it see a truncation and reset to
auto.offset.reset, and Kafka Streams reprocessed a moved task's input (counting words twice:
the compatibility suite's ``streams-*`` scenarios, compat/java). librdkafka does not check a
committed position this way."""

from __future__ import annotations

from confluent_kafka import Producer
from kafkawire import WireClient

from headrace.protocol import ApiKey, ErrorCode, messages
from test_group_protocol import FAST, create_topic

O = messages.OffsetForLeaderEpochRequest


def ask(port: int, leader_epoch: int, current_leader_epoch: int = -1, topic: str = "t"):
    request = O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic=topic, partitions=[
        O.OffsetForLeaderPartition(partition=0, current_leader_epoch=current_leader_epoch,
                                   leader_epoch=leader_epoch)])])
    with WireClient(port) as c:
        p = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, request).topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def test_epoch_zero_ends_at_the_log_end_and_other_epochs_are_unknown(broker_factory):
    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{b.port}"})
    for i in range(5):
        p.produce("t", value=b"%d" % i)
    assert p.flush(10) == 0
    assert ask(b.port, 0) == (ErrorCode.NONE, 0, 5)
    assert ask(b.port, 0, current_leader_epoch=0) == (ErrorCode.NONE, 0, 5)
    assert ask(b.port, 1) == (ErrorCode.NONE, -1, -1)  # newer than any epoch: unknown
    assert ask(b.port, -1) == (ErrorCode.NONE, -1, -1)
    assert ask(b.port, 0, topic="none")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION



def test_a_broker_on_its_own_stamps_epoch_zero_into_what_it_stores(broker_factory):
    """A producer's own partitionLeaderEpoch (7 here) is not kept: the stored batch carries the
    leader's epoch, 0, so a consumer that checks the epoch it read (OffsetForLeaderEpoch) asks
    about epoch 0 and is told the log end, never an unknown epoch that would reset it."""
    from test_bad_input import fetch, produce

    from headrace.protocol.records import Record, build_batch
    from headrace.record_format import PARTITION_LEADER_EPOCH_OFFSET

    b = broker_factory(FAST)
    with WireClient(b.port) as c:
        create_topic(c, "t", 1)
        sent = build_batch([Record(key=b"k", value=b"v")], partition_leader_epoch=7)
        assert produce(c, "t", sent).error_code == ErrorCode.NONE
        stored = bytes(fetch(c, "t"))
    epoch = int.from_bytes(stored[PARTITION_LEADER_EPOCH_OFFSET : PARTITION_LEADER_EPOCH_OFFSET + 4], "big", signed=True)
    assert epoch == 0
    assert ask(b.port, epoch) == (ErrorCode.NONE, 0, 1)
