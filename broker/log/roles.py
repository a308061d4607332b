"""What the topic table tells of the partitions it opens, follows and drops: this broker's
role for each (``Roles``) and the copies of partitions moving here (``MovesHere``); in a
cluster replication/'s replica manager and moves, on a broker on its own ``LeaderOfAll`` and
``NoMoves``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from headrace.broker.cluster.znodes import TopicRecord

    from .partition import Partition
    from .topic import Topic


class MovesHere(Protocol):
    """The copies of partitions moving to this broker (cluster mode: replication/moves.py),
    as the topic table tells them of its topics."""

    async def follow(self, topic: Topic, record: TopicRecord | None) -> None: ...

    async def take_copy(self, name: str, index: int) -> Partition | None: ...

    def forget(self, name: str, index: int) -> None: ...


class Roles(Protocol):
    """This broker's role for each partition (cluster mode: replication/replica_manager.py),
    as the topic table tells it of the partitions it opens and drops."""

    def opened(self, p: Partition) -> None: ...

    async def topic_applied(self, topic: Topic) -> None: ...

    async def forget(self, p: Partition) -> None: ...


class NoMoves:
    """A broker on its own: nothing moves to it."""

    async def follow(self, topic: Topic, record: TopicRecord | None) -> None:
        pass

    async def take_copy(self, name: str, index: int) -> Partition | None:
        return None

    def forget(self, name: str, index: int) -> None:
        pass


class LeaderOfAll:
    """The roles of a broker on its own: it leads every partition it holds from the moment
    it opens it (``Partition.leader`` is True from the start)."""

    def opened(self, p: Partition) -> None:
        pass

    async def topic_applied(self, topic: Topic) -> None:
        pass

    async def forget(self, p: Partition) -> None:
        pass
