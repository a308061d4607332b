"""CreateTopics (key 19), versions 2-7.

Checks, per topic: a legal name (INVALID_TOPIC_EXCEPTION), not already there
(TOPIC_ALREADY_EXISTS), a partition count >= 1 or -1 for ``num.partitions``
(INVALID_PARTITIONS), a replication factor from 1 to the live brokers, or -1 for
``default.replication.factor`` (a broker on its own: 1) (INVALID_REPLICATION_FACTOR), manual
assignments of distinct live brokers per partition (on a single broker, this one)
(INVALID_REPLICA_ASSIGNMENT), known topic settings with valid values (INVALID_CONFIG). In a
cluster, partitions without a manual assignment are placed over the live brokers by rendezvous
hashing (``Cluster.create_topic``: the k highest scores spread over racks, the first replica
the preferred leader).
``validate_only`` checks without creating. A topic whose partitions cannot all be created
(too many open files, a full disk...) is not created at all and gets KAFKA_STORAGE_ERROR (or
UNKNOWN_SERVER_ERROR) with the cause in its error message; other topics are unaffected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import logging

from headrace.broker.cluster.topic_admin import TopicChangeError
from headrace.broker.config.settings import TOPIC_SETTINGS, ConfigError, validate_topic_setting
from headrace.broker.log.topic import TopicCreationError, topic_name_error
from headrace.broker.security.authorizer import TOPIC, Operation
from headrace.protocol import ErrorCode, messages

from .alter_configs import registry_needed
from .describe_configs import config_entries

log = logging.getLogger("headrace")

R = messages.CreateTopicsResponse


async def handle(broker: Broker, header, request: messages.CreateTopicsRequest):
    results = []
    names = [t.name for t in request.topics]
    authorizer, session = broker.authorizer, header.session
    # Kafka's: CREATE on the cluster, or on the topic
    anywhere = authorizer.allows_cluster(session, Operation.CREATE)
    for t in request.topics:
        result = R.CreatableTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(result)
        if not anywhere and not authorizer.allows(session, Operation.CREATE, TOPIC, t.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            continue
        try:
            partitions, replicas, configs = await _checked(broker, t, names)
        except _Refused as e:
            result.error_code, result.error_message = e.args
            continue
        if not request.validate_only:
            try:
                topic = await broker.topics.create(
                    t.name, partitions, configs, replicas, t.replication_factor
                )
            except FileExistsError:
                result.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                result.error_message = f"Topic '{t.name}' already exists."
                continue
            except (TopicCreationError, TopicChangeError) as e:
                result.error_code, result.error_message = e.error_code, e.message
                log.warning("CreateTopics: %s", e.message)
                continue
            result.topic_id = topic.topic_id
            topic_configs = config_entries(broker, topic)
        else:
            topic_configs = []
        result.num_partitions = partitions
        result.replication_factor = (
            len(replicas[0])
            if replicas
            else t.replication_factor
            if t.replication_factor > 0
            else int(broker.config["default.replication.factor"])
        )
        result.configs = [
            R.CreatableTopicConfigs(
                name=e.name,
                value=e.value,
                read_only=False,
                config_source=e.source,
                is_sensitive=False,
            )
            for e in topic_configs
        ]
    return R(throttle_time_ms=0, topics=results)


class _Refused(Exception):
    pass


class _TooFewBrokers(_Refused):
    """Refused for want of live brokers (looked at again before it is final)."""


def live_brokers(broker: Broker) -> set[int]:
    """The brokers partitions may be placed on: this one, or in a cluster the live ones."""
    return set(broker.brokers())


async def _checked(broker: Broker, t, names) -> tuple[int, list[list[int]] | None, dict]:
    """``_check``; in a cluster, a refusal for want of live brokers is made only after the
    registered brokers are read again (one that has just registered may not be in this
    broker's view yet: its watch event is on the way)."""
    try:
        return _check(broker, t, names, live_brokers(broker))
    except _TooFewBrokers:
        pass
    live = set(await broker.cluster.registered_now()) | {broker.node_id}
    return _check(broker, t, names, live)


def check_assignment(broker: Broker, broker_ids, live: set[int] | None = None) -> str | None:
    """What is wrong with a manual assignment of one partition, if anything."""
    if live is None:
        live = live_brokers(broker)
    if not broker_ids:
        return "A partition needs at least one replica."
    if len(set(broker_ids)) != len(broker_ids):
        return f"Duplicate brokers in {list(broker_ids)}."
    for b in broker_ids:
        if b not in live:
            return f"Broker {b} is not a live broker (live: {sorted(live)})."
    return None


def _check(broker: Broker, t, names, live: set[int]) -> tuple[int, list[list[int]] | None, dict]:
    if names.count(t.name) > 1:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Topic '{t.name}' appears more than once.")
    problem = topic_name_error(t.name)
    if problem:
        raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if broker.topics.get(t.name) is not None:
        raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set.",
            )
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be 0..n-1.")
        for a in sorted(t.assignments, key=lambda a: a.partition_index):
            problem = check_assignment(broker, a.broker_ids, live)
            if problem:
                refused = _TooFewBrokers if set(a.broker_ids) - live else _Refused
                raise refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        partitions = len(indexes)
        replicas = [
            list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)
        ]
    else:
        replicas = None
        partitions = (
            int(broker.config["num.partitions"]) if t.num_partitions == -1 else t.num_partitions
        )
        if partitions < 1:
            raise _Refused(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be at least 1.")
        rf = (
            int(broker.config["default.replication.factor"])
            if t.replication_factor == -1
            else t.replication_factor
        )
        if rf < 1:
            raise _Refused(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor must be at least 1 (was {rf}).",
            )
        if rf > len(live):
            raise _TooFewBrokers(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {rf} larger than available brokers: {len(live)}.",
            )
    configs = {}
    for c in t.configs:
        if c.value is None:
            continue
        try:
            configs[c.name] = validate_topic_setting(c.name, c.value)
        except ConfigError as e:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(e)) from None
    problem = registry_needed(broker, configs)
    if problem:
        raise _Refused(ErrorCode.INVALID_CONFIG, problem)
    return partitions, replicas, configs


__all__ = ["TOPIC_SETTINGS", "handle"]
