"""A small blocking Kafka admin client over the project's codec, for ``headrace topics`` and
``headrace groups``.

How this works
--------------
``AdminClient(bootstrap_servers)`` connects (PLAINTEXT) to the first bootstrap address that
answers and asks it for Metadata; afterwards it opens one connection per broker it needs,
by the addresses Metadata gave. ``request(node, api_key, message)`` sends one request at the
version in ``VERSIONS`` (chosen so that Apache Kafka 3.0 and later, and Headrace, all speak
them) over that broker's ``BlockingConnection`` (blocking.py: the framing, correlation ids and
bounds of ``headrace.protocol.client``) and returns the decoded response. Routing is Kafka's:
topic changes go to the controller, a group's requests to its coordinator (FindCoordinator),
ListOffsets to each partition's leader, ListGroups to every broker. Response frames are
bounded (``MAX_RESPONSE_BYTES``) before they are read; an error code in an answer raises
``AdminError`` with Kafka's error name and the broker's message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from headrace.protocol import ApiKey, ErrorCode, messages

from .admin_request import AdminError
from .blocking import BlockingConnection

VERSIONS = {
    ApiKey.METADATA: 12,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.LIST_GROUPS: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.FIND_COORDINATOR: 4,
    ApiKey.OFFSET_FETCH: 8,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,  # KIP-848 groups (Kafka 3.7+; older brokers close)
}
MAX_RESPONSE_BYTES = 64 << 20
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
TOPIC_RESOURCE = 2  # DescribeConfigs / IncrementalAlterConfigs resource type
CLIENT_ID = "headrace-admin"


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int


def check(error_code: int, message: str | None = None) -> None:
    if error_code != ErrorCode.NONE:
        raise AdminError(error_code, message or "")


class AdminClient:
    def __init__(self, bootstrap_servers: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._connections: dict[int, BlockingConnection] = {}
        self.nodes: dict[int, Node] = {}
        self.controller_id = -1
        failures = []
        for address in bootstrap_servers.split(","):
            host, _, port = address.strip().rpartition(":")
            try:
                conn = self._connect(host, int(port))
            except (OSError, ValueError) as e:
                failures.append(f"{address.strip()}: {e}")
                continue
            self._connections[-1] = conn
            self.metadata([])  # learn the brokers and the controller
            return
        raise ConnectionError("cannot reach " + "; ".join(failures))

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, node: int, api_key: int, message):
        """Send ``message`` to broker ``node`` (-1: the bootstrap broker)."""
        conn = self._connections.get(node)
        if conn is None:
            target = self.nodes.get(node)
            if target is None:
                raise ConnectionError(f"broker {node} is not in the cluster's metadata")
            conn = self._connections[node] = self._connect(target.host, target.port)
        try:
            return conn.request(api_key, VERSIONS[ApiKey(api_key)], message)
        except OSError:  # (ConnectionError too) the next request to ``node`` reconnects
            conn.close()
            if self._connections.get(node) is conn and node != -1:
                del self._connections[node]
            raise

    def _connect(self, host: str, port: int) -> BlockingConnection:
        return BlockingConnection.connect(
            host, port, self.timeout, client_id=CLIENT_ID, max_response_bytes=MAX_RESPONSE_BYTES
        )

    @property
    def controller(self) -> int:
        return self.controller_id if self.controller_id in self.nodes else -1

    # metadata and offsets ----------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None):
        """Metadata for ``topics`` (None: every topic); refreshes the brokers."""
        R = messages.MetadataRequest
        wanted = None if topics is None else [R.MetadataRequestTopic(name=t) for t in topics]
        request = R(topics=wanted, allow_auto_topic_creation=False)
        response = self.request(-1, ApiKey.METADATA, request)
        self.nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in response.brokers}
        self.controller_id = response.controller_id
        return response

    def list_offsets(self, partitions: dict[tuple[str, int], int], timestamp: int) -> dict:
        """(topic, partition) -> offset at ``timestamp`` (EARLIEST, LATEST), asked of each
        partition's leader (``partitions`` maps each to its leader)."""
        R = messages.ListOffsetsRequest
        by_leader: dict[int, dict[str, list[int]]] = {}
        for (topic, index), leader in partitions.items():
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(index)
        found = {}
        for leader, topics in by_leader.items():
            request = R(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    R.ListOffsetsTopic(
                        name=t,
                        partitions=[
                            R.ListOffsetsPartition(partition_index=i, timestamp=timestamp)
                            for i in sorted(indexes)
                        ],
                    )
                    for t, indexes in topics.items()
                ],
            )
            for t in self.request(leader, ApiKey.LIST_OFFSETS, request).topics:
                for p in t.partitions:
                    check(p.error_code, f"{t.name}-{p.partition_index}")
                    found[(t.name, p.partition_index)] = p.offset
        return found

    def coordinator(self, group_id: str) -> int:
        R = messages.FindCoordinatorRequest
        response = self.request(
            -1, ApiKey.FIND_COORDINATOR, R(key_type=0, coordinator_keys=[group_id])
        )
        (found,) = response.coordinators
        check(found.error_code, found.error_message)
        if found.node_id not in self.nodes:
            self.nodes[found.node_id] = Node(found.node_id, found.host, found.port)
        return found.node_id
