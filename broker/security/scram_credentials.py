"""SCRAM credentials, salted and iterated, kept in the data directory (or in ZooKeeper).

What is kept per user and mechanism is what RFC 5802 has the server keep: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"). Neither the password nor the salted password is stored:
AlterUserScramCredentials brings the salted password (the client salts and iterates), and it
is reduced to the two keys at once. The file, ``scram-credentials.json`` (mode 0600), is
replaced atomically (temporary file, fsync, rename, directory fsync) in a thread, never on
the event loop; the table in memory changes only once the file has.

In a cluster (``zookeeper.connect``) they live where Kafka's ZooKeeper-era brokers keep them,
so a user added at one broker logs in at every broker:

  /config/users/<user>               {"version": 1, "config": {"SCRAM-SHA-256":
                                     "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N"}}
  /config/changes/config_change_<n>  sequential: {"version": 2, "entity_path": "users/<user>"}

A change writes each user's znode (compare-and-set on its version; the znode goes when its
last credential does), then a change notification; every broker watches ``/config/changes``
and re-reads the users named by notifications newer than the last it applied (all users at
start). As Kafka's notification listener does, notifications older than
``NOTIFICATION_EXPIRY_S`` are deleted by whichever broker sees them, so they do not pile up.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from kazoo.exceptions import KazooException, NoNodeError

from headrace.storage import replace_file

if TYPE_CHECKING:
    from headrace.broker.cluster.zk_client import ZkClient

log = logging.getLogger("headrace.scram")

FILE = "scram-credentials.json"
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism type codes
MECHANISM_TYPES = {name: code for code, name in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds
MAX_USERS = 100_000  # a bound on the table (AlterUserScramCredentials beyond gets an error)
USERS = "/config/users"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
NOTIFICATION_EXPIRY_S = 15 * 60  # Kafka's


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash(mechanism: str) -> str:
    return {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]


def credential(mechanism: str, salt: bytes, salted_password: bytes, iterations: int):
    """The stored form of a salted password (see the module docstring)."""
    name = _hash(mechanism)
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), server_key, iterations)


def digest_size(mechanism: str) -> int:
    return hashlib.new(_hash(mechanism)).digest_size


def kafka_text(c: ScramCredential) -> str:
    """Kafka's string form of a credential (``ScramCredentialUtils.credentialToString``)."""
    b64 = base64.b64encode
    return (
        f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
        f"server_key={b64(c.server_key).decode()},iterations={c.iterations}"
    )


def from_kafka_text(text: str) -> ScramCredential:
    fields = dict(item.split("=", 1) for item in text.split(","))
    return ScramCredential(
        base64.b64decode(fields["salt"]),
        base64.b64decode(fields["stored_key"]),
        base64.b64decode(fields["server_key"]),
        int(fields["iterations"]),
    )


class ScramCredentials:
    """Every user's SCRAM credentials (see the module docstring), kept in ``store``: a
    ``ScramFile`` (a broker on its own) or ``ScramZnodes`` (a cluster)."""

    def __init__(self, store: ScramFile | ScramZnodes) -> None:
        self.store = store
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """(At start-up, in a thread; in a cluster once it has started.) Every user."""
        self.users = self.store.load()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    async def change(
        self,
        upserts: dict[tuple[str, str], ScramCredential],
        deletions: set[tuple[str, str]],
    ) -> None:
        """Apply ``upserts`` and ``deletions`` (keyed by (user, mechanism)) to the store, then
        to the table. Raises OSError when the store cannot be written (nothing changes)."""
        async with self._lock:
            found = await self.store.change(self.users, upserts, deletions)
            self._apply(found)

    def watch(self) -> None:
        """(On the event loop, after ``load``.) Follow the changes other brokers make."""
        self.store.watch(self._notified)

    def _notified(self, children: list[str]) -> None:
        task = asyncio.ensure_future(self._follow(children))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _follow(self, children: list[str]) -> None:
        async with self._lock:
            try:
                found = await asyncio.to_thread(self.store.read_changes, children)
            except (OSError, ValueError, KeyError) as e:
                log.warning("cannot follow the SCRAM credentials in %s: %r", self.store.where, e)
                return
            self._apply(found)

    def _apply(self, found: dict[str, dict[str, ScramCredential]]) -> None:
        """The users ``found`` ({}: none left) in place of what the table had of them."""
        users = dict(self.users)
        for user, credentials in found.items():
            if credentials:
                users[user] = credentials
            else:
                users.pop(user, None)
        self.users = users


Users = dict[str, dict[str, ScramCredential]]


def _changed(
    users: Users,
    upserts: dict[tuple[str, str], ScramCredential],
    deletions: set[tuple[str, str]],
) -> Users:
    """The users ``upserts`` and ``deletions`` touch, as they are after them ({}: none left)."""
    touched = {u for u, _ in upserts} | {u for u, _ in deletions}
    found = {user: dict(users.get(user, {})) for user in touched}
    for user, mechanism in deletions:
        found[user].pop(mechanism, None)
    for (user, mechanism), value in upserts.items():
        found[user][mechanism] = value
    return found


