"""``headrace groups list|describe|reset-offsets|delete`` against a running broker or cluster.

    headrace groups [--bootstrap-server HOST:PORT] [--json] list
    headrace groups describe GROUP [GROUP ...]
    headrace groups reset-offsets GROUP (--topic T[:P,P...] ... | --all-topics)
                   (--to-earliest | --to-latest | --to-offset N | --shift-by N) [--execute]
    headrace groups delete GROUP [GROUP ...]

Over the Kafka protocol (``admin_client``): each group's requests go to its coordinator.
``describe`` shows the group's state and members, and per partition the committed offset, the
log end offset, the lag and the member it is assigned to. ``reset-offsets`` is a dry run that
prints the new offsets unless ``--execute`` is given, as Kafka's ``kafka-consumer-groups``;
like it, it refuses a group that has members (stop its consumers first), and keeps the new
offsets between each partition's log start and end.
"""

from __future__ import annotations

import argparse

from headrace.broker.client.admin_client import EARLIEST, LATEST, AdminClient, check
from headrace.broker.client.admin_request import AdminError
from headrace.protocol import ApiKey, decode_message, messages

from .command_output import as_json, table

INACTIVE = ("Empty", "Dead")


def add_parser(commands, common: argparse.ArgumentParser) -> None:
    groups = commands.add_parser("groups", help="list, describe, reset offsets of, delete groups")
    sub = groups.add_subparsers(dest="action", required=True)
    sub.add_parser("list", parents=[common], help="every group of every broker")
    describe = sub.add_parser("describe", parents=[common], help="members, offsets and lag")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    reset = sub.add_parser("reset-offsets", parents=[common], help="move committed offsets")
    reset.add_argument("group")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic", action="append", metavar="TOPIC[:P,P...]", help="a topic, or some partitions"
    )
    which.add_argument("--all-topics", action="store_true", help="every topic with offsets")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    reset.add_argument("--execute", action="store_true", help="commit (default: a dry run)")
    delete = sub.add_parser("delete", parents=[common], help="delete groups and their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")


def run(args: argparse.Namespace) -> int:
    with AdminClient(args.bootstrap_server) as admin:
        return {
            "list": _list,
            "describe": _describe,
            "reset-offsets": _reset,
            "delete": _delete,
        }[args.action](admin, args)


def _list(admin: AdminClient, args) -> int:
    rows = []
    for node in sorted(admin.nodes):
        response = admin.request(
            node, ApiKey.LIST_GROUPS, messages.ListGroupsRequest(states_filter=[])
        )
        check(response.error_code)
        for g in response.groups:
            rows.append(
                {"group": g.group_id, "protocol_type": g.protocol_type, "state": g.group_state}
            )
    rows.sort(key=lambda r: r["group"])
    if args.json:
        as_json(rows)
    else:
        table(rows, ["group", "protocol_type", "state"])
    return 0


def _membership(admin: AdminClient, node: int, group_id: str) -> dict:
    """State, protocol, members and who owns which partition, from DescribeGroups, or for
    a KIP-848 group (which DescribeGroups calls Dead) from ConsumerGroupDescribe."""
    (g,) = admin.request(
        node, ApiKey.DESCRIBE_GROUPS, messages.DescribeGroupsRequest(groups=[group_id])
    ).groups
    check(g.error_code, group_id)
    owners: dict[tuple[str, int], str] = {}
    if g.group_state == "Dead":
        found = _consumer_group(admin, node, group_id, owners)
        if found is not None:
            return found
    members = []
    for m in g.members:
        members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host})
        for topic, partitions in _assignment(g.protocol_type, m.member_assignment):
            for p in partitions:
                owners[(topic, p)] = m.member_id
    return {
        "state": g.group_state,
        "protocol_type": g.protocol_type,
        "protocol": g.protocol_data,
        "members": members,
        "owners": owners,
    }


def _consumer_group(admin: AdminClient, node: int, group_id: str, owners: dict) -> dict | None:
    """A KIP-848 group by ConsumerGroupDescribe; None if there is none (or the broker does
    not speak the API: it closes the connection, as Kafka does with unknown APIs)."""
    R = messages.ConsumerGroupDescribeRequest
    try:
        response = admin.request(node, ApiKey.CONSUMER_GROUP_DESCRIBE, R(group_ids=[group_id]))
    except OSError:
        return None
    (g,) = response.groups
    if g.error_code:
        return None  # GROUP_ID_NOT_FOUND: a classic group's id, or none at all
    members = []
    for m in g.members:
        members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host})
        for tp in m.assignment.topic_partitions if m.assignment is not None else ():
            for p in tp.partitions:
                owners[(tp.topic_name, p)] = m.member_id
    return {
        "state": g.group_state,
        "protocol_type": "consumer",
        "protocol": g.assignor_name,
        "members": members,
        "owners": owners,
    }


def describe(admin: AdminClient, group_id: str) -> dict:
    """A group as a dict: state, protocol, members, offsets (committed, log end, lag)."""
    node = admin.coordinator(group_id)
    info = _membership(admin, node, group_id)
    owners = info.pop("owners")
    committed = _committed(admin, node, group_id)
    ends = _offsets(admin, list(committed), LATEST)
    return {
        "group": group_id,
        **info,
        "coordinator": node,
        "offsets": [
            {
                "topic": t,
                "partition": p,
                "committed_offset": offset,
                "log_end_offset": ends.get((t, p)),
                "lag": max(0, ends[(t, p)] - offset) if (t, p) in ends else None,
                "member_id": owners.get((t, p)),
            }
            for (t, p), offset in sorted(committed.items())
        ],
    }


