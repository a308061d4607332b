"""Member sessions, for every kind of group: classic, consumer, share and streams.

Each member carries ``deadline`` (event-loop time) and ``timer`` (one handle, or None).
``touch`` moves the deadline to now + the member's session timeout and arms the timer when
none is armed. When the timer fires it re-arms at the deadline if that has moved since (so
heartbeats never cancel or reschedule timers), also while the member is busy (e.g. waiting in
a JoinGroup or SyncGroup); otherwise the member's session has expired and ``expire(group,
member)`` is called. A member no longer in its group is forgotten.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class SessionTimers:
    def __init__(self, expire: Callable, timeout_ms: Callable, busy: Callable | None = None):
        self._expire = expire  # (group, member): the session ran out
        self._timeout_ms = timeout_ms  # (group, member) -> the member's session timeout
        self._busy = busy  # (member) -> True while its session must not expire

    def touch(self, group, member) -> None:
        loop = asyncio.get_running_loop()
        member.deadline = loop.time() + self._timeout_ms(group, member) / 1000
        if member.timer is None:
            member.timer = loop.call_at(member.deadline, self._check, group, member)

    def _check(self, group, member) -> None:
        member.timer = None
        if group.members.get(member.member_id) is not member:
            return
        now = asyncio.get_running_loop().time()
        busy = self._busy is not None and self._busy(member)
        if busy or member.deadline > now:
            at = max(member.deadline, now + self._timeout_ms(group, member) / 1000 if busy else 0)
            member.timer = asyncio.get_running_loop().call_at(at, self._check, group, member)
            return
        self._expire(group, member)
