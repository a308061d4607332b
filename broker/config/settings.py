"""Every broker and topic setting: Kafka's name, type, default and meaning, one table.

``BROKER_SETTINGS`` is the table (``LISTENER_SETTINGS``: those a listener may set for itself
as ``listener.name.<name>.<setting>``); a broker setting with a ``topic`` name gives that topic
setting its default (``log.segment.bytes`` for ``segment.bytes``), and ``TOPIC_SETTINGS`` lists
those by topic name, with the few topic settings that have no broker setting beside them
(``TOPIC_ONLY_SETTINGS``: their default is their own); ``BROKER_CHOICES`` and
``BROKER_MINIMUMS`` say which values some broker settings take (config.py checks them).
``parse`` reads a value as its type; ``validate_topic_setting`` checks a topic setting
(CreateTopics, AlterConfigs) with its choices and ranges. The settings reference of the
documentation is made from these tables. Only the standard library is used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """A setting that is unknown or has a value of the wrong type."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: str  # Kafka's config type: boolean, int, short, long, double, string, list
    default: object
    doc: str
    topic: str | None = None  # the topic setting whose default this broker setting provides


def parse(setting: Setting, text: str) -> Any:
    text = text.strip()
    try:
        if setting.type == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if setting.type in ("int", "short", "long"):
            value = int(text)
            bits = {"short": 16, "int": 32, "long": 64}[setting.type]
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise ValueError(text)
            return value
        if setting.type == "double":
            return float(text)
        return text
    except ValueError:
        raise ConfigError(f"{setting.name}: {text!r} is not a valid {setting.type}") from None


# settings a listener may set for itself as listener.name.<name>.<setting> (Kafka's prefix)
SECURITY_SETTINGS = [
    Setting("ssl.keystore.type", "string", "PEM", "Format of ssl.keystore.location (PEM only)."),
    Setting(
        "ssl.keystore.location",
        "string",
        "",
        "PEM file with the broker's certificate chain and private key (SSL, SASL_SSL).",
    ),
    Setting("ssl.key.password", "password", "", "Password of the private key, if encrypted."),
    Setting(
        "delegation.token.secret.key",
        "password",
        "",
        "Secret the delegation tokens' HMACs are made with, the same on every broker of a"
        " cluster; empty: delegation tokens are off.",
    ),
    Setting(
        "delegation.token.max.lifetime.ms",
        "long",
        604800000,
        "Longest a delegation token lives, renewals included.",
    ),
    Setting(
        "delegation.token.expiry.time.ms",
        "long",
        86400000,
        "How long a delegation token lives without a renewal (and the longest one renewal).",
    ),
    Setting(
        "delegation.token.expiry.check.interval.ms",
        "long",
        3600000,
        "How often expired delegation tokens are removed.",
    ),
    Setting(
        "delegation.token.max.count",
        "int",
        10000,
        "Most delegation tokens kept; CreateDelegationToken beyond is INVALID_REQUEST.",
    ),
    Setting(
        "ssl.truststore.type", "string", "PEM", "Format of ssl.truststore.location (PEM only)."
    ),
    Setting(
        "ssl.truststore.location",
        "string",
        "",
        "PEM file of the CA certificates client certificates are checked against.",
    ),
    Setting(
        "ssl.client.auth",
        "string",
        "none",
        "Client certificates: none, requested (checked when given) or required.",
    ),
    Setting("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    Setting(
        "ssl.endpoint.identification.algorithm",
        "string",
        "https",
        "A broker connecting to another over TLS checks its certificate names the host"
        " (https), or not (empty).",
    ),
    Setting(
        "ssl.cipher.suites",
        "list",
        "",
        "TLS 1.2 cipher suites (OpenSSL or IANA names; empty: the library's defaults).",
    ),
    Setting(
        "sasl.enabled.mechanisms",
        "list",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms offered: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    ),
    Setting(
        "sasl.jaas.config",
        "password",
        "",
        'PLAIN users as a JAAS entry: ... PlainLoginModule required user_NAME="PASSWORD" ...;',
    ),
    Setting(
        "connections.max.reauth.ms",
        "long",
        0,
        "SASL session lifetime: a client must re-authenticate within it (0: never).",
    ),
]
LISTENER_SETTINGS = {s.name: s for s in SECURITY_SETTINGS}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

