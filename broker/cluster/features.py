"""Feature versions (KIP-584): what this broker supports and what the cluster has finalized.

How this works
--------------
``SUPPORTED`` names each feature this broker implements with the range of levels it can run
at; a feature is listed only once a level above 0 is built (as Kafka lists only the features
whose latest level is above 0). The KRaft-only features (``metadata.version``,
``kraft.version``) are not among them: the metadata here is not KRaft's.

The finalized levels are cluster-wide: one document (documents.py) named ``features``, the
znode ``/features`` in a cluster or ``features.json`` in a broker's own data directory,
holding ``{"epoch": n, "levels": {name: level}}``. The first broker to start writes
``DEFAULTS`` (by compare-and-set, so a racing broker keeps the first one's); every broker
watches the document and answers ApiVersions from what it holds: its supported ranges, the
levels above 0 (a level of 0 is the feature off, not listed) and the epoch, which grows with
every change.

``update`` is UpdateFeatures, done by the controller as Kafka's controller does it: every
level in one request is checked (the upgrade type, then support by this broker and by every
live broker's registration, then the direction: a lower level needs a downgrade type, a
higher one an upgrade), and either all are written at once, with the epoch + 1, or none.
The components that honour a level read it through ``level(name)`` on every request, so a
change applies as soon as the document reaches the broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from headrace.protocol import ErrorCode

if TYPE_CHECKING:
    from .documents import Document

log = logging.getLogger(__name__)

GROUP_VERSION = "group.version"  # 1: KIP-848's consumer group protocol (ConsumerGroupHeartbeat)
# 2: transactions v2 (KIP-890: the epoch bumped at every EndTxn, partitions added by their
# leaders); 1 adds nothing a client sees (Kafka's flexible transaction-log records)
TRANSACTION_VERSION = "transaction.version"
# 1: KIP-932's share groups (ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
# ShareAcknowledge); 2: their dead-letter queues (KIP-1191, share/dead_letters.py)
SHARE_VERSION = "share.version"
# 1: KIP-1071's streams groups (StreamsGroupHeartbeat, StreamsGroupDescribe); Kafka's levels
# are 0-1 and a new 4.4 cluster starts at 1
STREAMS_VERSION = "streams.version"

# name -> (min, max) levels this broker implements
SUPPORTED: dict[str, tuple[int, int]] = {
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 2),
    STREAMS_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
}
# the levels a new cluster starts at (Kafka 4.4's)
DEFAULTS: dict[str, int] = {
    GROUP_VERSION: 1,
    SHARE_VERSION: 2,
    STREAMS_VERSION: 1,
    TRANSACTION_VERSION: 2,
}

# UpdateFeatures' upgrade types (v1+; v0's AllowDowngrade is SAFE_DOWNGRADE)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


class FeatureUpdateError(Exception):
    """An UpdateFeatures refused: a Kafka error code and Kafka's message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Features:
    """The finalized feature levels of the cluster, as this broker last saw them."""

    def __init__(self, document: Document, node_id: int) -> None:
        self.document = document
        self.node_id = node_id
        self.epoch = -1  # -1 until the document is read: ApiVersions' "unknown"
        self.levels: dict[str, int] = {}

    def level(self, name: str) -> int:
        """The finalized level of feature ``name`` (0: off, or not finalized)."""
        return self.levels.get(name, 0)

    async def start(self) -> None:
        """Read the finalized levels (writing ``DEFAULTS`` if the cluster has none yet) and
        follow their changes; raises ValueError when one is outside what this broker supports
        (a broker older than the cluster's levels must not serve)."""
        value = await asyncio.to_thread(self.document.load)
        if value is None:
            value = await self.document.change(
                lambda v: v if v is not None else {"epoch": 0, "levels": dict(DEFAULTS)}
            )
        self._apply(value)
        unsupported = incompatible(self.levels)
        if unsupported:
            raise ValueError(f"the cluster finalized {unsupported}: {_UNSUPPORTED}")
        self.document.watch(self._apply)

    def _apply(self, value) -> None:
        if value is None:
            return
        self.epoch = int(value["epoch"])
        self.levels = {str(n): int(v) for n, v in value["levels"].items() if int(v) > 0}
        unsupported = incompatible(self.levels)
        if unsupported:
            log.error("the cluster finalized %s: %s", unsupported, _UNSUPPORTED)

    async def update(
        self,
        updates: Mapping[str, tuple[int, int]],
        live: Mapping[int, Iterable[tuple[str, int, int]]],
        validate_only: bool,
    ) -> None:
        """UpdateFeatures: ``updates`` maps a feature to (level, upgrade type); ``live`` the
        live brokers to the features they registered. Raises FeatureUpdateError (nothing
        written) or stores every change at once."""
        registered = {b: {n: (lo, hi) for n, lo, hi in fs} for b, fs in live.items()}
        for name, (level, kind) in updates.items():
            self._check(name, level, kind, self.level(name), registered)
        if validate_only:
            return

        def change(value):
            value = value or {"epoch": 0, "levels": {}}
            levels = dict(value["levels"])
            for name, (level, kind) in updates.items():
                # checked again against what is stored (another controller may have written)
                self._check(name, level, kind, int(levels.get(name, 0)), registered)
                levels[name] = level
            levels = {n: v for n, v in sorted(levels.items()) if v > 0}
            return {"epoch": int(value["epoch"]) + 1, "levels": levels}

        await self.document.change(change)
        log.info("finalized feature levels changed: %s", dict(updates))

    def _check(self, name, level, kind, current, registered) -> None:
        def refuse(reason: str):
            message = f"Invalid update version {level} for feature {name}. {reason}"
            return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION, message)

        if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise refuse("The controller does not support the given upgrade type.")
        if level < 0:
            raise refuse("A feature version cannot be less than 0.")
        holders = [(f"Local controller {self.node_id}", SUPPORTED)]
        holders += [(f"Broker {b}", fs) for b, fs in sorted(registered.items())]
        for who, supported in holders:
            lo, hi = supported.get(name, (0, 0))
            if not lo <= level <= hi:
                if hi == 0:
                    raise refuse(f"{who} does not support this feature.")
                raise refuse(f"{who} only supports versions {lo}-{hi}")
        if level < current and kind == UPGRADE:
            raise refuse(
                "Can't downgrade the version of this feature without setting the upgrade"
                " type to either safe or unsafe downgrade."
            )
        if level > current and kind != UPGRADE:
            raise refuse("Can't downgrade to a newer version.")


_UNSUPPORTED = "this broker does not support them (it is older than the cluster's levels)"


def incompatible(levels: Mapping[str, int]) -> dict[str, int]:
    """The finalized levels outside what this broker supports."""
    out = {}
    for name, level in levels.items():
        lo, hi = SUPPORTED.get(name, (0, 0))
        if not lo <= level <= hi:
            out[name] = level
    return out


def registration() -> tuple[tuple[str, int, int], ...]:
    """What a broker registers of its features: (name, min, max) for each it supports."""
    return tuple((n, lo, hi) for n, (lo, hi) in sorted(SUPPORTED.items()))
