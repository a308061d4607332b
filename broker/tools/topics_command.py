"""``headrace topics list|describe|create|delete|alter`` against a running broker or cluster.

    headrace topics [--bootstrap-server HOST:PORT] [--json] list [--exclude-internal]
    headrace topics describe [TOPIC ...]
    headrace topics create TOPIC [--partitions N] [--replication-factor R] [--config K=V ...]
    headrace topics delete TOPIC [TOPIC ...]
    headrace topics alter TOPIC [--partitions N] [--config K=V ...] [--delete-config K ...]

Over the Kafka protocol (``admin_client``), so it works against Apache Kafka too. ``describe``
shows each topic's partitions (leader, replicas, in-sync replicas, log start and end offsets)
and the settings given to the topic itself (not the defaults).
"""

from __future__ import annotations

import argparse

from headrace.broker.client.admin_client import EARLIEST, LATEST, TOPIC_RESOURCE, AdminClient, check
from headrace.protocol import ApiKey, messages

from .command_output import as_json, table

DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source of a topic's own setting
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


def add_parser(commands, common: argparse.ArgumentParser) -> None:
    topics = commands.add_parser("topics", help="list, describe, create, delete, alter topics")
    sub = topics.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", parents=[common], help="topic names")
    listing.add_argument("--exclude-internal", action="store_true")
    describe = sub.add_parser("describe", parents=[common], help="partitions and settings")
    describe.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    create = sub.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    delete = sub.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    alter = sub.add_parser("alter", parents=[common], help="add partitions, change settings")
    alter.add_argument("topic")
    alter.add_argument("--partitions", type=int, help="the new partition count (only more)")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")


def run(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap_server) as admin:
        return {
            "list": _list,
            "describe": _describe,
            "create": _create,
            "delete": _delete,
            "alter": _alter,
        }[args.action](admin, args)


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--config wants KEY=VALUE, not {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def _list(admin: AdminClient, args) -> int:
    names = sorted(
        t.name for t in admin.metadata(None).topics if not (args.exclude_internal and t.is_internal)
    )
    if args.json:
        as_json(names)
    else:
        for name in names:
            print(name)
    return 0


def describe(admin: AdminClient, names: list[str] | None) -> list[dict]:
    """Each topic (all when ``names`` is None) as a dict: name, id, partitions, settings."""
    found = []
    partitions: dict[tuple[str, int], int] = {}
    for t in sorted(admin.metadata(names).topics, key=lambda t: t.name):
        check(t.error_code, t.name)
        found.append(t)
        for p in t.partitions:
            if p.leader_id >= 0:
                partitions[(t.name, p.partition_index)] = p.leader_id
    starts = admin.list_offsets(partitions, EARLIEST) if partitions else {}
    ends = admin.list_offsets(partitions, LATEST) if partitions else {}
    configs = _topic_configs(admin, [t.name for t in found])
    return [
        {
            "name": t.name,
            "topic_id": str(t.topic_id),
            "internal": t.is_internal,
            "partitions": [
                {
                    "partition": p.partition_index,
                    "leader": p.leader_id,
                    "replicas": list(p.replica_nodes),
                    "isr": list(p.isr_nodes),
                    "log_start_offset": starts.get((t.name, p.partition_index)),
                    "log_end_offset": ends.get((t.name, p.partition_index)),
                }
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ],
            "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
            "configs": configs.get(t.name, {}),
        }
        for t in found
    ]


def _topic_configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    R = messages.DescribeConfigsRequest
    request = R(
        resources=[
            R.DescribeConfigsResource(
                resource_type=TOPIC_RESOURCE, resource_name=n, configuration_keys=None
            )
            for n in names
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    out = {}
    for result in admin.request(admin.controller, ApiKey.DESCRIBE_CONFIGS, request).results:
        check(result.error_code, result.error_message)
        out[result.resource_name] = {
            c.name: c.value for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG
        }
    return out


def _describe(admin: AdminClient, args) -> int:
    topics = describe(admin, args.topics or None)
    if args.json:
        as_json(topics)
        return 0
    table(
        [
            {
                **t,
                "partitions": len(t["partitions"]),
                "configs": ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items())),
            }
            for t in topics
        ],
        ["name", "topic_id", "partitions", "replication_factor", "configs"],
    )
    print()
    table(
        [{"topic": t["name"], **p} for t in topics for p in t["partitions"]],
        ["topic", "partition", "leader", "replicas", "isr", "log_start_offset", "log_end_offset"],
    )
    return 0


def _create(admin: AdminClient, args) -> int:
    R = messages.CreateTopicsRequest
    topic = R.CreatableTopic(
        name=args.topic,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        configs=[R.CreatableTopicConfig(name=k, value=v) for k, v in _pairs(args.config).items()],
    )
    request = R(topics=[topic], timeout_ms=int(admin.timeout * 1000), validate_only=False)
    (result,) = admin.request(admin.controller, ApiKey.CREATE_TOPICS, request).topics
    check(result.error_code, result.error_message)
    _done(args, {"created": args.topic, "partitions": result.num_partitions})
    return 0


def _delete(admin: AdminClient, args) -> int:
    R = messages.DeleteTopicsRequest
    request = R(
        topics=[R.DeleteTopicState(name=n) for n in args.topics],
        timeout_ms=int(admin.timeout * 1000),
    )
    response = admin.request(admin.controller, ApiKey.DELETE_TOPICS, request)
    for result in response.responses:
        check(result.error_code, f"{result.name}: {result.error_message or ''}")
    _done(args, {"deleted": args.topics})
    return 0


def _alter(admin: AdminClient, args) -> int:
    done: dict[str, object] = {"altered": args.topic}
    if args.partitions is not None:
        R = messages.CreatePartitionsRequest
        request = R(
            topics=[
                R.CreatePartitionsTopic(name=args.topic, count=args.partitions, assignments=None)
            ],
            timeout_ms=int(admin.timeout * 1000),
            validate_only=False,
        )
        for result in admin.request(admin.controller, ApiKey.CREATE_PARTITIONS, request).results:
            check(result.error_code, result.error_message)
        done["partitions"] = args.partitions
    changes: list[tuple[str, int, str | None]] = [
        (k, SET, v) for k, v in _pairs(args.config).items()
    ]
    changes += [(k, DELETE, None) for k in args.delete_config]
    if changes:
        A = messages.IncrementalAlterConfigsRequest
        alter = A(
            resources=[
                A.AlterConfigsResource(
                    resource_type=TOPIC_RESOURCE,
                    resource_name=args.topic,
                    configs=[
                        A.AlterableConfig(name=k, config_operation=op, value=v)
                        for k, op, v in changes
                    ],
                )
            ],
            validate_only=False,
        )
        response = admin.request(admin.controller, ApiKey.INCREMENTAL_ALTER_CONFIGS, alter)
        for r in response.responses:
            check(r.error_code, r.error_message)
        done["configs"] = {k: v for k, _, v in changes}
    if len(done) == 1:
        raise ValueError("alter wants --partitions, --config or --delete-config")
    _done(args, done)
    return 0


def _done(args, what: dict) -> None:
    if args.json:
        as_json(what)
    else:
        print(", ".join(f"{k} {_plain(v)}" for k, v in what.items()))


def _plain(value: object) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={'(default)' if v is None else v}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)