BROKER_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("node.id", "int", 1, "The id this broker advertises."),
        Setting("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "Where to listen."),
        Setting(
            "advertised.listeners", "string", "", "Address given to clients (default: listeners)."
        ),
        Setting(
            "listener.security.protocol.map",
            "string",
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Security protocol of each listener, NAME:PROTOCOL,... (PLAINTEXT, SSL,"
            " SASL_PLAINTEXT or SASL_SSL).",
        ),
        Setting(
            "inter.broker.listener.name",
            "string",
            "",
            "The listener other brokers use (default: the one named as"
            " security.inter.broker.protocol, else the first).",
        ),
        Setting(
            "security.inter.broker.protocol",
            "string",
            "PLAINTEXT",
            "The inter-broker listener by its name, when inter.broker.listener.name is not set.",
        ),
        Setting(
            "sasl.mechanism.inter.broker.protocol",
            "string",
            "GSSAPI",
            "SASL mechanism brokers use with each other on a SASL inter-broker listener"
            " (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512).",
        ),
        *SECURITY_SETTINGS,
        Setting("log.dirs", "string", "./headrace-data", "The data directory."),
        Setting(
            "broker.id",
            "int",
            -1,
            "Kafka's ZooKeeper-era name of node.id: when set (not -1), the id this broker has.",
        ),
        Setting(
            "zookeeper.connect",
            "string",
            "",
            "Cluster mode: ZooKeeper's host:port[,host:port...][/chroot]. Empty: one broker"
            " on its own.",
        ),
        Setting(
            "zookeeper.session.timeout.ms",
            "int",
            18000,
            "ZooKeeper session timeout: how long after a broker stops answering the cluster"
            " takes it for gone.",
        ),
        Setting(
            "zookeeper.connection.timeout.ms",
            "int",
            -1,
            "How long start-up waits for ZooKeeper (-1: zookeeper.session.timeout.ms).",
        ),
        Setting(
            "broker.rack", "string", "", "The rack of this broker (placement spreads over racks)."
        ),
        Setting(
            "replica.fetch.wait.max.ms",
            "int",
            500,
            "Cluster mode: how long a replica fetch waits at the leader for new data.",
        ),
        Setting(
            "replica.fetch.max.bytes",
            "int",
            4194304,
            "Cluster mode: bytes a replica fetch asks for per partition (at least one batch;"
            " Kafka's default is 1 MiB: fewer, larger fetches suit Headrace).",
        ),
        Setting(
            "replica.fetch.response.max.bytes",
            "int",
            4194304,
            "Cluster mode: bytes a replica fetch asks for in all (at most 8 MiB: the"
            " inter-broker client's frame limit).",
        ),
        Setting(
            "replica.fetch.backoff.ms",
            "int",
            1000,
            "Cluster mode: how long a replica fetcher waits after an error.",
        ),
        Setting(
            "replica.lag.time.max.ms",
            "int",
            30000,
            "Cluster mode: a follower not caught up with its leader for this long leaves the"
            " ISR; also how long a partition being moved stops taking writes while its new"
            " broker fetches the last of it.",
        ),
        Setting(
            "controller.rebalance.interval.ms",
            "int",
            10000,
            "Cluster mode: how often the controller checks that every partition placed"
            " automatically is where placement over the member brokers puts it (and at each"
            " change of membership).",
        ),
        Setting("num.partitions", "int", 1, "Partitions of a topic created without a count."),
        Setting(
            "default.replication.factor",
            "short",
            1,
            "Replicas of a topic created without a replication factor (cluster mode).",
        ),
        Setting(
            "offsets.topic.replication.factor",
            "short",
            3,
            "Replicas of __consumer_offsets (at most the live brokers when it is made).",
        ),
        Setting(
            "transaction.state.log.replication.factor",
            "short",
            3,
            "Replicas of __transaction_state (at most the live brokers when it is made).",
        ),
        Setting(
            "transaction.state.log.min.isr",
            "int",
            2,
            "min.insync.replicas of __transaction_state (at most its replication factor).",
        ),
        Setting("auto.create.topics.enable", "boolean", True, "Create topics on first use."),
        Setting("delete.topic.enable", "boolean", True, "Allow DeleteTopics."),
        Setting(
            "message.max.bytes",
            "int",
            1048588,
            "Largest record batch accepted.",
            topic="max.message.bytes",
        ),
        Setting("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted."),
        Setting("queued.max.requests", "int", 500, "Requests in flight per connection."),
        Setting(
            "max.request.partition.size.limit",
            "int",
            2000,
            "Most partitions in one DescribeTopicPartitions answer (the rest come by cursor).",
        ),
        Setting(
            "queued.max.request.bytes",
            "long",
            256 * 1024 * 1024,
            "Request bytes in flight for the whole broker before reading stops.",
        ),
        Setting(
            "connection.max.request.bytes",
            "long",
            64 * 1024 * 1024,
            "Request bytes in flight per connection before reading from it stops.",
        ),
        Setting(
            "max.broker.partitions",
            "int",
            100000,
            "Most partitions (of every topic, internal ones too) on this broker; a CreateTopics"
            " or CreatePartitions beyond gets POLICY_VIOLATION.",
        ),
        Setting(
            "connection.max.response.bytes",
            "long",
            4 * 1024 * 1024,
            "Unsent response bytes per connection (waiting for an earlier response, or in the"
            " socket's write buffer) above which its requests are neither read nor handled"
            " until the client reads.",
        ),
        Setting(
            "queued.max.response.bytes",
            "long",
            256 * 1024 * 1024,
            "Fetch response bytes in memory for the whole broker; a fetch reserves its share"
            " before reading and waits (within its max_wait_ms) while there is none.",
        ),
        Setting(
            "fetch.max.bytes",
            "int",
            55 * 1024 * 1024,
            "Largest fetch response (a request's max_bytes is cut to this).",
        ),
        Setting(
            "max.connections",
            "int",
            10000,
            "Connections open at once; a new one over it is accepted and closed at once.",
        ),
        Setting(
            "max.connections.per.ip",
            "int",
            1000,
            "Connections open at once from one address.",
        ),
        Setting(
            "max.connections.per.ip.overrides",
            "string",
            "",
            "Per-address exceptions to max.connections.per.ip: host:count,host:count.",
        ),
        Setting(
            "socket.send.buffer.bytes",
            "int",
            102400,
            "Each client connection's socket send buffer (SO_SNDBUF); -1: the kernel's, which"
            " grows with the connection. Kafka's default; small buffers make fetches cheaper"
            " in CPU per byte, large ones faster over links with a long round trip.",
        ),
        Setting(
            "connections.max.idle.ms",
            "long",
            600000,
            "Close a connection with nothing in flight and no traffic for this long (-1: never).",
        ),
        Setting(
            "connection.failed.authentication.delay.ms",
            "int",
            100,
            "How long a failed SASL authentication waits before its answer and the close.",
        ),
        Setting(
            "authorizer.class.name",
            "string",
            "",
            "The ACL authorizer: kafka.security.authorizer.AclAuthorizer or"
            " org.apache.kafka.metadata.authorizer.StandardAuthorizer turn it on (empty: every"
            " client may do everything).",
        ),
        Setting(
            "super.users",
            "string",
            "",
            "Principals the authorizer allows everything, separated by ';' (User:admin).",
        ),
        Setting(
            "allow.everyone.if.no.acl.found",
            "boolean",
            False,
            "With the authorizer on: a resource no ACL names is open to everyone.",
        ),
        Setting(
            "authorizer.acls.max.count",
            "int",
            10000,
            "Most ACLs the broker (or the cluster) keeps; CreateAcls beyond it is refused.",
        ),
        Setting(
            "authorizer.cache.max.entries",
            "int",
            50000,
            "Most authorization decisions cached (per principal, host, operation and"
            " resource); emptied whenever the ACLs change.",
        ),
        Setting(
            "quota.window.num",
            "int",
            11,
            "Samples a client's usage is measured over for its quotas.",
        ),
        Setting(
            "quota.window.size.seconds",
            "int",
            1,
            "Length of one quota sample.",
        ),
        Setting(
            "client.quota.max.entities",
            "int",
            10000,
            "Most quota entities stored, and most clients' usage rates tracked.",
        ),
        Setting("num.io.threads", "int", 4, "Handler queues; a connection always uses one."),
        Setting(
            "metrics.port",
            "int",
            -1,
            "Port of the Prometheus endpoint (/metrics) and the health checks (/health, /ready),"
            " on the first listener's host; -1: off, 0: any free port (logged).",
        ),
        Setting(
            "metrics.partition.series.max",
            "int",
            1000,
            "Most per-partition series (log end offset, size, consumer lag) one scrape shows;"
            " the rest are counted in headrace_partition_series_dropped.",
        ),
        Setting(
            "log.segment.bytes",
            "int",
            1 << 30,
            "Roll a segment at this size.",
            topic="segment.bytes",
        ),
        Setting(
            "log.roll.ms",
            "long",
            7 * 24 * 3600 * 1000,
            "Roll a segment at this age.",
            topic="segment.ms",
        ),
        Setting(
            "log.index.interval.bytes",
            "int",
            4096,
            "Bytes between offset index entries.",
            topic="index.interval.bytes",
        ),
        Setting(
            "log.index.size.max.bytes",
            "int",
            10 * 1024 * 1024,
            "Largest index file.",
            topic="segment.index.bytes",
        ),
        Setting(
            "log.flush.interval.messages",
            "long",
            LONG_MAX,
            "Flush (fsync) once this many messages are unflushed; the ack waits for it.",
            topic="flush.messages",
        ),
        Setting(
            "log.flush.interval.ms",
            "long",
            LONG_MAX,
            "Flush (fsync) unflushed data this often.",
            topic="flush.ms",
        ),
        Setting(
            "log.flush.threads",
            "int",
            4,
            "Threads that fsync the logs of one flush at once (a transaction's markers, many "
            "producers' partitions): fsyncs that arrive together finish sooner than one after "
            "the other (ext4 can cover them with one journal commit).",
        ),
        Setting(
            "log.flush.offset.checkpoint.interval.ms",
            "int",
            60000,
            "Flush unflushed data at least this often, so recovery after a crash reads little.",
        ),
        Setting(
            "log.retention.ms",
            "long",
            7 * 24 * 3600 * 1000,
            "Keep data this long.",
            topic="retention.ms",
        ),
        Setting(
            "log.retention.bytes",
            "long",
            -1,
            "Keep at most this much per partition.",
            topic="retention.bytes",
        ),
        Setting(
            "log.cleanup.policy",
            "list",
            "delete",
            "delete and/or compact.",
            topic="cleanup.policy",
        ),
        Setting(
            "log.io.backend",
            "string",
            "os",
            "Storage I/O: os (pwrite/fsync/pread) or io_uring (the liburing package).",
        ),
        Setting(
            "log.max.open.files",
            "int",
            -1,
            "Most file descriptors all logs keep open at once (segment files and indexes are "
            "opened on demand, least recently used closed first); -1: half of the soft "
            "RLIMIT_NOFILE at start-up. At least 8.",
        ),
        Setting(
            "num.recovery.threads.per.data.dir",
            "int",
            2,
            "Threads that recover the logs at start-up after a crash and close them at "
            "shutdown (a clean start opens them in one thread).",
        ),
        Setting(
            "log.retention.check.interval.ms",
            "long",
            300000,
            "How often the log cleaner looks for segments to delete by retention.",
        ),
        Setting("log.cleaner.enable", "boolean", True, "Compact topics whose policy says so."),
        Setting(
            "log.cleaner.backoff.ms",
            "long",
            15000,
            "How often the log cleaner looks for logs to compact.",
        ),
        Setting(
            "log.cleaner.delete.retention.ms",
            "long",
            24 * 3600 * 1000,
            "Keep tombstones this long (by their timestamp) before compaction removes them.",
            topic="delete.retention.ms",
        ),
        Setting(
            "log.cleaner.min.cleanable.ratio",
            "double",
            0.5,
            "Compact a log once dirty bytes / (clean + dirty bytes) reach this.",
            topic="min.cleanable.dirty.ratio",
        ),
        Setting(
            "log.cleaner.min.compaction.lag.ms",
            "long",
            0,
            "Records younger than this are not compacted.",
            topic="min.compaction.lag.ms",
        ),
        Setting(
            "log.cleaner.max.compaction.lag.ms",
            "long",
            (1 << 63) - 1,
            "Compact records older than this whatever the dirty ratio (and roll the active "
            "segment of a compacted topic at this age).",
            topic="max.compaction.lag.ms",
        ),
        Setting(
            "log.cleaner.dedupe.buffer.size",
            "long",
            128 * 1024 * 1024,
            "Memory for the compaction key map; a log with more keys is compacted in passes.",
        ),
        Setting(
            "log.message.timestamp.before.max.ms",
            "long",
            LONG_MAX,
            "A produced record's CreateTime may be at most this much before the broker's"
            " clock (else INVALID_TIMESTAMP).",
            topic="message.timestamp.before.max.ms",
        ),
        Setting(
            "log.message.timestamp.after.max.ms",
            "long",
            LONG_MAX,
            "A produced record's CreateTime may be at most this much after the broker's"
            " clock (else INVALID_TIMESTAMP).",
            topic="message.timestamp.after.max.ms",
        ),
        Setting(
            "log.message.timestamp.type",
            "string",
            "CreateTime",
            "CreateTime or LogAppendTime.",
            topic="message.timestamp.type",
        ),
        Setting(
            "compression.type",
            "string",
            "producer",
            "Batches are kept as the producer sent them.",
            topic="compression.type",
        ),
        Setting(
            "min.insync.replicas",
            "int",
            1,
            "acks=all writes are refused (NOT_ENOUGH_REPLICAS) while the ISR is smaller.",
            topic="min.insync.replicas",
        ),
        Setting(
            "auto.leader.rebalance.enable",
            "boolean",
            True,
            "Cluster mode: the controller gives leadership back to a partition's preferred"
            " replica once it is in the ISR again (checked every"
            " controller.rebalance.interval.ms).",
        ),
        Setting(
            "unclean.leader.election.enable",
            "boolean",
            False,
            "Cluster mode: elect a replica outside the ISR when no ISR member is live (may lose"
            " acknowledged records).",
            topic="unclean.leader.election.enable",
        ),
        Setting(
            "group.initial.rebalance.delay.ms",
            "int",
            3000,
            "How long a new (empty) group waits for more members before its first rebalance.",
        ),
        Setting("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout allowed."),
        Setting("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout allowed."),
        Setting("group.max.size", "int", 2147483647, "Most members in one consumer group."),
        Setting(
            "group.max.groups",
            "int",
            100000,
            "Most groups (of both kinds) the coordinator keeps; a request that would make one"
            " more gets COORDINATOR_NOT_AVAILABLE (groups holding nothing are forgotten first).",
        ),
        Setting(
            "offsets.retention.minutes",
            "int",
            10080,
            "Keep a group's committed offsets this long after the group became empty.",
        ),
        Setting(
            "replica.high.watermark.checkpoint.interval.ms",
            "long",
            5000,
            "Cluster mode: how often every replica's high watermark is written to the data"
            " directory's replication-offset-checkpoint (and at a clean stop).",
        ),
        Setting(
            "controlled.shutdown.enable",
            "boolean",
            True,
            "Cluster mode: a clean stop first asks the controller to hand the partitions this"
            " broker leads to other in-sync replicas and to take it out of the ISRs.",
        ),
        Setting(
            "controlled.shutdown.max.retries",
            "int",
            3,
            "Cluster mode: a controlled shutdown waits at most this many times"
            " controlled.shutdown.retry.backoff.ms for the handover, then stops anyway.",
        ),
        Setting(
            "controlled.shutdown.retry.backoff.ms",
            "long",
            5000,
            "See controlled.shutdown.max.retries.",
        ),
        Setting(
            "offsets.commit.timeout.ms",
            "int",
            5000,
            "Cluster mode: how long an offset commit (or a group's metadata) waits for the ISR"
            " of its partition of __consumer_offsets to have it; past that the commit gets"
            " COORDINATOR_NOT_AVAILABLE (clients retry).",
        ),
        Setting(
            "request.timeout.ms",
            "int",
            30000,
            "Cluster mode: how long a write to __transaction_state waits for its ISR to have it"
            " (then COORDINATOR_NOT_AVAILABLE).",
        ),
        Setting(
            "offsets.retention.check.interval.ms",
            "long",
            600000,
            "How often expired committed offsets are looked for.",
        ),
        Setting(
            "offsets.topic.num.partitions",
            "int",
            50,
            "Partitions of __consumer_offsets (fixed when the topic is created).",
        ),
        Setting(
            "group.consumer.session.timeout.ms",
            "int",
            45000,
            "Session timeout of consumer-protocol (KIP-848) group members.",
        ),
        Setting(
            "group.consumer.heartbeat.interval.ms",
            "int",
            5000,
            "Heartbeat interval given to consumer-protocol (KIP-848) group members.",
        ),
        Setting(
            "group.consumer.min.session.timeout.ms",
            "int",
            45000,
            "Smallest consumer.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.consumer.max.session.timeout.ms",
            "int",
            60000,
            "Largest consumer.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.consumer.min.heartbeat.interval.ms",
            "int",
            5000,
            "Smallest consumer.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.consumer.max.heartbeat.interval.ms",
            "int",
            15000,
            "Largest consumer.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.config.max.groups",
            "int",
            5000,
            "Most groups with group configs (kafka-configs --entity-type groups).",
        ),
        Setting(
            "group.share.max.share.sessions",
            "int",
            2000,
            "Most share sessions (one per share consumer and broker it fetches from).",
        ),
        Setting(
            "errors.deadletterqueue.auto.create.topics.enable",
            "boolean",
            False,
            "Whether a share group's dead-letter queue topic is made when it does not exist.",
        ),
        Setting(
            "errors.deadletterqueue.topic.name.prefix",
            "string",
            "dlq.",
            "The prefix every share group's dead-letter queue topic name must have (empty:"
            " any name).",
        ),
        Setting(
            "errors.deadletterqueue.group.enable",
            "boolean",
            False,
            "Whether share groups may use a topic as their dead-letter queue (a topic setting).",
            topic="errors.deadletterqueue.group.enable",
        ),
        Setting(
            "group.share.max.partitions",
            "int",
            10000,
            "Most share partitions (a share group's state on one partition) a broker keeps.",
        ),
        Setting(
            "group.consumer.max.size",
            "int",
            2147483647,
            "Most members in one consumer-protocol group.",
        ),
        Setting(
            "group.share.session.timeout.ms",
            "int",
            45000,
            "Session timeout of share group (KIP-932) members.",
        ),
        Setting(
            "group.share.min.session.timeout.ms",
            "int",
            45000,
            "Smallest share.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.share.max.session.timeout.ms",
            "int",
            60000,
            "Largest share.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.share.heartbeat.interval.ms",
            "int",
            5000,
            "Heartbeat interval given to share group members.",
        ),
        Setting(
            "group.share.min.heartbeat.interval.ms",
            "int",
            5000,
            "Smallest share.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.share.max.heartbeat.interval.ms",
            "int",
            15000,
            "Largest share.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.share.record.lock.duration.ms",
            "int",
            30000,
            "How long a share group member holds the records it was delivered (the acquisition"
            " lock) before they may be delivered again.",
        ),
        Setting(
            "group.share.min.record.lock.duration.ms",
            "int",
            15000,
            "Smallest share.record.lock.duration.ms a group config may set.",
        ),
        Setting(
            "group.share.max.record.lock.duration.ms",
            "int",
            60000,
            "Largest share.record.lock.duration.ms a group config may set.",
        ),
        Setting(
            "group.share.delivery.count.limit",
            "int",
            5,
            "Most deliveries of one record to a share group; past it the record is archived.",
        ),
        Setting(
            "group.share.min.delivery.count.limit",
            "int",
            2,
            "Smallest share.delivery.count.limit a group config may set.",
        ),
        Setting(
            "group.share.max.delivery.count.limit",
            "int",
            10,
            "Largest share.delivery.count.limit a group config may set.",
        ),
        Setting(
            "group.share.partition.max.record.locks",
            "int",
            2000,
            "Most records of one share-partition delivered and not yet acknowledged at once.",
        ),
        Setting(
            "group.share.min.partition.max.record.locks",
            "int",
            100,
            "Smallest share.partition.max.record.locks a group config may set.",
        ),
        Setting(
            "group.share.max.partition.max.record.locks",
            "int",
            4000,
            "Largest share.partition.max.record.locks a group config may set.",
        ),
        Setting(
            "group.share.max.size",
            "int",
            200,
            "Most members in one share group (else GROUP_MAX_SIZE_REACHED).",
        ),
        Setting(
            "group.streams.session.timeout.ms",
            "int",
            45000,
            "Session timeout of streams group (KIP-1071) members.",
        ),
        Setting(
            "group.streams.min.session.timeout.ms",
            "int",
            45000,
            "Smallest streams.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.streams.max.session.timeout.ms",
            "int",
            60000,
            "Largest streams.session.timeout.ms a group config may set.",
        ),
        Setting(
            "group.streams.heartbeat.interval.ms",
            "int",
            5000,
            "Heartbeat interval given to streams group members.",
        ),
        Setting(
            "group.streams.min.heartbeat.interval.ms",
            "int",
            5000,
            "Smallest streams.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.streams.max.heartbeat.interval.ms",
            "int",
            15000,
            "Largest streams.heartbeat.interval.ms a group config may set.",
        ),
        Setting(
            "group.streams.max.size",
            "int",
            2147483647,
            "Most members in one streams group (else GROUP_MAX_SIZE_REACHED).",
        ),
        Setting(
            "group.streams.num.standby.replicas",
            "int",
            0,
            "Standby replicas of each stateful task of a streams group.",
        ),
        Setting(
            "group.streams.max.standby.replicas",
            "int",
            2,
            "Largest streams.num.standby.replicas a group config may set.",
        ),
        Setting(
            "group.streams.initial.rebalance.delay.ms",
            "int",
            3000,
            "How long a new streams group waits for more members before its first assignment.",
        ),
        Setting(
            "group.streams.max.topology.bytes",
            "int",
            1048576,
            "Largest topology (its subtopologies' topic names and configs, in bytes) a"
            " streams group member may send (else STREAMS_INVALID_TOPOLOGY).",
        ),
        Setting(
            "producer.id.expiration.ms",
            "int",
            86400000,
            "Forget a partition's idempotent producer this long after its last batch"
            " (unless it has an open transaction there).",
        ),
        Setting(
            "producer.id.expiration.check.interval.ms",
            "int",
            600000,
            "How often idle producers are looked for.",
        ),
        Setting(
            "transaction.max.timeout.ms",
            "int",
            900000,
            "Largest transaction timeout a producer may ask for"
            " (else INVALID_TRANSACTION_TIMEOUT).",
        ),
        Setting(
            "transactional.id.expiration.ms",
            "int",
            604800000,
            "Forget a transactional id this long after its last transaction ended.",
        ),
        Setting(
            "transactional.id.max.count",
            "int",
            100000,
            "Most transactional ids kept; InitProducerId with a new one beyond gets"
            " COORDINATOR_NOT_AVAILABLE until idle ids expire.",
        ),
        Setting(
            "transaction.partition.verification.max.guards",
            "int",
            1000,
            "Most producers per partition whose transactional batches wait to join their"
            " transaction (transactions v2: each keeps a guard holding its later batches back);"
            " past it the oldest guard is dropped. At least 1.",
        ),
        Setting(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "int",
            10000,
            "How often transactions open past their timeout are looked for (and aborted).",
        ),
        Setting(
            "transaction.state.log.num.partitions",
            "int",
            50,
            "Partitions of __transaction_state (fixed when the topic is created).",
        ),
        Setting(
            "transaction.state.log.segment.bytes",
            "int",
            104857600,
            "Segment size of __transaction_state.",
        ),
        Setting(
            "share.coordinator.state.topic.num.partitions",
            "int",
            50,
            "Partitions of __share_group_state (fixed when the topic is created).",
        ),
        Setting(
            "share.coordinator.state.topic.replication.factor",
            "short",
            3,
            "Replicas of __share_group_state (at most the live brokers when it is made).",
        ),
        Setting(
            "share.coordinator.state.topic.min.isr",
            "short",
            2,
            "min.insync.replicas of __share_group_state (at most its replication factor).",
        ),
        Setting(
            "share.coordinator.state.topic.segment.bytes",
            "int",
            104857600,
            "Segment size of __share_group_state.",
        ),
        Setting(
            "share.coordinator.state.topic.prune.interval.ms",
            "int",
            300000,
            "How often the records of __share_group_state no share partition needs any more"
            " (those before the oldest snapshot still in use) are deleted.",
        ),
        Setting(
            "share.coordinator.snapshot.update.records.per.snapshot",
            "int",
            500,
            "Update records a share partition's state gets between two snapshots of it in"
            " __share_group_state (0-500).",
        ),
        Setting(
            "share.coordinator.write.timeout.ms",
            "int",
            5000,
            "How long a write to __share_group_state waits for its ISR to have it; then the"
            " writer gets COORDINATOR_NOT_AVAILABLE.",
        ),
        Setting(
            "share.coordinator.state.max.count",
            "int",
            100000,
            "Most share-partition states a share coordinator keeps; initializing one more"
            " gets INVALID_REQUEST until some are deleted.",
        ),
        Setting(
            "share.coordinator.state.max.batches",
            "int",
            20000,
            "Most state batches one share partition's state may hold, and one write carry;"
            " beyond, the write gets INVALID_REQUEST.",
        ),
        Setting(
            "schema.registry.listeners",
            "string",
            "",
            "Where the schema registry (Confluent's Schema Registry REST API) listens:"
            " http://host:port or https://host:port (port 0: any free port, logged); empty:"
            " off. https takes the TLS settings of a listener named SCHEMA_REGISTRY"
            " (listener.name.schema_registry.ssl.*, else ssl.*).",
        ),
        Setting(
            "schema.registry.advertised.listener",
            "string",
            "",
            "The registry's URL the other brokers forward writes to (default: its listener,"
            " with the bound port, and the broker's advertised host for 0.0.0.0).",
        ),
        Setting(
            "schema.registry.topic.replication.factor",
            "short",
            3,
            "Replicas of _schemas, the compacted topic the registry keeps everything in (at"
            " most the live brokers when it is made).",
        ),
        Setting(
            "schema.registry.write.timeout.ms",
            "int",
            10000,
            "How long a write to the registry may take (its record taken by the ISR of"
            " _schemas, or a write forwarded to the broker that leads _schemas); then 50002.",
        ),
        Setting(
            "schema.registry.max.schemas",
            "int",
            100000,
            "Most schema versions the registry keeps (soft-deleted ones count until deleted"
            " permanently); registering one more gets 42205.",
        ),
        Setting(
            "schema.registry.max.subjects",
            "int",
            10000,
            "Most subjects, and most subjects with a compatibility level or mode of their"
            " own; one more gets 42205.",
        ),
        Setting(
            "schema.registry.max.schema.bytes",
            "int",
            524288,
            "Largest schema text the registry accepts (UTF-8 bytes); a larger one gets 42209.",
        ),
        Setting(
            "schema.registry.max.total.schema.bytes",
            "int",
            268435456,
            "Most bytes of schema text the registry keeps in all (each distinct schema once);"
            " registering a new schema beyond gets 42205.",
        ),
        Setting(
            "schema.registry.max.connections",
            "int",
            1000,
            "Most connections open at once to the schema registry's listener; one more is"
            " closed at once.",
        ),
        Setting(
            "schema.registry.max.request.bytes",
            "int",
            2097152,
            "Largest HTTP request body the registry reads; a larger one gets 413.",
        ),
        Setting(
            "iceberg.enabled",
            "boolean",
            False,
            "Write the topics whose iceberg.mode is not disabled as Apache Iceberg tables (the"
            " pyiceberg extra: pip install 'headrace[iceberg]'); each partition's leader writes"
            " its committed records.",
        ),
        Setting(
            "iceberg.default.mode",
            "string",
            "disabled",
            "How a topic becomes a table: disabled; key_value (key, value, headers, partition,"
            " offset, timestamp); value_schema_id_prefix (the value's columns from its schema in"
            " the schema registry, Confluent's wire format: byte 0, then the 4-byte schema id).",
            topic="iceberg.mode",
        ),
        Setting(
            "iceberg.default.upsert",
            "boolean",
            False,
            "On a compacted topic (cleanup.policy compact) written as a table: the table holds"
            " the latest record of each key (a record replaces its key's row, a tombstone"
            " deletes it) instead of every record.",
            topic="iceberg.upsert",
        ),
        Setting(
            "iceberg.commit.interval.ms",
            "int",
            60000,
            "How often each partition leader commits its topics' new committed records as an"
            " Iceberg snapshot: the lag between a record's acknowledgement and its row.",
        ),
        Setting(
            "iceberg.catalog.type",
            "string",
            "sql",
            "sql: pyiceberg's SQL catalog (SQLite in the data directory unless"
            " iceberg.catalog.uri names another database); rest: an Iceberg REST catalog at"
            " iceberg.catalog.uri.",
        ),
        Setting(
            "iceberg.catalog.uri",
            "string",
            "",
            "The catalog: a SQLAlchemy URL for sql (default sqlite:///<data dir>/iceberg/"
            "catalog.db; every broker of a cluster must name the same one), the REST"
            " catalog's http(s) URL for rest.",
        ),
        Setting(
            "iceberg.catalog.warehouse",
            "string",
            "",
            "Where the tables' files go (a path or URL pyiceberg writes to); default"
            " <data dir>/iceberg/warehouse. Shared by every broker of a cluster.",
        ),
        Setting(
            "iceberg.catalog.name",
            "string",
            "headrace",
            "The catalog's name (the SQL catalog's catalog_name column; what engines call it).",
        ),
        Setting(
            "iceberg.namespace",
            "string",
            "kafka",
            "The namespace the tables are made in; a topic's table is <namespace>.<topic>.",
        ),
        Setting(
            "iceberg.partition.buffer.max.bytes",
            "int",
            64 * 1024 * 1024,
            "Most record bytes of one partition read into memory for one commit; a partition"
            " further behind catches up over several commits, one after the other.",
        ),
        Setting(
            "iceberg.buffer.max.bytes",
            "int",
            256 * 1024 * 1024,
            "Most record bytes of all partitions read into memory for commits at once; the"
            " other partitions wait for the next round.",
        ),
        Setting(
            "iceberg.max.open.files",
            "int",
            2,
            "Tables written at once (each writes one Parquet file at a time), in as many"
            " worker processes: never the broker's event loop or its interpreter lock.",
        ),
        Setting(
            "iceberg.snapshot.retention.ms",
            "long",
            24 * 3600 * 1000,
            "Snapshots of a topic's table older than this are expired (time travel reaches back"
            " this far; the rows stay); -1: every snapshot is kept. Old metadata files are"
            " deleted beyond the newest 100.",
        ),
        Setting(
            "iceberg.retry.backoff.max.ms",
            "int",
            30000,
            "Longest wait before trying again after a failed commit (a failing catalog, a full"
            " disk); the wait doubles from iceberg.commit.interval.ms / 10 up to it. Produce is"
            " never held back.",
        ),
        Setting(
            "iceberg.round.timeout.ms",
            "int",
            300000,
            "Longest a worker process may take over one commit of a topic's table (read, write"
            " Parquet, commit); one that has not answered by then is killed and the commit is"
            " tried again as after a failure. 1000 to 2147483647.",
        ),
        Setting(
            "iceberg.worker.nice",
            "int",
            10,
            "How much lower than the broker's the worker processes' CPU priority is (os.nice: 0"
            " the broker's own, 19 the lowest), so the request path goes first on busy cores."
            " 0 to 19. Used where iceberg.worker.sched.idle is false or not available.",
        ),
        Setting(
            "iceberg.worker.sched.idle",
            "boolean",
            True,
            "Run the worker processes under Linux's SCHED_IDLE policy: they get only the CPU"
            " time no other process wants, and a request's thread that wakes takes their core at"
            " once, so produce latency hardly feels them; on cores that are always busy the"
            " tables fall behind (the lag metric shows it). false: they run at"
            " iceberg.worker.nice.",
        ),
    ]
}

