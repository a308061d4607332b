"""The znodes of cluster mode: their paths and what they hold, as Kafka's ``ZkData`` keeps
them apart from the operations on them (zk_client.py, cluster.py).

Under the chroot of ``zookeeper.connect`` (Kafka's ZooKeeper-era map, simplified):

  /cluster/id                  the cluster id, made by the first broker
  /brokers/ids/<id>            ephemeral, one per live broker, as Kafka writes it:
                               {"endpoints": ["NAME://host:port", ...],
                               "listener_security_protocol_map": {NAME: PROTOCOL}, "rack",
                               "features": {name: {"min_version", "max_version"}} (the
                               feature versions it supports), and "host"/"port" of a
                               listener named PLAINTEXT (else null/-1)}
  /brokers/topics/<name>       a topic: {"topic_id", "replicas": [[ids] per partition],
                               "leader_epochs": [...], "configs": {...}, and while partitions
                               move "reassigning": {index: {"target", "adding", "removing"}},
                               and "manual": [indexes placed by hand]}
  /controller                  kazoo's election recipe: the first contender is the controller
  /latest_producer_id_block    the first producer id not yet handed out, taken by CAS
  /features                    the finalized feature levels (features.py), by CAS
  /cluster/members             the member brokers (controller.py): {"members": {id: {"rack"}},
                               "removed": [ids]}, by CAS
  /brokers/confirmed/<id>      the session whose registration of broker <id> the controller
                               has confirmed (written by the controller)
  /brokers/shutting_down/<id>  ephemeral: broker <id> is stopping cleanly and asks the
                               controller to move its leaderships away (controlled shutdown)

A partition's state znode (``/brokers/topics/<name>/partitions/<p>/state``) is
partition_state.py's.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

BROKERS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CLUSTER_ID = "/cluster/id"
PRODUCER_IDS = "/latest_producer_id_block"
MEMBERS = "/cluster/members"
NO_MEMBERS = b'{"members": {}, "removed": []}'  # what MEMBERS starts as
CONFIRMED = "/brokers/confirmed"
SHUTTING_DOWN = "/brokers/shutting_down"


@dataclass(frozen=True)
class Endpoint:
    """A broker's address on one listener (``host``, ``port``), its rack, every listener
    it registered: (name, security protocol, advertised host, port), the feature versions it
    supports: (name, min, max), and the URL of its schema registry ("": none; written as
    ``schema_registry_url``, a field Kafka's readers of the znode skip)."""

    host: str
    port: int
    rack: str | None = None
    listeners: tuple[tuple[str, str, str, int], ...] = ()
    features: tuple[tuple[str, int, int], ...] = ()
    registry: str = ""

    def on(self, listener: str) -> Endpoint | None:
        """This broker's address on the listener named ``listener``; None if it has none."""
        for name, _, host, port in self.listeners:
            if name == listener:
                return Endpoint(host, port, self.rack, self.listeners, self.features, self.registry)
        return None

    def encode(self) -> bytes:
        plain = next((x for x in self.listeners if x[0] == "PLAINTEXT"), None)
        return json.dumps(
            {
                "version": 5,
                "host": plain[2] if plain else None,
                "port": plain[3] if plain else -1,
                "endpoints": [f"{n}://{_bracket(h)}:{p}" for n, _, h, p in self.listeners],
                "listener_security_protocol_map": {n: proto for n, proto, _, _ in self.listeners},
                "rack": self.rack,
                "features": {
                    n: {"min_version": lo, "max_version": hi} for n, lo, hi in self.features
                },
                "jmx_port": -1,
                **({"schema_registry_url": self.registry} if self.registry else {}),
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes, listener: str) -> Endpoint | None:
        """A registration read from ZooKeeper, addressed on ``listener`` (the inter-broker
        one); None if it has no such listener."""
        d = json.loads(data)
        protocols = d.get("listener_security_protocol_map") or {}
        found = []
        for text in d.get("endpoints") or ():
            name, _, address = text.partition("://")
            host, _, port = address.rpartition(":")
            found.append((name, protocols.get(name, name), host.strip("[]"), int(port)))
        if not found and d.get("host") is not None:  # registered by an older Headrace
            found.append(("PLAINTEXT", "PLAINTEXT", d["host"], int(d["port"])))
        features = tuple(
            (n, int(r["min_version"]), int(r["max_version"]))
            for n, r in sorted((d.get("features") or {}).items())
        )
        registry = str(d.get("schema_registry_url") or "")
        return cls("", 0, d.get("rack"), tuple(found), features, registry).on(listener)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass
class TopicRecord:
    """A topic as the cluster knows it (the znode's content)."""

    topic_id: uuid.UUID
    replicas: list[list[int]]  # per partition, the leader first
    leader_epochs: list[int]
    configs: dict[str, Any] = field(default_factory=dict)
    version: int = -1  # the znode's version: writes compare-and-set on it
    mzxid: int = 0  # the znode's last modification: older watch events are dropped
    created_ms: int = 0  # when the znode was made (a namesake of a deleted topic is newer)
    # partition -> {"target": [ids], "adding": [ids], "removing": [ids]}: moves under way
    reassigning: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    # partitions placed by hand (CreateTopics assignments, reassignments): the controller
    # leaves them where they are
    manual: set[int] = field(default_factory=set)

    def assigned(self, index: int) -> list[int]:
        """The brokers holding a replica of partition ``index``: its replicas, and during a
        move the adding ones too (Kafka's RS = ORS + TRS)."""
        current = self.replicas[index]
        move = self.reassigning.get(index)
        if move is None:
            return current
        return current + [b for b in move["adding"] if b not in current]

    def placing(self) -> list[list[int]]:
        """Each partition's brokers as placement counts them: a moving one's target."""
        return [
            list(self.reassigning[i]["target"]) if i in self.reassigning else r
            for i, r in enumerate(self.replicas)
        ]

    def encode(self) -> bytes:
        d: dict[str, Any] = {
            "topic_id": str(self.topic_id),
            "replicas": self.replicas,
            "leader_epochs": self.leader_epochs,
            "configs": self.configs,
        }
        if self.reassigning:
            d["reassigning"] = {str(i): m for i, m in sorted(self.reassigning.items())}
        if self.manual:
            d["manual"] = sorted(self.manual)
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, stat) -> TopicRecord:
        d = json.loads(data)
        return cls(
            uuid.UUID(d["topic_id"]),
            [list(r) for r in d["replicas"]],
            list(d["leader_epochs"]),
            dict(d["configs"]),
            stat.version,
            stat.mzxid,
            stat.ctime,
            {
                int(i): {k: list(v) for k, v in m.items()}
                for i, m in d.get("reassigning", {}).items()
            },
            set(d.get("manual", ())),
        )
