"""Share sessions: which partitions a share consumer fetches from, kept between its ShareFetch
requests (KIP-932).

How this works
--------------
A session belongs to one member of one share group, on one connection. ShareFetch with epoch
0 opens it with the partitions named (an older session of the member is replaced); each later
request must carry the session's current epoch, may add partitions and forget others, and
moves the epoch on (1, 2, ... wrapping to 1); epoch -1 is the last request, after which the
session is gone. ShareAcknowledge takes part in the same sequence without changing the
partitions. A wrong epoch gets INVALID_SHARE_SESSION_EPOCH, a missing session
SHARE_SESSION_NOT_FOUND, as in Kafka.

When a session ends (epoch -1, replaced, or its connection closes) the records its member
holds on the session's partitions go back (``on_end``), so a consumer that dies does not keep
them until their locks run out. At most ``group.share.max.share.sessions`` sessions exist;
past that a new one gets SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.protocol import ErrorCode

FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class ShareSession:
    __slots__ = ("group_id", "member_id", "epoch", "partitions", "connection")

    def __init__(self, group_id: str, member_id: str, partitions, connection) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = 1  # the epoch the next request must carry
        self.partitions: dict[tuple, None] = dict.fromkeys(partitions)  # (topic id, index)
        self.connection = connection  # the client's Session (security/session.py)


class ShareSessionError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(ErrorCode(code).name)
        self.code = code


class ShareSessions:
    def __init__(self, max_sessions: int, on_end: Callable[[ShareSession], None]) -> None:
        self.max_sessions = max_sessions
        self.on_end = on_end
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, added, forgotten, connection):
        """The session a ShareFetch uses, opened, updated or checked by its epoch; raises
        ShareSessionError. A final request (-1) gets the session, still open."""
        key = (group_id, member_id)
        if epoch == 0:
            old = self.sessions.pop(key, None)
            if old is not None:
                self.on_end(old)
            elif len(self.sessions) >= self.max_sessions:
                raise ShareSessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, added, connection)
            connection.when_closed(self._connection_closed)
            return session
        session = self._current(key, epoch)
        if epoch != FINAL_EPOCH:
            for tp in forgotten:
                session.partitions.pop(tp, None)
            for tp in added:
                session.partitions.setdefault(tp, None)
            session.epoch = next_epoch(epoch)
        return session

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge uses (epoch 0 cannot open one)."""
        if epoch == 0:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session = self._current((group_id, member_id), epoch)
        if epoch != FINAL_EPOCH:
            session.epoch = next_epoch(epoch)
        return session

    def end(self, session: ShareSession) -> None:
        """After a final request: the session goes, with the records its member holds."""
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
            self.on_end(session)

    def _current(self, key: tuple[str, str], epoch: int) -> ShareSession:
        session = self.sessions.get(key)
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        return session

    def _connection_closed(self, connection) -> None:
        for session in [s for s in self.sessions.values() if s.connection is connection]:
            self.end(session)

    def close(self) -> None:
        self.sessions.clear()
