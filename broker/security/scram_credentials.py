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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from headrace.storage import replace_file

if TYPE_CHECKING:
    from headrace.broker.cluster.cluster import Cluster

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
    """Every user's SCRAM credentials (see the module docstring)."""

    def __init__(self, data_dir: Path, cluster: Cluster | None = None) -> None:
        self.path = data_dir / FILE
        self.cluster = cluster
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = asyncio.Lock()
        self._applied = -1  # the sequence number of the last change notification applied

    def load(self) -> None:
        """Read the file (at start-up, in a thread); no file: no users. In a cluster: every
        user in ZooKeeper (once the cluster has started)."""
        if self.cluster is not None:
            self._load_cluster()
            return
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        self.users = {
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

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    async def change(
        self,
        upserts: dict[tuple[str, str], ScramCredential],
        deletions: set[tuple[str, str]],
    ) -> None:
        """Apply ``upserts`` and ``deletions`` (keyed by (user, mechanism)) to the file, then
        to the table. Raises OSError when the file cannot be written (nothing changes)."""
        if self.cluster is not None:
            async with self._lock:
                try:
                    found = await asyncio.to_thread(self._change_cluster, upserts, deletions)
                except KazooException as e:
                    raise OSError(f"cannot write the credentials to ZooKeeper: {e!r}") from None
                self._apply(found)
            return
        async with self._lock:
            users = {user: dict(mechanisms) for user, mechanisms in self.users.items()}
            for user, mechanism in deletions:
                users.get(user, {}).pop(mechanism, None)
                if user in users and not users[user]:
                    del users[user]
            for (user, mechanism), value in upserts.items():
                users.setdefault(user, {})[mechanism] = value
            await asyncio.to_thread(self._write, users)
            self.users = users

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
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
                for user, mechanisms in sorted(users.items())
            },
        }
        replace_file(self.path, json.dumps(data, indent=1).encode(), mode=0o600)

    # in a cluster ----------------------------------------------------------------------------

    def _read_user(self, user: str) -> dict[str, ScramCredential]:
        """(In a thread.) A user's credentials in ZooKeeper ({}: none)."""
        assert self.cluster is not None
        try:
            data, _ = self.cluster.zk.get(f"{USERS}/{_znode(user)}")
        except NoNodeError:
            return {}
        config = json.loads(data).get("config") or {}
        return {m: from_kafka_text(config[m]) for m in MECHANISM_TYPES if m in config}

    def _load_cluster(self) -> None:
        assert self.cluster is not None
        zk = self.cluster.zk
        zk.ensure_path(USERS)
        zk.ensure_path(CHANGES)
        changes = zk.get_children(CHANGES)  # before the users: nothing older is replayed
        self._applied = max((_sequence(name) for name in changes), default=-1)
        users = {}
        for user in map(unquote, zk.get_children(USERS)):
            found = self._read_user(user)
            if found:
                users[user] = found
        self.users = users

    def watch(self) -> None:
        """(Cluster, on the event loop, after ``load``.) Follow the change notifications."""
        assert self.cluster is not None
        loop = asyncio.get_running_loop()

        def changed(children) -> None:  # kazoo's thread
            if children:
                loop.call_soon_threadsafe(self._notified, list(children))

        self.cluster.zk.ChildrenWatch(CHANGES, changed)

    def _notified(self, children: list[str]) -> None:
        task = asyncio.ensure_future(self._follow(children))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _follow(self, children: list[str]) -> None:
        async with self._lock:
            try:
                found = await asyncio.to_thread(self._read_changes, children)
            except (KazooException, ValueError, KeyError) as e:
                log.warning("cannot follow the SCRAM credentials in ZooKeeper: %r", e)
                return
            self._apply(found)

    def _apply(self, found: dict[str, dict[str, ScramCredential]]) -> None:
        users = dict(self.users)
        for user, credentials in found.items():
            if credentials:
                users[user] = credentials
            else:
                users.pop(user, None)
        self.users = users

    def _read_changes(self, children: list[str]) -> dict[str, dict[str, ScramCredential]]:
        """(In a thread.) The users named by notifications not applied yet, re-read; old
        notifications deleted."""
        assert self.cluster is not None
        zk = self.cluster.zk
        found: dict[str, dict[str, ScramCredential]] = {}
        now_ms = time.time() * 1000
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
        return found

    def _change_cluster(
        self,
        upserts: dict[tuple[str, str], ScramCredential],
        deletions: set[tuple[str, str]],
    ) -> dict[str, dict[str, ScramCredential]]:
        """(In a thread.) Each user's znode by compare-and-set, then one notification each;
        the users' credentials as written."""
        assert self.cluster is not None
        zk = self.cluster.zk
        written: dict[str, dict[str, ScramCredential]] = {}
        touched = sorted({u for u, _ in upserts} | {u for u, _ in deletions})
        for user in touched:
            path = f"{USERS}/{_znode(user)}"
            while True:
                try:
                    data, stat = zk.get(path)
                    document = json.loads(data) if data else {}
                except NoNodeError:
                    stat, document = None, {}
                config = dict(document.get("config") or {})
                for (u, mechanism), value in upserts.items():
                    if u == user:
                        config[mechanism] = kafka_text(value)
                for u, mechanism in deletions:
                    if u == user:
                        config.pop(mechanism, None)
                encoded = json.dumps({"version": 1, "config": config}).encode()
                try:
                    if stat is None:
                        if config:
                            zk.create(path, encoded, makepath=True)
                    elif config:
                        zk.set(path, encoded, version=stat.version)
                    else:
                        zk.delete(path, version=stat.version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue  # another broker wrote in between: again
                break
            written[user] = {m: from_kafka_text(t) for m, t in config.items()}
            entity_path = f"users/{_znode(user)}"
            notification = json.dumps({"version": 2, "entity_path": entity_path}).encode()
            zk.create(f"{CHANGES}/{CHANGE_PREFIX}", notification, sequence=True, makepath=True)
        return written


def _znode(user: str) -> str:
    """A user's znode name: URL-encoded, as Kafka's Sanitizer does."""
    return quote(user, safe="")


def _sequence(name: str) -> int:
    try:
        return int(name[len(CHANGE_PREFIX) :])
    except ValueError:
        return -1
