"""Small JSON documents the whole broker (or the whole cluster) shares: the ACLs, the client
quotas, the finalized feature levels.

How this works
--------------
A document has a name (``acls``) and lives in one of two places, as the cluster metadata
makes it (``document(name)``). A broker on its own keeps it in its data directory as
``<name>.json`` (``FileDocument``), replaced atomically (temporary file, fsync, rename,
directory fsync) in a thread, never on the event loop. A broker of a cluster
(``zookeeper.connect``) keeps it in the znode ``/<name>`` (``ZnodeDocument``): every change
is a compare-and-set on the znode's version (read, change, write; again if another broker
wrote in between), and every broker watches the znode and applies what it holds, so a change
made at one broker reaches the others within ZooKeeper's notification delay.

Both have one surface. ``load`` (at start-up, in a thread) returns the stored value (None
when there is none); ``where`` says where it is kept. ``watch(apply)`` calls ``apply(value)``
on the event loop with every new value: after this broker's changes, and in a cluster
whenever the znode changes (a notification older than the last value applied, by the
znode's modification zxid, is dropped). ``change(fn)`` computes the new value from the
current one (``fn`` may raise to refuse), stores it, applies it here at once through the
``apply`` given, and returns it.
A document is at most ``MAX_BYTES`` (ZooKeeper's default znode limit is 1 MiB); its owners
bound what they put in it.

``follow(document, apply, what)`` watches a document for an owner whose ``apply`` raises one
of ``UNREADABLE`` for a value it cannot read: such a value is logged and the owner keeps what
it had (at start-up the broker reads each document itself and refuses to start instead).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from headrace.storage import replace_file

if TYPE_CHECKING:
    from .zk_client import ZkClient

log = logging.getLogger("headrace")

MAX_BYTES = 1000 * 1024
# what an owner's ``apply`` raises for a value it cannot read (``follow``)
UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


class DocumentTooLarge(ValueError):
    pass


class FileDocument:
    """A document of a broker on its own: ``<name>.json`` in the data directory."""

    def __init__(self, name: str, data_dir: Path) -> None:
        self.name = name
        self.path = data_dir / f"{name}.json"
        self.where = str(self.path)
        self._apply: Callable[[Any], None] | None = None
        self._lock = asyncio.Lock()

    def load(self) -> Any:
        """(In a thread.) The stored value, or None."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None

    def watch(self, apply: Callable[[Any], None]) -> None:
        """``apply`` is called with every new value (this broker's ``change``)."""
        self._apply = apply

    async def change(self, fn: Callable[[Any], Any]) -> Any:
        """Store ``fn(current value)`` and apply it; raises what ``fn`` raises, or OSError
        when it cannot be stored (nothing changes then)."""
        async with self._lock:
            value = fn(await asyncio.to_thread(self.load))
            data = _encode(value)
            await asyncio.to_thread(replace_file, self.path, data, mode=0o600)
            if self._apply is not None:
                self._apply(value)
            return value


class ZnodeDocument:
    """A document of a cluster: the znode ``/<name>``."""

    def __init__(self, name: str, zk_client: ZkClient) -> None:
        self.name = name
        self.znode = f"/{name}"
        self.where = f"{self.znode} in ZooKeeper"
        self.zk_client = zk_client
        self._apply: Callable[[Any], None] | None = None
        self._zxid = -1  # the modification zxid of the znode version last applied
        self._lock = asyncio.Lock()

    def load(self) -> Any:
        """(In a thread.) The stored value, or None."""
        try:
            data, stat = self.zk_client.zk.get(self.znode)
        except NoNodeError:
            return None
        self._zxid = stat.mzxid
        return json.loads(data) if data else None

    def watch(self, apply: Callable[[Any], None]) -> None:
        """``apply`` is called with every new value (from the watch, and after ``change``)."""
        self._apply = apply
        loop = asyncio.get_running_loop()

        def changed(data, stat, *_) -> None:  # kazoo's thread
            if data is not None and stat is not None:
                loop.call_soon_threadsafe(self._changed, data, stat.mzxid)

        self.zk_client.zk.DataWatch(self.znode, changed)

    def _changed(self, data: bytes, zxid: int) -> None:
        if zxid <= self._zxid or self._apply is None:
            return
        self._zxid = zxid
        self._apply(json.loads(data) if data else None)

    async def change(self, fn: Callable[[Any], Any]) -> Any:
        """Store ``fn(current value)`` by compare-and-set (the znode made if missing) and
        apply it; raises what ``fn`` raises, or kazoo's errors when it cannot be stored
        (nothing changes then)."""
        async with self._lock:
            value = None

            def change(data: bytes, _) -> bytes:
                nonlocal value
                value = fn(json.loads(data) if data else None)
                return _encode(value)

            _, stat = await self.zk_client.update(self.znode, change, initial=b"")
            if stat.mzxid <= self._zxid:
                return value
            self._zxid = stat.mzxid
            if self._apply is not None:
                self._apply(value)
            return value


Document = FileDocument | ZnodeDocument


def follow(document: Document, apply: Callable[[Any], None], what: str) -> None:
    """``apply`` every new value of ``document``; one it cannot read (``UNREADABLE``) is
    logged, naming ``what`` it holds, and the owner keeps the state it had."""

    def changed(value: Any) -> None:
        try:
            apply(value)
        except UNREADABLE:
            log.exception("%s in %s unreadable; the ones known are kept", what, document.where)

    document.watch(changed)


def _encode(value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":")).encode()
    if len(data) > MAX_BYTES:
        raise DocumentTooLarge(f"{len(data)} bytes, over {MAX_BYTES}")
    return data
