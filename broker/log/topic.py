"""One topic on this broker: its id, its settings (its own, else the broker's defaults), and
the partitions of it held here.

In a cluster a topic is held here in part (``held``: the partitions placed on this broker) and
served only while this broker leads a partition and is not fenced (``partition`` returns None
otherwise, and ``partition_error`` says why). ``configs`` are replaced whole, never changed in
place, so that ``produce_config``, the settings the produce path reads for every request, is
read once per change. Also here: the errors of a topic that is not here or could not be made,
and what a topic's name may be.
"""

from __future__ import annotations

import errno
import re
import resource
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from headrace.broker.config.settings import TOPIC_SETTINGS
from headrace.protocol.errors import ErrorCode
from headrace.storage import LogConfig, StorageError

if TYPE_CHECKING:
    from headrace.broker.config.config import BrokerConfig

    from .partition import Partition

MAX_NAME = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicCreationError(StorageError):
    """Creating a topic's partitions failed and was undone. ``error_code`` is Kafka's answer
    for that topic (KAFKA_STORAGE_ERROR for a disk or file problem, UNKNOWN_SERVER_ERROR
    otherwise); the message names the cause. A ``StorageError``, so that code which makes
    internal topics on first use handles it as before."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @classmethod
    def of(cls, name: str, e: BaseException) -> TopicCreationError:
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__
        if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            why = f"too many open files (the broker's open-files limit is {soft})"
        elif isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            why = "no space left on the device of the data directory"
        else:
            why = str(e) or type(e).__name__
        code = (
            ErrorCode.KAFKA_STORAGE_ERROR
            if isinstance(e, (OSError, StorageError))
            else ErrorCode.UNKNOWN_SERVER_ERROR
        )
        return cls(code, f"Cannot create the partitions of topic '{name}': {why}; nothing kept.")


class NotHere(StorageError):
    """A partition this broker does not hold (in a cluster: another broker leads it, or this
    one is fenced); a coordinator whose state partition it is answers NOT_COORDINATOR or
    COORDINATOR_NOT_AVAILABLE, and the client finds the coordinator again."""


def topic_name_error(name: str) -> str | None:
    if not name or name in (".", ".."):
        return "topic name is empty, '.' or '..'"
    if len(name) > MAX_NAME:
        return f"topic name is longer than {MAX_NAME} characters"
    if not _LEGAL_NAME.match(name):
        return "topic name may contain only ASCII letters, digits, '.', '_' and '-'"
    return None


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class ProduceConfig:
    """The topic's settings the produce path reads for every partition of every request."""

    log_append_time: bool  # message.timestamp.type is LogAppendTime
    keys_required: bool  # cleanup.policy includes compact
    timestamp_before_ms: int  # message.timestamp.before.max.ms
    timestamp_after_ms: int  # message.timestamp.after.max.ms
    max_message_bytes: int
    flush_messages: int
    # confluent.<key|value>.schema.validation: the subject name strategy of the key's (value's)
    # schema id (TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy), None when the
    # topic does not ask (log_validator.py)
    key_strategy: str | None = None
    value_strategy: str | None = None


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    _configs: dict[str, object]  # per-topic settings set explicitly (``configs``)
    broker_config: BrokerConfig
    count: int = 0  # partitions of the topic; in a cluster, on every broker
    held: dict[int, Partition] = field(default_factory=dict)  # the ones on this broker
    leading: Callable[[], bool] = _always  # False while a cluster broker is fenced
    created_ms: int = 0  # in a cluster, when the topic was made (0: unknown)

    @property
    def partitions(self) -> list[Partition]:
        """The partitions on this broker (every partition, on a single broker), by index."""
        return list(self.held.values())

    @property
    def led(self) -> list[Partition]:
        """The partitions this broker leads (every partition, on a single broker)."""
        return [p for p in self.held.values() if p.leader]

    def partition(self, index: int) -> Partition | None:
        """Partition ``index`` when this broker leads it and may serve it, else None."""
        p = self.held.get(index)
        return p if p is not None and p.leader and self.leading() else None

    def held_partition(self, index: int) -> Partition:
        """``partition(index)``, or NotHere."""
        p = self.partition(index)
        if p is None:
            raise NotHere(f"partition {index} of {self.name} is not on this broker")
        return p

    def partition_error(self, index: int) -> int:
        """Why ``partition(index)`` is None: the partition is elsewhere (or this broker is
        fenced) or does not exist."""
        if 0 <= index < self.count:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    @property
    def configs(self) -> dict[str, object]:
        """The settings set for this topic explicitly; replaced as a whole, never changed in
        place, so that ``produce_config`` follows them."""
        return self._configs

    @configs.setter
    def configs(self, configs: dict[str, object]) -> None:
        self._configs = configs
        self.__dict__.pop("produce_config", None)

    @cached_property
    def produce_config(self) -> ProduceConfig:
        """The produce path's settings, read once per change of ``configs``."""
        return ProduceConfig(
            log_append_time=self.setting("message.timestamp.type") == "LogAppendTime",
            keys_required="compact" in str(self.setting("cleanup.policy")),
            timestamp_before_ms=int(self.setting("message.timestamp.before.max.ms")),
            timestamp_after_ms=int(self.setting("message.timestamp.after.max.ms")),
            max_message_bytes=int(self.setting("max.message.bytes")),
            flush_messages=int(self.setting("flush.messages")),
            key_strategy=self.strategy("key") if self.validates("key") else None,
            value_strategy=self.strategy("value") if self.validates("value") else None,
        )

    def validates(self, part: str) -> bool:
        """Whether the topic asks for its records' keys (``part`` "key") or values ("value")
        to carry schema ids registered under their subject."""
        return bool(self.setting(f"confluent.{part}.schema.validation"))

    def strategy(self, part: str) -> str:
        """The subject name strategy of the key's or value's schema id, by its short name."""
        name = str(self.setting(f"confluent.{part}.subject.name.strategy"))
        return name.rpartition(".")[2]

    def setting(self, name: str) -> Any:
        """The topic's value of ``name``: its own if set, else the broker's default."""
        if name in self.configs:
            return self.configs[name]
        setting = TOPIC_SETTINGS[name]
        if setting.name == name:  # a topic setting without a broker setting beside it
            return setting.default
        return self.broker_config[setting.name]

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=int(self.setting("segment.bytes")),
            segment_ms=int(self.setting("segment.ms")),
            index_interval_bytes=int(self.setting("index.interval.bytes")),
            segment_index_bytes=int(self.setting("segment.index.bytes")),
            retention_ms=int(self.setting("retention.ms")),
            retention_bytes=int(self.setting("retention.bytes")),
            cleanup_policy=str(self.setting("cleanup.policy")),
            delete_retention_ms=int(self.setting("delete.retention.ms")),
            min_cleanable_dirty_ratio=float(self.setting("min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=int(self.setting("min.compaction.lag.ms")),
            max_compaction_lag_ms=int(self.setting("max.compaction.lag.ms")),
            io_backend=str(self.broker_config["log.io.backend"]),
        )
