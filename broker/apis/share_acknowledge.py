"""ShareAcknowledge (key 79), versions 1-2: a share consumer settles records it holds (KIP-932).

ACCEPT, RELEASE, REJECT, GAP and (v2) RENEW, for ranges of offsets, applied to the group's
share partitions here (share/share_partition.py); ShareFetch carries the same
acknowledgements and answers them the same way (``acknowledge``, shared by both). The request
is part of the member's share session (its epoch must be the session's; 0 cannot open one;
-1 ends the session after the acknowledgements, giving back what is still held). Checks as
Kafka's: the group's READ, the topics' READ, ranges in order and well formed, types known to
the version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio

from headrace.broker.cluster.features import SHARE_VERSION
from headrace.broker.security.authorizer import GROUP, TOPIC, Operation
from headrace.broker.share.share_partition import RENEW
from headrace.broker.share.share_sessions import FINAL_EPOCH, ShareSessionError
from headrace.protocol import ErrorCode, messages

from .leader_hints import LeaderHints

R = messages.ShareAcknowledgeResponse
MAX_MEMBER_ID = 36


def refusal(broker: Broker, header, group_id, member_id) -> tuple[int, str | None]:
    """The top-level checks ShareFetch and ShareAcknowledge share: (error, message)."""
    if broker.features.level(SHARE_VERSION) < 1:
        return ErrorCode.UNSUPPORTED_VERSION, "Share groups are off in this cluster."
    if group_id is None:
        return ErrorCode.INVALID_REQUEST, "Invalid group id in the request."
    if not broker.authorizer.allows(header.session, Operation.READ, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not member_id or len(member_id) > MAX_MEMBER_ID:
        return ErrorCode.INVALID_REQUEST, "Invalid member id in the request."
    return ErrorCode.NONE, None


async def handle(broker: Broker, header, request: messages.ShareAcknowledgeRequest):
    error, message = refusal(broker, header, request.group_id, request.member_id)
    group_id, member_id = request.group_id or "", request.member_id or ""
    shares = broker.shares
    session = None
    if not error:
        try:
            session = shares.sessions.acknowledge(group_id, member_id, request.share_session_epoch)
        except ShareSessionError as e:
            error = e.code
    if error:
        return R(throttle_time_ms=0, error_code=error, error_message=message, responses=[])
    renew = header.api_version >= 2 and request.is_renew_ack
    hints = LeaderHints(broker, header.session, R, 0, 0, header.api_version)
    results = await acknowledge(broker, header, request, R, hints, renew)
    if request.share_session_epoch == FINAL_EPOCH and session is not None:
        shares.sessions.end(session)
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        acquisition_lock_timeout_ms=shares.lock_ms(group_id),
        responses=[
            R.ShareAcknowledgeTopicResponse(
                topic_id=tid,
                partitions=[
                    R.PartitionData(
                        partition_index=index,
                        error_code=code,
                        error_message=text,
                        current_leader=leader or R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                    )
                    for index, (code, text, leader) in parts.items()
                ],
            )
            for tid, parts in results.items()
        ],
        node_endpoints=hints.endpoints(),
    )


async def acknowledge(broker: Broker, header, request, message, hints: LeaderHints, renew: bool):
    """Apply the request's acknowledgements, and wait until they are written: {topic id:
    {partition: (error, message, leader or None)}}. ``message`` is the response class (its
    LeaderIdAndEpoch names the leader of a partition not led here)."""
    shares = broker.shares
    group_id, member_id = request.group_id, request.member_id
    highest = 4 if header.api_version >= 2 else 3
    now = asyncio.get_running_loop().time()
    deadline = now + shares.lock_ms(group_id) / 1000
    out: dict = {}
    written = []  # (topic id, index, share partition) acknowledged
    for t in request.topics:
        topic = broker.topics.find(None, t.topic_id)
        allowed = topic is not None and broker.authorizer.allows(
            header.session, Operation.READ, TOPIC, topic.name
        )
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            leader = None
            code: int
            text: str | None
            batches = _batches(p.acknowledgement_batches, highest, renew)
            if batches is None:
                code, text = ErrorCode.INVALID_REQUEST, "Invalid acknowledgement batches."
            elif topic is None:
                code, text = ErrorCode.UNKNOWN_TOPIC_ID, None
            elif not allowed:
                code, text = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            else:
                partition = topic.partition(p.partition_index)
                sp = shares.get(group_id, t.topic_id, p.partition_index)
                if partition is None:
                    code, text = topic.partition_error(p.partition_index), None
                    probe = message.PartitionData(partition_index=p.partition_index)
                    probe.error_code = code
                    hints.add(probe, topic.name, p.partition_index)
                    leader = probe.current_leader
                elif sp is None:
                    code, text = ErrorCode.INVALID_RECORD_STATE, "No records are in flight."
                else:
                    code, text = sp.acknowledge(member_id, batches, deadline)
                    if not code:
                        written.append((t.topic_id, p.partition_index, sp))
            out.setdefault(t.topic_id, {})[p.partition_index] = (code, text, leader)
    for tid, index, sp in written:
        code = await shares.durable(sp)
        if code:
            out[tid][index] = (code, "The acknowledgement could not be stored.", None)
    return out


def _batches(batches, highest: int, renew: bool) -> list[tuple[int, int, list[int]]] | None:
    """The acknowledgement batches checked as Kafka checks them (in order, not overlapping,
    one type or one per offset, types known), or None."""
    out = []
    previous = -1
    for b in batches:
        types = list(b.acknowledge_types)
        if b.first_offset > b.last_offset or b.first_offset <= previous or not types:
            return None
        if len(types) != 1 and len(types) != b.last_offset - b.first_offset + 1:
            return None
        if any(k < 0 or k > highest for k in types) or (not renew and RENEW in types):
            return None
        out.append((b.first_offset, b.last_offset, types))
        previous = b.last_offset
    return out