def _assignment(protocol_type: str, data: bytes | None) -> list[tuple[str, list[int]]]:
    """A consumer-protocol member's assigned partitions (nothing for other protocols)."""
    if protocol_type != "consumer" or not data or len(data) < 2:
        return []
    version = int.from_bytes(data[:2], "big", signed=True)
    try:
        a = decode_message(
            messages.ConsumerProtocolAssignment, min(max(version, 0), 3), data, 2, exact=False
        )
    except Exception:
        return []  # not the consumer protocol's layout: shown without owners
    return [(x.topic, list(x.partitions)) for x in a.assigned_partitions]


def _committed(admin: AdminClient, node: int, group_id: str) -> dict[tuple[str, int], int]:
    R = messages.OffsetFetchRequest
    request = R(groups=[R.OffsetFetchRequestGroup(group_id=group_id, topics=None)])
    (g,) = admin.request(node, ApiKey.OFFSET_FETCH, request).groups
    check(g.error_code, group_id)
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in g.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def _offsets(admin: AdminClient, wanted: list[tuple[str, int]], timestamp: int) -> dict:
    """Offsets at ``timestamp`` of the partitions that exist (and have a leader)."""
    names = sorted({t for t, _ in wanted})
    if not names:
        return {}
    leaders = {}
    for t in admin.metadata(names).topics:
        for p in t.partitions:
            if (t.name, p.partition_index) in wanted and p.leader_id >= 0:
                leaders[(t.name, p.partition_index)] = p.leader_id
    return admin.list_offsets(leaders, timestamp) if leaders else {}


def _describe(admin: AdminClient, args) -> int:
    groups = [describe(admin, g) for g in args.groups]
    if args.json:
        as_json(groups)
        return 0
    for i, g in enumerate(groups):
        if i:
            print()
        print(
            f"group {g['group']}: {g['state']}, {len(g['members'])} member(s), "
            f"protocol {g['protocol'] or '-'}, coordinator {g['coordinator']}"
        )
        if g["offsets"]:
            table(
                g["offsets"],
                ["topic", "partition", "committed_offset", "log_end_offset", "lag", "member_id"],
            )
        if g["members"]:
            table(g["members"], ["member_id", "client_id", "host"])
    return 0


def _targets(admin: AdminClient, args, committed: dict) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    wanted = []
    for item in args.topic:
        name, _, parts = item.partition(":")
        if parts:
            wanted += [(name, int(p)) for p in parts.split(",")]
            continue
        (t,) = admin.metadata([name]).topics
        check(t.error_code, name)
        wanted += [(name, p.partition_index) for p in t.partitions]
    return sorted(set(wanted))


def _reset(admin: AdminClient, args) -> int:
    group_id = args.group
    node = admin.coordinator(group_id)
    info = _membership(admin, node, group_id)
    if info["state"] not in INACTIVE or info["members"]:
        raise ValueError(
            f"group {group_id} is {info['state']} with {len(info['members'])} member(s); "
            "offsets can only be reset while it has none (stop its consumers first)"
        )
    committed = _committed(admin, node, group_id)
    targets = _targets(admin, args, committed)
    starts = _offsets(admin, targets, EARLIEST)
    ends = _offsets(admin, targets, LATEST)
    plan = []
    for key in targets:
        if key not in ends:
            raise AdminError(3, f"{key[0]}-{key[1]}")  # UNKNOWN_TOPIC_OR_PARTITION
        if args.to_earliest:
            offset = starts[key]
        elif args.to_latest:
            offset = ends[key]
        elif args.to_offset is not None:
            offset = args.to_offset
        else:
            offset = committed.get(key, ends[key]) + args.shift_by
        offset = min(max(offset, starts[key]), ends[key])
        plan.append({"topic": key[0], "partition": key[1], "new_offset": offset})
    if args.execute:
        R = messages.OffsetCommitRequest
        by_topic: dict[str, list] = {}
        for row in plan:
            by_topic.setdefault(row["topic"], []).append(
                R.OffsetCommitRequestPartition(
                    partition_index=row["partition"], committed_offset=row["new_offset"]
                )
            )
        request = R(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                R.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()
            ],
        )
        for t in admin.request(node, ApiKey.OFFSET_COMMIT, request).topics:
            for p in t.partitions:
                check(p.error_code, f"{t.name}-{p.partition_index}")
    if args.json:
        as_json({"group": group_id, "executed": args.execute, "offsets": plan})
    else:
        table(plan, ["topic", "partition", "new_offset"])
        if not args.execute:
            print("(dry run: add --execute to commit these offsets)")
    return 0


def _delete(admin: AdminClient, args) -> int:
    for group_id in args.groups:
        node = admin.coordinator(group_id)
        response = admin.request(
            node, ApiKey.DELETE_GROUPS, messages.DeleteGroupsRequest(groups_names=[group_id])
        )
        for r in response.results:
            check(r.error_code, r.group_id)
    if args.json:
        as_json({"deleted": args.groups})
    else:
        print("deleted " + " ".join(args.groups))
    return 0
