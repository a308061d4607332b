"""ElectLeaders (key 43), versions 0-2: preferred and unclean leader elections
(``kafka-leader-election``).

Answered by the controller (another broker answers NOT_CONTROLLER, and the admin client asks
the controller it finds in the metadata). Per partition (all partitions when the request names
none): PREFERRED (0) makes the first replica the leader if it is live and in the ISR
(ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE when it cannot);
UNCLEAN (1) elects a leader for a partition without a live one, from the ISR if a member is
live, else from any live replica (ELECTION_NOT_NEEDED when the partition has a live leader,
ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live). The new state is written by
compare-and-set with the controller's epoch check (elections.py, partition_state.py) with the
leader epoch + 1, and the brokers follow it through their watches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from kazoo.exceptions import BadVersionError, NoNodeError

from headrace.broker.cluster.elections import elect, preferred
from headrace.protocol import ErrorCode, messages

R = messages.ElectLeadersResponse
PREFERRED, UNCLEAN = 0, 1


async def handle(broker: Broker, header, request: messages.ElectLeadersRequest):
    cluster = broker.cluster
    if not cluster.controller.active or cluster.controller.epoch_version < 0:
        return R(
            throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, replica_election_results=[]
        )
    controller = cluster.controller
    kind = getattr(request, "election_type", PREFERRED)
    wanted: dict[str, list[int]] = {}
    if request.topic_partitions is None:
        for name, known in cluster.topics.items():
            wanted[name] = list(range(len(known.replicas)))
    else:
        for t in request.topic_partitions:
            wanted.setdefault(t.topic, []).extend(t.partitions)
    live = set(cluster.brokers)
    results = []
    for name, indexes in wanted.items():
        record = cluster.topics.get(name)
        out = []
        for index in indexes:
            code, message = await _elect(cluster, controller, record, name, index, kind, live)
            out.append(
                R.PartitionResult(partition_id=index, error_code=code, error_message=message)
            )
        results.append(R.ReplicaElectionResult(topic=name, partition_result=out))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, replica_election_results=results)


async def _elect(cluster, controller, record, name, index, kind, live) -> tuple[int, str | None]:
    if record is None or not 0 <= index < len(record.replicas):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name}-{index} does not exist"
    state = cluster.states.get((name, index))
    if state is None:
        return ErrorCode.LEADER_NOT_AVAILABLE, f"{name}-{index} has no state yet"
    replicas = record.replicas[index]
    if kind == PREFERRED:
        if replicas and state.leader == replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED, "the preferred leader leads already"
        new = preferred(state, replicas, live, controller.epoch)
        if new is None:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, (
                f"the preferred leader {replicas[0] if replicas else -1} is down or not in sync"
            )
    elif kind == UNCLEAN:
        if state.leader in live:
            return ErrorCode.ELECTION_NOT_NEEDED, "the partition has a live leader"
        new = elect(state, replicas, live, (), True, controller.epoch)
        if new is None or new.leader < 0:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica is live"
    else:
        return ErrorCode.INVALID_REQUEST, f"unknown election type {kind}"
    try:
        await cluster.write_state(name, index, new, state.version, controller.epoch_version)
    except (BadVersionError, NoNodeError):
        await cluster.read_state(name, index)
        return ErrorCode.NOT_CONTROLLER, "the state changed meanwhile (try again)"
    return ErrorCode.NONE, None