# Confluent's subject name strategies (``confluent.<key|value>.subject.name.strategy``): the
# class names Confluent Server takes, and the short names
_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
SUBJECT_NAME_STRATEGY = _STRATEGY_PACKAGE + "TopicNameStrategy"
SUBJECT_NAME_STRATEGIES = {
    prefix + name
    for prefix in ("", _STRATEGY_PACKAGE)
    for name in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
}

# topic settings with no broker setting beside them (Confluent Server's names): their default
# is their own (``topic`` is their name, and no broker setting has it)
TOPIC_ONLY_SETTINGS = [
    Setting(
        "confluent.key.schema.validation",
        "boolean",
        False,
        "Every record's key must carry the schema registry's wire format (magic byte 0 and a"
        " schema id) with an id registered under the key's subject; else the batch is refused"
        " (INVALID_RECORD). A null key passes. Needs the schema registry on.",
        topic="confluent.key.schema.validation",
    ),
    Setting(
        "confluent.value.schema.validation",
        "boolean",
        False,
        "As confluent.key.schema.validation, for the value (a null value, a tombstone, passes).",
        topic="confluent.value.schema.validation",
    ),
    Setting(
        "confluent.key.subject.name.strategy",
        "string",
        SUBJECT_NAME_STRATEGY,
        "The subject a key's schema id must be registered under: TopicNameStrategy"
        " (<topic>-key), RecordNameStrategy (the schema's record name) or"
        " TopicRecordNameStrategy (<topic>-<record name>); Confluent's class names or these.",
        topic="confluent.key.subject.name.strategy",
    ),
    Setting(
        "confluent.value.subject.name.strategy",
        "string",
        SUBJECT_NAME_STRATEGY,
        "As confluent.key.subject.name.strategy, for the value (TopicNameStrategy: <topic>-value).",
        topic="confluent.value.subject.name.strategy",
    ),
]

