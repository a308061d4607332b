"""Who may use the registry's listener: the broker's SCRAM users and ACLs, on when the broker's
authorizer is (``authorizer.class.name``); off, every request is answered as before.

How this works
--------------
On an https listener a verified client certificate names the principal, as on Kafka's SSL
listeners (``User:`` and its subject, RFC 2253). Otherwise authentication is HTTP Basic
(``basic.auth.user.info`` in Confluent's clients): the password
is checked against the user's stored SCRAM credential (scram_credentials.py) as a SCRAM
server would, without knowing the password: SaltedPassword = PBKDF2(password, salt,
iterations), ClientKey = HMAC(SaltedPassword, "Client Key"), and H(ClientKey) must equal the
StoredKey (SHA-512 first, then SHA-256, whichever the user has). The derivation runs in a
thread (thousands of iterations); a success is remembered (``CACHE_SIZE`` entries, by user and
a hash of the password, tied to the credential it matched, so a changed credential is checked
again). A missing header, an unknown user or a wrong password is 401 with Confluent's 40101
(after ``FAILURE_DELAY_S``, as SASL failures are, and alike whether the user exists).

Authorization asks the broker's authorizer, principal ``User:<name>`` from the client's
address, as a Kafka request would be asked; super users pass. Subjects are not a Kafka
resource type, so a subject is authorized as a topic (``subject_topic``): ``<topic>-key``
and ``<topic>-value`` (TopicNameStrategy) as ``<topic>``, any other subject as the topic of its
own name. The operations (``NEEDS``, per route, in http_auth.py):

* reading a subject (its versions, a lookup, a compatibility check): DESCRIBE (which READ,
  WRITE, DELETE and ALTER imply, as in Kafka);
* registering a schema: WRITE; deleting a subject or version: DELETE;
* a subject's ``/config/{s}`` and ``/mode/{s}``: DESCRIBE_CONFIGS to read, ALTER_CONFIGS to
  change; the global ``/config`` and ``/mode``: the same on the CLUSTER resource;
* a schema by id: DESCRIBE on some subject that holds it; ``GET /subjects`` and the id's
  subject and version lists show only the subjects the principal may describe;
* ``/`` and ``/schemas/types``: any authenticated user.

Refusals are 403 with Confluent's 40301.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from headrace.broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC, Authorizer
from headrace.broker.security.scram_credentials import ScramCredential, ScramCredentials
from headrace.broker.security.tls import certificate_principal

from .errors import RegistryError

UNAUTHORIZED = 40101
FORBIDDEN = 40301
CACHE_SIZE = 1000
FAILURE_DELAY_S = 0.1
MECHANISMS = (("SCRAM-SHA-512", "sha512"), ("SCRAM-SHA-256", "sha256"))
REALM = 'Basic realm="SchemaRegistry"'
_NOBODY = ScramCredential(b"\0" * 16, b"", b"", 4096)  # what an unknown user is checked against


def unauthorized() -> RegistryError:
    return RegistryError(401, UNAUTHORIZED, "Unauthorized")


def forbidden(user: str, operation: str, what: str) -> RegistryError:
    return RegistryError(403, FORBIDDEN, f"User {user} is denied operation {operation} on {what}")


def subject_topic(subject: str) -> str:
    """The topic a subject is authorized as (see the module docstring)."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking, as the authorizer reads a session: ``User:<name>`` and an address."""

    principal: str
    host: str

    @property
    def user(self) -> str:
        return self.principal.partition(":")[2]


def _parse_basic(header: str | None) -> tuple[str, str] | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep and user else None


def _matches(password: str, mechanism_hash: str, c: ScramCredential) -> bool:
    from scramp.core import saslprep  # (scramp: the SASL listeners' library too)

    try:
        prepared = saslprep(password).encode()
    except Exception:  # a password SASLprep refuses cannot be a SCRAM password
        return False
    salted = hashlib.pbkdf2_hmac(mechanism_hash, prepared, c.salt, c.iterations)
    client_key = hmac.new(salted, b"Client Key", mechanism_hash).digest()
    return hmac.compare_digest(hashlib.new(mechanism_hash, client_key).digest(), c.stored_key)


class RegistryAuth:
    """Authentication and authorization of the registry's requests (the module docstring);
    ``enabled`` follows the broker's authorizer."""

    def __init__(self, authorizer: Authorizer, credentials: ScramCredentials) -> None:
        self.authorizer = authorizer
        self.credentials = credentials
        self._known: OrderedDict[tuple[str, bytes], ScramCredential] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.authorizer.enabled

    async def authenticate(
        self, header: str | None, host: str, certificate: Any = None
    ) -> Principal:
        """The principal of a request: its verified client certificate's subject (an https
        listener, ``getpeercert()``), else its ``Authorization`` header's user; or 401."""
        from_certificate = certificate_principal(certificate)
        if from_certificate is not None:
            return Principal(from_certificate, host)
        given = _parse_basic(header)
        if given is None:
            raise unauthorized()
        user, password = given
        key = (user, hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest())
        remembered = self._known.get(key)
        held = [(h, c) for m, h in MECHANISMS if (c := self.credentials.get(user, m)) is not None]
        if remembered is not None and any(c == remembered for _, c in held):
            self._known.move_to_end(key)
            return Principal(f"User:{user}", host)
        for mechanism_hash, c in held:
            if await asyncio.to_thread(_matches, password, mechanism_hash, c):
                self._known[key] = c
                if len(self._known) > CACHE_SIZE:
                    self._known.popitem(last=False)
                return Principal(f"User:{user}", host)
        if not held:  # an unknown user costs what a wrong password does
            await asyncio.to_thread(_matches, password, "sha512", _NOBODY)
        await asyncio.sleep(FAILURE_DELAY_S)
        raise unauthorized()

    # decisions --------------------------------------------------------------------------------

    def is_super(self, who: Principal) -> bool:
        return who.principal in self.authorizer.super_users

    def may(self, who: Principal, operation: int, subject: str | None) -> bool:
        """Whether ``who`` may do ``operation`` on ``subject`` (None: the global settings,
        the CLUSTER resource)."""
        if subject is None:
            return self.authorizer.allows(who, operation, CLUSTER, CLUSTER_NAME)
        return self.authorizer.allows(who, operation, TOPIC, subject_topic(subject))

    def check(self, who: Principal, operation: int, subject: str | None) -> None:
        """403 unless ``who`` may do ``operation`` on ``subject``."""
        if not self.may(who, operation, subject):
            from headrace.broker.security.authorizer import Operation

            name = Operation(operation).name.replace("_", " ").title().replace(" ", "")
            what = "the global settings" if subject is None else f"Subject: {subject}"
            raise forbidden(who.user, name, what)