class ScramFile:
    """The credentials of a broker on its own: ``scram-credentials.json`` (mode 0600) in the
    data directory, replaced atomically."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE
        self.where = str(self.path)

    def load(self) -> Users:
        """(In a thread.) No file: no users."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {
            user: {
                mechanism: ScramCredential(
                    base64.b64decode(c["salt"]),
                    base64.b64decode(c["stored_key"]),
                    base64.b64decode(c["server_key"]),
                    int(c["iterations"]),
                )
                for mechanism, c in mechanisms.items()
            }
            for user, mechanisms in data["users"].items()
        }

    async def change(self, users: Users, upserts, deletions) -> Users:
        """The file with the change made to ``users`` (written in a thread); the users
        touched."""
        found = _changed(users, upserts, deletions)
        after = {u: c for u, c in {**users, **found}.items() if c}

        def text(b: bytes) -> str:
            return base64.b64encode(b).decode()

        data = {
            "version": 1,
            "users": {
                user: {
                    mechanism: {
                        "salt": text(c.salt),
                        "stored_key": text(c.stored_key),
                        "server_key": text(c.server_key),
                        "iterations": c.iterations,
                    }
                    for mechanism, c in sorted(mechanisms.items())
                }
                for user, mechanisms in sorted(after.items())
            },
        }
        encoded = json.dumps(data, indent=1).encode()
        await asyncio.to_thread(replace_file, self.path, encoded, mode=0o600)
        return found

    def watch(self, notified: Callable[[list[str]], None]) -> None:
        """No one else writes the file."""

    def read_changes(self, children: list[str]) -> Users:
        return {}


class ScramZnodes:
    """The credentials of a cluster: a znode per user and change notifications, as the
    module docstring says."""

    where = "ZooKeeper"

    def __init__(self, zk_client: ZkClient) -> None:
        self.zk_client = zk_client
        self.zk = zk_client.zk
        self._applied = -1  # the sequence number of the last change notification applied

    def _read_user(self, user: str) -> dict[str, ScramCredential]:
        """(In a thread.) A user's credentials in ZooKeeper ({}: none)."""
        try:
            data, _ = self.zk.get(f"{USERS}/{_znode(user)}")
        except NoNodeError:
            return {}
        config = (json.loads(data) if data else {}).get("config") or {}
        return {m: from_kafka_text(config[m]) for m in MECHANISM_TYPES if m in config}

    def load(self) -> Users:
        """(In a thread.) Every user."""
        zk = self.zk
        zk.ensure_path(USERS)
        zk.ensure_path(CHANGES)
        changes = zk.get_children(CHANGES)  # before the users: nothing older is replayed
        self._applied = max((_sequence(name) for name in changes), default=-1)
        users = {}
        for user in map(unquote, zk.get_children(USERS)):
            found = self._read_user(user)
            if found:
                users[user] = found
        return users

    def watch(self, notified: Callable[[list[str]], None]) -> None:
        """(On the event loop.) ``notified`` gets the change notifications there."""
        loop = asyncio.get_running_loop()

        def changed(children) -> None:  # kazoo's thread
            if children:
                loop.call_soon_threadsafe(notified, list(children))

        self.zk.ChildrenWatch(CHANGES, changed)

    def read_changes(self, children: list[str]) -> Users:
        """(In a thread.) The users named by notifications not applied yet, re-read; old
        notifications deleted."""
        zk = self.zk
        found: Users = {}
        now_ms = time.time() * 1000
        try:
            for name in sorted(children, key=_sequence):
                try:
                    data, stat = zk.get(f"{CHANGES}/{name}")
                except NoNodeError:
                    continue
                if now_ms - stat.ctime > NOTIFICATION_EXPIRY_S * 1000:
                    try:
                        zk.delete(f"{CHANGES}/{name}")
                    except NoNodeError:
                        pass
                if _sequence(name) <= self._applied:
                    continue
                self._applied = _sequence(name)
                entity, _, user = json.loads(data).get("entity_path", "").partition("/")
                if entity == "users" and user:
                    found[unquote(user)] = self._read_user(unquote(user))
        except KazooException as e:
            raise OSError(f"cannot read ZooKeeper: {e!r}") from None
        return found

    async def change(self, users: Users, upserts, deletions) -> Users:
        """Each user's znode by compare-and-set (made for a first credential, gone with its
        last), then one notification each; the users touched, as written."""
        try:
            return await self._change(upserts, deletions)
        except KazooException as e:
            raise OSError(f"cannot write the credentials to ZooKeeper: {e!r}") from None

    async def _change(self, upserts, deletions) -> Users:
        written: Users = {}
        touched = sorted({u for u, _ in upserts} | {u for u, _ in deletions})
        for user in touched:
            config: dict[str, str] = {}

            def change(data: bytes, _, user=user) -> bytes:
                nonlocal config
                config = dict((json.loads(data) if data else {}).get("config") or {})
                for (u, mechanism), value in upserts.items():
                    if u == user:
                        config[mechanism] = kafka_text(value)
                for u, mechanism in deletions:
                    if u == user:
                        config.pop(mechanism, None)
                return json.dumps({"version": 1, "config": config}).encode() if config else b""

            path = f"{USERS}/{_znode(user)}"
            await self.zk_client.update(path, change, initial=b"", delete_empty=True)
            written[user] = {m: from_kafka_text(t) for m, t in config.items()}
            entity_path = f"users/{_znode(user)}"
            notification = json.dumps({"version": 2, "entity_path": entity_path}).encode()
            await asyncio.to_thread(
                self.zk.create,
                f"{CHANGES}/{CHANGE_PREFIX}",
                notification,
                sequence=True,
                makepath=True,
            )
        return written


def _znode(user: str) -> str:
    """A user's znode name: URL-encoded, as Kafka's Sanitizer does."""
    return quote(user, safe="")


def _sequence(name: str) -> int:
    try:
        return int(name[len(CHANGE_PREFIX) :])
    except ValueError:
        return -1
