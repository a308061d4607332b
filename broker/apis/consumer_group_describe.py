"""ConsumerGroupDescribe (key 69), versions 0-1: KIP-848 groups, their members, and each
member's current and target assignment. A group id that is not a consumer group gets
GROUP_ID_NOT_FOUND, with Kafka's messages ("Group G not found.", "Group G is not a consumer
group."); the admin client then falls back to DescribeGroups and reports the first message
when that fails too. With ``group.version`` at 0 every group gets UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import GROUP_VERSION
from headrace.protocol import ErrorCode, messages

from .consumer_group_heartbeat import OFF, by_topic
from .describe_groups import described, described_refusal, undescribed

R = messages.ConsumerGroupDescribeResponse
CONSUMER_MEMBER = 1


def _assignment(broker: Broker, parts):
    out = []
    for tid, ps in by_topic(parts):
        topic = broker.topics.by_id.get(tid)
        if topic is not None:  # a deleted topic's partitions are left out, as Kafka does
            out.append(R.TopicPartitions(topic_id=tid, topic_name=topic.name, partitions=ps))
    return R.Assignment(topic_partitions=out)


def handle(broker: Broker, header, request: messages.ConsumerGroupDescribeRequest):
    asked = request.include_authorized_operations
    groups = []
    for group_id in request.group_ids:
        group = broker.groups.consumer.groups.get(group_id)
        refused, ops = described_refusal(broker, header.session, group_id, asked)
        if not refused and broker.features.level(GROUP_VERSION) < 1:
            code = ErrorCode.UNSUPPORTED_VERSION
            groups.append(undescribed(R.DescribedGroup, group_id, code, ops, "", OFF))
            continue
        if refused:
            groups.append(undescribed(R.DescribedGroup, group_id, refused, ops))
            continue
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if broker.groups.group_type(group_id) is not None
                else f"Group {group_id} not found."
            )
            code = ErrorCode.GROUP_ID_NOT_FOUND
            groups.append(undescribed(R.DescribedGroup, group_id, code, ops, "Dead", message))
            continue
        members = [
            R.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                subscribed_topic_regex=m.regex,
                assignment=_assignment(broker, m.assigned),
                target_assignment=_assignment(broker, group.target.get(m.member_id, ())),
                member_type=CONSUMER_MEMBER,
            )
            for m in group.members.values()
        ]
        groups.append(described(R.DescribedGroup, group, ops, group.assignor_name, members))
    return R(throttle_time_ms=0, groups=groups)
