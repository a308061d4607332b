"""StreamsGroupHeartbeat (key 88), versions 0-1: KIP-1071's streams groups.

A Kafka Streams member joins (epoch 0, with its topology), heartbeats with the tasks it owns
and leaves (epoch -1, or -2 for a static member) with this one request; the broker assigns
the tasks (see ``streams_group``). With the cluster's ``streams.version`` at 0
(cluster/features.py) streams groups are off: every request gets UNSUPPORTED_VERSION, as in
Kafka.

Kafka's checks, in its order: READ on the group (GROUP_AUTHORIZATION_FAILED); then Headrace's
bound, a topology over ``group.streams.max.topology.bytes`` (STREAMS_INVALID_TOPOLOGY, before
any work on its names); a topology naming an internal topic (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``) or an illegal topic name
(STREAMS_INVALID_TOPOLOGY); DESCRIBE on every topic it names (TOPIC_AUTHORIZATION_FAILED);
then the coordinator (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) and the request's own
fields.

Internal topics the topology needs and the cluster lacks (repartition and changelog topics)
are created here, as Kafka's broker creates them: with CREATE on the cluster or on those
topics, in the background (the answer does not wait), with the partition counts the group
decided, the replication factor and topic configs the client sent (configs Headrace does not
know are left out). The member is told MISSING_INTERNAL_TOPICS meanwhile, with the reason of
a failed creation appended ("; Creation failed: t (reason)."), or, without CREATE,
"; Unauthorized to CREATE on topics t.".
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.cluster.features import STREAMS_VERSION
from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.config.settings import ConfigError, validate_topic_setting
from headrace.broker.coordinator.group import streams_topology
from headrace.broker.coordinator.group.group_configs import STREAMS_HEARTBEAT_INTERVAL
from headrace.broker.coordinator.group.streams_topology import MISSING_INTERNAL_TOPICS
from headrace.broker.log.topic import TopicCreationError, topic_name_error
from headrace.broker.security.authorizer import GROUP, TOPIC, Operation
from headrace.protocol import ErrorCode, messages

log = logging.getLogger("headrace.groups")

R = messages.StreamsGroupHeartbeatResponse
OFF = "Streams groups are off in this cluster (streams.version 0)."
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")
TASK_OFFSET_INTERVAL_MS = 60_000  # Kafka's streams.task.offset.interval.ms
ACCEPTABLE_RECOVERY_LAG = 10_000  # Kafka's streams.acceptable.recovery.lag
ERRORS_KEPT_S = 60.0  # a failed creation is reported this long (or until tried again)


def refusal(broker: Broker, session, request) -> tuple[int, str | None]:
    """(error, message) when the request is refused before the coordinator, else (0, None)."""
    if broker.features.level(STREAMS_VERSION) < 1:
        return ErrorCode.UNSUPPORTED_VERSION, OFF
    authorizer = broker.authorizer
    if not authorizer.allows(session, Operation.READ, GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if request.topology is not None:
        # the bound first: nothing below looks at more than it lets in
        limit = broker.groups.streams.max_topology_bytes
        size = streams_topology.size(request.topology)
        if size > limit:
            return (
                ErrorCode.STREAMS_INVALID_TOPOLOGY,
                f"The topology takes {size} bytes, more than group.streams.max.topology.bytes"
                f" ({limit}).",
            )
        named = list(
            dict.fromkeys(
                name
                for s in request.topology.subtopologies
                for name in (
                    *s.source_topics,
                    *s.repartition_sink_topics,
                    *(t.name for t in s.repartition_source_topics),
                    *(t.name for t in s.state_changelog_topics),
                )
            )
        )
        internal = [n for n in named if n in INTERNAL_TOPICS]
        if internal:
            return (
                ErrorCode.STREAMS_INVALID_TOPOLOGY,
                f"Use of Kafka internal topics {','.join(internal)} in a Kafka Streams topology"
                " is prohibited.",
            )
        bad = [n for n in named if topic_name_error(n) is not None]
        if bad:
            return (
                ErrorCode.STREAMS_INVALID_TOPOLOGY,
                f"Topic names {','.join(bad)} are not valid topic names.",
            )
        if any(not authorizer.allows(session, Operation.DESCRIBE, TOPIC, n) for n in named):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    return broker.groups.not_served(request.group_id), None


async def handle(broker: Broker, header, request: messages.StreamsGroupHeartbeatRequest):
    session = header.session
    error, message = refusal(broker, session, request)
    coordinator = broker.groups.streams
    if not error:
        error = await coordinator.group_log.ready()
    if error:
        return R(throttle_time_ms=0, error_code=error, error_message=message, member_id="")
    host = f"/{session.host}" if session.host else ""
    answer = coordinator.heartbeat(request, header.client_id or "", host)
    # what it changed is written to __consumer_offsets before the answer, as Kafka does
    error = await coordinator.persisted(request.group_id, answer.member_id or request.member_id)
    if error and not answer.error:
        answer.error, answer.message = error, None
    if answer.error:
        return R(
            throttle_time_ms=0,
            error_code=answer.error,
            error_message=answer.message,
            member_id="",
        )
    status: list[list] = [list(s) for s in answer.status]
    if answer.to_create:
        _create(broker, session, answer.to_create, status)
    active: list | None = None
    standby: list | None = None
    warmup: list | None = None
    if answer.tasks is not None:
        active, standby = (_ids(ids) for ids in answer.tasks)
        warmup = []
    endpoints = None
    if answer.endpoints is not None:
        endpoints = [
            R.EndpointToPartitions(
                user_endpoint=R.Endpoint(host=host_, port=port),
                active_partitions=[R.TopicPartition(topic=t, partitions=ps) for t, ps in active],
                standby_partitions=[R.TopicPartition(topic=t, partitions=ps) for t, ps in standby],
            )
            for (host_, port), active, standby in answer.endpoints
        ]
    return R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        member_id=answer.member_id or "",
        member_epoch=answer.epoch,
        heartbeat_interval_ms=coordinator.configs.value(
            request.group_id, STREAMS_HEARTBEAT_INTERVAL
        ),
        acceptable_recovery_lag_legacy=ACCEPTABLE_RECOVERY_LAG,
        acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG,
        task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
        status=[R.Status(status_code=int(c), status_detail=str(d)) for c, d in status],
        endpoint_information_epoch=answer.endpoint_epoch,
        partitions_by_user_endpoint=endpoints,
        active_tasks=active,
        standby_tasks=standby,
        warmup_tasks=warmup,
    )


def _ids(tasks) -> list:
    by_sub: dict[str, list[int]] = {}
    for sub, p in tasks:
        by_sub.setdefault(sub, []).append(p)
    return [R.TaskIds(subtopology_id=s, partitions=sorted(ps)) for s, ps in sorted(by_sub.items())]


def _create(broker: Broker, session, wanted: dict, status: list) -> None:
    """Start creating the internal topics ``wanted`` (name -> TopicInfo) and say so in the
    MISSING_INTERNAL_TOPICS status."""
    authorizer = broker.authorizer
    if not authorizer.allows_cluster(session, Operation.CREATE):
        denied = [
            n for n in sorted(wanted) if not authorizer.allows(session, Operation.CREATE, TOPIC, n)
        ]
        if denied:
            _append(status, f"Unauthorized to CREATE on topics {', '.join(denied)}.")
            return
    creating, errors = broker.groups.streams.creating, broker.groups.streams.creation_errors
    now = time.monotonic()
    failed = []
    for name in sorted(wanted):
        seen = errors.get(name)
        if seen is not None and now - seen[0] < ERRORS_KEPT_S:
            failed.append(f"{name} ({seen[1]})")
    if failed:
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        _append(status, f"; Creation failed: {', '.join(failed[:3])}{more}.", join=False)
    for name, info in wanted.items():
        if name not in creating:
            creating.add(name)
            asyncio.get_running_loop().create_task(_create_one(broker, info))


def _append(status: list, detail: str, join: bool = True) -> None:
    for s in status:
        if s[0] == MISSING_INTERNAL_TOPICS:
            s[1] = f"{s[1]}; {detail}" if join else f"{s[1]}{detail}"
            return
    status.append([MISSING_INTERNAL_TOPICS, detail.lstrip("; ")])


async def _create_one(broker: Broker, info) -> None:
    creating, errors = broker.groups.streams.creating, broker.groups.streams.creation_errors
    try:
        if broker.topics.get(info.name) is not None:
            return
        configs = {}
        for key, value in info.configs:
            try:
                configs[key] = validate_topic_setting(key, value)
            except ConfigError:
                log.info("internal topic %s: topic config %s=%s left out", info.name, key, value)
        factor = info.replication_factor if info.replication_factor > 0 else -1
        await broker.topics.create(info.name, info.partitions, configs, None, factor)
        errors.pop(info.name, None)
        log.info("created internal topic %s (%d partitions)", info.name, info.partitions)
    except FileExistsError:
        pass
    except (TopicCreationError, TopicChangeError) as e:
        errors[info.name] = (time.monotonic(), e.message)
        log.warning("creating internal topic %s: %s", info.name, e.message)
    except Exception as e:  # noqa: BLE001 - reported to the members, not raised
        errors[info.name] = (time.monotonic(), str(e))
        log.warning("creating internal topic %s: %s", info.name, e)
    finally:
        creating.discard(info.name)
