"""SCRAM credentials, salted and iterated, kept in the data directory.

What is kept per user and mechanism is what RFC 5802 has the server keep: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"). Neither the password nor the salted password is stored:
AlterUserScramCredentials brings the salted password (the client salts and iterates), and it
is reduced to the two keys at once. The file, ``scram-credentials.json`` (mode 0600), is
replaced atomically (temporary file, fsync, rename, directory fsync) in a thread, never on
the event loop; the table in memory changes only once the file has.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

from headrace.storage import fsync_directory

FILE = "scram-credentials.json"
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism type codes
MECHANISM_TYPES = {name: code for code, name in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds
MAX_USERS = 100_000  # a bound on the table (AlterUserScramCredentials beyond gets an error)


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


class ScramCredentials:
    """Every user's SCRAM credentials (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Read the file (at start-up, in a thread); no file: no users."""
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
        tmp = self.path.with_name(FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.path)
        fsync_directory(self.path.parent)
