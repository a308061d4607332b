"""A partition's leader and ISR in ZooKeeper (Kafka's ZooKeeper-era ``state`` znode).

How this works
--------------
Each partition of a topic has its own znode,
``/brokers/topics/<topic>/partitions/<p>/state``, holding Kafka's fields as JSON::

    {"controller_epoch": 3, "leader": 2, "leader_epoch": 7, "isr": [2, 1, 3], "version": 1}

It is made with the topic (one ZooKeeper transaction with the topic's znode) and only ever
changed by compare-and-set on its znode version (``cas``): a writer that read an older version
is refused (``BadVersionError``) and must read again. Two kinds of writers exist:

* the controller (controller.py): leader elections (a new leader, the leader epoch + 1) and
  removing dead brokers from the ISR; its writes also check the ``/controller_epoch`` znode's
  version in the same transaction, so a controller that has been replaced writes nothing;
* the partition's leader (leader_state.py): ISR shrinks and expands, never the leader or the
  epoch. A leader whose write is refused re-reads the state: if the controller has moved the
  leadership meanwhile, it stops acting as leader.

Every broker watches every state znode (cluster.py) and keeps the newest in
``Cluster.states``; replica_manager.py turns it into this broker's role for each partition it
holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .znodes import TOPICS

CONTROLLER_EPOCH = "/controller_epoch"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, index: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{index}/state"


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's leader, leader epoch and in-sync replicas, as last read or written."""

    leader: int  # -1: none (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    version: int = -1  # the znode's version (compare-and-set)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "version": 1,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, version: int) -> PartitionState:
        d = json.loads(data)
        return cls(
            int(d["leader"]),
            int(d["leader_epoch"]),
            tuple(int(b) for b in d["isr"]),
            int(d.get("controller_epoch", 0)),
            version,
        )

    def with_isr(self, isr) -> PartitionState:
        return replace(self, isr=tuple(isr))


def initial(replicas: list[int], leader_epoch: int = 0, controller_epoch: int = 0):
    """The state of a new partition: its first replica leads, every replica is in sync."""
    return PartitionState(
        replicas[0] if replicas else -1, leader_epoch, tuple(replicas), controller_epoch
    )


def create_ops(txn, topic: str, states: dict[int, PartitionState], *, parent: bool) -> None:
    """Add to the kazoo transaction ``txn`` the creation of ``states``' znodes (and of the
    ``partitions`` znode when ``parent``)."""
    if parent:
        txn.create(partitions_path(topic), b"")
    for index, state in sorted(states.items()):
        txn.create(f"{partitions_path(topic)}/{index}", b"")
        txn.create(state_path(topic, index), state.encode())


def read(zk, topic: str, index: int) -> PartitionState | None:
    """(In a thread.) The state as ZooKeeper has it now; None when it has none."""
    try:
        data, stat = zk.get(state_path(topic, index))
    except NoNodeError:
        return None
    if not data:
        return None
    return PartitionState.decode(data, stat.version)


def cas(
    zk, topic: str, index: int, new: PartitionState, version: int, fence: int | None = None
) -> PartitionState:
    """(In a thread.) Write ``new`` if the znode is still at ``version``; with ``fence`` (the
    controller's ``/controller_epoch`` version) only if the controller epoch is unchanged too.
    Returns the state written (with its new version); raises ``BadVersionError`` when refused
    and ``NoNodeError`` when the partition is gone."""
    path = state_path(topic, index)
    if fence is None:
        stat = zk.set(path, new.encode(), version=version)
        return replace(new, version=stat.version)
    txn = zk.transaction()
    txn.check(CONTROLLER_EPOCH, fence)
    txn.set_data(path, new.encode(), version)
    results = txn.commit()
    for r in results:
        if isinstance(r, NoNodeError):
            raise NoNodeError(path)
        if isinstance(r, Exception):
            raise BadVersionError(path)
    return replace(new, version=results[1].version)


def ensure(zk, topic: str, index: int, state: PartitionState) -> PartitionState | None:
    """(In a thread.) Make the state znode of a partition that has none (a topic made before
    partition states existed, or grown without them); the state there afterwards (None when
    the topic is gone: nothing is made under a deleted topic)."""
    for path, data in (
        (partitions_path(topic), b""),
        (f"{partitions_path(topic)}/{index}", b""),
        (state_path(topic, index), state.encode()),
    ):
        try:
            zk.create(path, data)
        except NodeExistsError:
            pass
        except NoNodeError:
            return None
    return read(zk, topic, index)
