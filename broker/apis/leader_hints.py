"""KIP-951's leader hints: a NOT_LEADER_OR_FOLLOWER answer names the current leader.

In a cluster, a Produce (v10+) or Fetch (v12+) partition answered NOT_LEADER_OR_FOLLOWER
carries ``current_leader`` (the leader's id and epoch, from ZooKeeper), and the response
lists those leaders' endpoints (``node_endpoints``: Produce v10+, Fetch v16+), so a client
goes straight to the new leader without a Metadata round trip first. Nothing is added when
the leader is unknown (its broker is down) or is this broker (fenced: it does not know yet).
"""

from __future__ import annotations

from headrace.protocol import ErrorCode


class LeaderHints:
    """Collects the hints of one response. ``message`` is the response class (its nested
    LeaderIdAndEpoch and NodeEndpoint structs are used)."""

    def __init__(
        self, broker, session, message, leader_version: int, endpoints_version: int, version: int
    ):
        self.broker = broker
        self.listener = session.listener  # the endpoints named are on the client's listener
        self.cluster = broker.cluster
        self.with_leaders = version >= leader_version
        self.message = message
        self.with_endpoints = version >= endpoints_version
        self.leaders: set[int] = set()

    def add(self, partition_response, topic: str, index: int) -> None:
        """Name the leader of ``topic``/``index`` on a NOT_LEADER_OR_FOLLOWER answer."""
        cluster = self.cluster
        if (
            not self.with_leaders
            or partition_response.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER
        ):
            return
        leader = cluster.leader(topic, index)
        if leader < 0 or leader == cluster.node_id:
            return
        partition_response.current_leader = self.message.LeaderIdAndEpoch(
            leader_id=leader, leader_epoch=cluster.leader_epoch(topic, index)
        )
        self.leaders.add(leader)

    def endpoints(self) -> list:
        """The ``node_endpoints`` of the response: where the named leaders listen."""
        if not self.with_endpoints:
            return []
        brokers = self.broker.brokers(self.listener)
        return [
            self.message.NodeEndpoint(node_id=b, host=e.host, port=e.port, rack=e.rack)
            for b in sorted(self.leaders)
            if (e := brokers.get(b)) is not None
        ]