# topic setting name -> the broker setting that gives its default (itself for a topic-only one)
TOPIC_SETTINGS: dict[str, Setting] = {s.topic: s for s in BROKER_SETTINGS.values() if s.topic}
TOPIC_SETTINGS.update((s.name, s) for s in TOPIC_ONLY_SETTINGS)
_TOPIC_CHOICES = {
    "cleanup.policy": {"delete", "compact"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "compression.type": {"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
    "confluent.key.subject.name.strategy": SUBJECT_NAME_STRATEGIES,
    "confluent.value.subject.name.strategy": SUBJECT_NAME_STRATEGIES,
    "iceberg.mode": {"disabled", "key_value", "value_schema_id_prefix"},
}

BROKER_CHOICES = {
    "log.io.backend": {"os", "io_uring"},
    "iceberg.catalog.type": {"sql", "rest"},
    "iceberg.default.mode": {"disabled", "key_value", "value_schema_id_prefix"},
    "ssl.keystore.type": {"PEM"},
    "ssl.truststore.type": {"PEM"},
    "ssl.client.auth": {"none", "requested", "required"},
    "ssl.endpoint.identification.algorithm": {"https", "HTTPS", ""},
}

# broker settings with a least value (a bound that cannot be zero)
BROKER_MINIMUMS = {
    "quota.window.num": 1,
    "quota.window.size.seconds": 1,
    "transaction.partition.verification.max.guards": 1,
    "iceberg.commit.interval.ms": 1,
    "iceberg.partition.buffer.max.bytes": 1,
    "iceberg.buffer.max.bytes": 1,
    "iceberg.max.open.files": 1,
    "iceberg.retry.backoff.max.ms": 1,
    "iceberg.snapshot.retention.ms": -1,
}

_TOPIC_RANGES = {
    "segment.bytes": (61, None),
    "segment.ms": (1, None),
    "segment.index.bytes": (24, None),
    "index.interval.bytes": (0, None),
    "retention.ms": (-1, None),
    "retention.bytes": (-1, None),
    "delete.retention.ms": (0, None),
    "min.cleanable.dirty.ratio": (0.0, 1.0),
    "min.compaction.lag.ms": (0, None),
    "max.compaction.lag.ms": (1, None),
    "flush.messages": (1, None),
    "message.timestamp.before.max.ms": (0, None),
    "message.timestamp.after.max.ms": (0, None),
    "flush.ms": (0, None),
}


def validate_topic_setting(name: str, value: str) -> Any:
    """Parse a per-topic setting; raises ConfigError for unknown names or bad values."""
    setting = TOPIC_SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown topic config {name!r}")
    parsed = parse(setting, value)
    choices = _TOPIC_CHOICES.get(name)
    if choices is not None:
        words = {w.strip() for w in str(parsed).split(",")} if setting.type == "list" else {parsed}
        if not words <= choices:
            raise ConfigError(f"{name}: {value!r} is not one of {sorted(choices)}")
    low, high = _TOPIC_RANGES.get(name, (None, None))
    if (low is not None and parsed < low) or (high is not None and parsed > high):
        raise ConfigError(f"{name}: {value!r} is out of range [{low}, {high}]")
    return parsed
