"""What the topic table tells of the partitions it opens, follows and drops: this broker's
role for each (``Roles``); in a cluster replication/'s replica manager, on a broker on its own
``LeaderOfAll``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .partition import Partition
    from .topic import Topic


class Roles(Protocol):
    """This broker's role for each partition (cluster mode: replication/replica_manager.py),
    as the topic table tells it of the partitions it opens and drops."""

    def opened(self, p: Partition) -> None: ...

    async def topic_applied(self, topic: Topic) -> None: ...

    async def forget(self, p: Partition) -> None: ...


class LeaderOfAll:
    """The roles of a broker on its own: it leads every partition it holds from the moment
    it opens it (``Partition.leader`` is True from the start), at leader epoch 0 for ever (the
    epoch its Metadata answers), which it stamps into every batch it stores as Kafka does, so
    that a consumer's epoch check (OffsetForLeaderEpoch) never sees a producer's own value."""

    def opened(self, p: Partition) -> None:
        p.leader_epoch = 0

    async def topic_applied(self, topic: Topic) -> None:
        pass

    async def forget(self, p: Partition) -> None:
        pass
