"""ShareGroupDescribe (key 77), version 1: share groups, their members and each member's
assignment, the group and assignment epochs, the state (Empty or Stable) and the assignor
("simple").

A group id that is not a share group gets GROUP_ID_NOT_FOUND with Kafka's messages ("Group G
not found.", "Group G is not a share group."). DESCRIBE on the group is needed (else
GROUP_AUTHORIZATION_FAILED), and, with an authorizer, DESCRIBE on every topic assigned in the
group (else TOPIC_AUTHORIZATION_FAILED and no members), as in Kafka. With ``share.version``
at 0 every group gets UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.coordinator.group.share_group import ASSIGNOR
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .consumer_group_heartbeat import by_topic
from .describe_groups import described, group_of_kind, undescribed
from .share_group_heartbeat import OFF

R = messages.ShareGroupDescribeResponse
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


def _assignment(broker: Broker, parts):
    out = []
    for tid, ps in by_topic(parts):
        topic = broker.topics.by_id.get(tid)
        if topic is not None:  # a topic deleted since is left out, as Kafka does
            out.append(R.TopicPartitions(topic_id=tid, topic_name=topic.name, partitions=ps))
    return R.Assignment(topic_partitions=out)


def handle(broker: Broker, header, request: messages.ShareGroupDescribeRequest):
    asked = request.include_authorized_operations
    authorizer, session = broker.authorizer, header.session
    groups = []
    off = OFF if broker.features.level(SHARE_VERSION) < 1 else None
    for group_id in request.group_ids:
        group, ops, refused = group_of_kind(
            broker,
            session,
            group_id,
            asked,
            "share",
            broker.groups.share.groups,
            R.DescribedGroup,
            off,
        )
        if refused is not None:
            groups.append(refused)
            continue
        members = [
            R.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                assignment=_assignment(broker, m.assigned),
            )
            for m in group.members.values()
        ]
        if authorizer.enabled and any(
            not authorizer.allows(session, Operation.DESCRIBE, TOPIC, t.topic_name)
            for m in members
            for t in m.assignment.topic_partitions
        ):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            groups.append(undescribed(R.DescribedGroup, group_id, code, ops, "", HIDDEN_TOPICS))
            continue
        groups.append(described(R.DescribedGroup, group, ops, ASSIGNOR, members))
    return R(throttle_time_ms=0, groups=groups)
