"""The broker process: how the pieces are wired, start-up, clean shutdown.

How this works
--------------
``BrokerServer.__init__`` builds everything, and nothing waits for ``start`` to exist: the
append stage (``Appender``, produce's copies into the page cache), the flush stage
(``GroupCommit``), the cluster metadata (``Cluster``, in ZooKeeper, or ``SingleNode``, a broker
on its own: the one place that tells the two apart), the topic table (``TopicManager``, with
``topics.flush(partitions)``, the one way to make appends durable), the producer ids, the
coordinators, the log cleaner, the ``BrokerClient`` of the inter-broker traffic, and in a
cluster the replica manager (roles and moves). Each is handed what it uses rather than the broker,
so each can be built and tested alone. ``Dispatcher`` (dispatch.py) is the pipeline's handler:
it calls each request's API module with the ``BrokerServer`` as the module's ``broker``.
``metrics`` (metrics.py) is what the request path counts; with ``metrics.port`` set,
``metrics_http`` serves it from ``start`` on (``ready`` says when the broker serves).

Start-up (``start``) locks the data directory (data_dir.py), loads the logs (recovering them
after an unclean stop), listens, joins the cluster (``_join``: a broker on its own has nothing
to join), reads the shared documents (ACLs, quotas, group configs, delegation tokens, feature
levels: cluster/documents.py) and SCRAM users and follows their changes, replays the groups',
transactions' and share groups' state, starts serving, then the background jobs
(``background.run_every``: the periodic flush and the expiry of idle producers, offset expiry,
the transaction timer, the pruning of ``__share_group_state``, the log cleaner's passes).
Shutdown stops accepting, answers what is in flight, stops the background jobs, flushes every
log, marks the stop clean and releases the lock.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headrace.broker.background import run_every
from headrace.broker.client.broker_client import BrokerClient
from headrace.broker.client.inter_broker import client_security
from headrace.broker.cluster.documents import UNREADABLE, Document, follow
from headrace.broker.cluster.features import Features, registration
from headrace.broker.cluster.metadata import ClusterError
from headrace.broker.cluster.single_node import SingleNode
from headrace.broker.cluster.znodes import Endpoint
from headrace.broker.config.config import BrokerConfig, connection_overrides
from headrace.broker.config.listeners import Listener, inter_broker, listeners
from headrace.broker.config.settings import ConfigError
from headrace.broker.coordinator.group.group_coordinator import GroupCoordinator
from headrace.broker.coordinator.group.group_offsets import OFFSETS_TOPIC
from headrace.broker.coordinator.share.persister import SharePersister
from headrace.broker.coordinator.share.share_coordinator import ShareCoordinator
from headrace.broker.coordinator.share.share_state_log import SHARE_STATE_TOPIC
from headrace.broker.coordinator.txn.producer_ids import ProducerIdManager
from headrace.broker.coordinator.txn.transaction_coordinator import TransactionCoordinator
from headrace.broker.coordinator.txn.transaction_log import TRANSACTION_TOPIC
from headrace.broker.log.log_cleaner import LogCleaner
from headrace.broker.log.topics import TopicManager
from headrace.broker.replication.replica_fetcher import ReplicaFetchers
from headrace.broker.replication.replica_manager import ReplicaManager
from headrace.broker.security.authorizer import Authorizer, from_document
from headrace.broker.security.delegation_tokens import DelegationTokens
from headrace.broker.security.quotas import ClientQuotas
from headrace.broker.security.quotas import from_document as quotas_from_document
from headrace.broker.security.sasl import SaslConfig
from headrace.broker.security.sasl import listener_config as sasl_config
from headrace.broker.security.scram_credentials import ScramCredentials, ScramFile, ScramZnodes
from headrace.broker.security.tls import server_context
from headrace.broker.share.dead_letters import DeadLetters
from headrace.broker.share.share_partition_manager import SharePartitionManager
from headrace.pipeline import (
    Appender,
    ByteBudget,
    GroupCommit,
    Limits,
    Router,
    serve,
)
from headrace.protocol import (
    ApiKey,
)
from headrace.storage import StorageError

from .data_dir import DataDir, DataDirInUse
from .dispatch import Dispatcher
from .metrics import BrokerMetrics

if TYPE_CHECKING:
    from headrace.broker.cluster.metadata import ClusterMetadata
    from headrace.broker.iceberg.translator import IcebergTranslator
    from headrace.broker.registry.http_api import RegistryServer
    from headrace.broker.registry.registry import SchemaRegistry

    from .metrics_http import MetricsServer

log = logging.getLogger("headrace")


# a connection's frames are capped at this until it has sent one valid request (as Kafka caps
# them before authentication), then at socket.request.max.bytes
FIRST_REQUEST_MAX_BYTES = 512 * 1024


class StartupError(Exception):
    """The broker cannot start (data directory unusable, port taken...)."""


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        broker_id = int(config["broker.id"])
        self.node_id = broker_id if broker_id >= 0 else int(config["node.id"])
        # where to listen (listeners.py): the first listener's address is the broker's
        # host:port in logs and the ready file; bound ports are known after start
        self.listeners = listeners(config)
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        self.bound: dict[str, int] = {}  # listener name -> the port it listens on
        self.data_dir = Path(str(config["log.dirs"])).absolute()
        self.group_commit = GroupCommit(int(config["log.flush.threads"]))
        self.appender = Appender()
        # what the request path counts; the rest is read at scrape time (metrics.py)
        self.metrics = BrokerMetrics()
        self.group_commit.observer = self.metrics.flushed
        self._started = False  # logs loaded, listening and (in a cluster) registered
        self._metrics_server: MetricsServer | None = None
        # the cluster metadata: membership and topics in ZooKeeper (cluster/cluster.py), or
        # a broker on its own (cluster/single_node.py); SCRAM users where it keeps them
        self.cluster: ClusterMetadata
        users: ScramFile | ScramZnodes
        if config["zookeeper.connect"]:
            from headrace.broker.cluster.cluster import Cluster

            self.cluster = Cluster(config, self.node_id)
            users = ScramZnodes(self.cluster.zk_client)
        else:
            self.cluster = SingleNode(self.node_id, self.data_dir)
            users = ScramFile(self.data_dir)
        self.cluster.inter_broker_listener = inter_broker(config, self.listeners).name
        self.topics = TopicManager(self.data_dir, config, self.group_commit, self.cluster)
        self.topics.on_deleted = self._topics_deleted
        self.cluster_id = ""  # the data directory's, then the cluster's (``_join``)
        self.producer_ids = ProducerIdManager(self.cluster.producer_id_block)
        self.groups = GroupCoordinator(self.node_id, self.topics, config)
        # requests to the other brokers, each kind on a channel of its own (transaction
        # markers here, replica fetches per fetcher); the cluster's registry gives their
        # addresses
        self.broker_client = BrokerClient(
            self.cluster.address_of, client_id=f"headrace-broker-{self.node_id}"
        )
        self.cleaner = LogCleaner(
            self.topics,
            retention_check_ms=int(config["log.retention.check.interval.ms"]),
            backoff_ms=int(config["log.cleaner.backoff.ms"]),
            compaction=bool(config["log.cleaner.enable"]),
            dedupe_buffer_bytes=int(config["log.cleaner.dedupe.buffer.size"]),
        )
        self.transactions = TransactionCoordinator(
            self.topics,
            self.producer_ids,
            self.groups,
            node_id=self.node_id,
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            expiration_ms=int(config["transactional.id.expiration.ms"]),
            max_ids=int(config["transactional.id.max.count"]),
            check_interval_ms=int(
                config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
            ),
            state_partitions=int(config["transaction.state.log.num.partitions"]),
            state_segment_bytes=int(config["transaction.state.log.segment.bytes"]),
            write_timeout_ms=int(config["request.timeout.ms"]),
            leader_of=self.cluster.leader_of,
            broker_client=self.broker_client.channel("txn-markers"),
            join_client=self.broker_client.channel("txn-join"),
        )
        # share groups' state (KIP-932): the coordinator of the keys whose partition of
        # __share_group_state is led here, and the persister the partition leaders call (here,
        # or at the coordinator over a channel of its own)
        self.share_coordinator = ShareCoordinator(
            self.topics,
            self._partition_count,
            node_id=self.node_id,
            state_partitions=int(config["share.coordinator.state.topic.num.partitions"]),
            state_segment_bytes=int(config["share.coordinator.state.topic.segment.bytes"]),
            updates_per_snapshot=int(
                config["share.coordinator.snapshot.update.records.per.snapshot"]
            ),
            write_timeout_ms=int(config["share.coordinator.write.timeout.ms"]),
            max_keys=int(config["share.coordinator.state.max.count"]),
            max_batches=int(config["share.coordinator.state.max.batches"]),
            prune_interval_ms=int(config["share.coordinator.state.topic.prune.interval.ms"]),
        )
        self.share_state = SharePersister(
            self.share_coordinator,
            self.broker_client.channel("share-state"),
            node_id=self.node_id,
            timeout_ms=int(config["request.timeout.ms"]),
        )
        self.groups.share.persister = self.share_state  # share groups' state initialized
        # in a cluster: this broker's replicas and moves (replica_manager.py), fetchers
        self.replicas: ReplicaManager | None = None
        if not isinstance(self.cluster, SingleNode):
            pool = ReplicaFetchers(self.broker_client, self.node_id, config, self.topics.flush)
            self.replicas = ReplicaManager(self.node_id, self.topics, self.cluster, pool, config)
            self.replicas.on_leadership = self._partitions_moved
            self.replicas.on_gaining = self._gaining
            self.cluster.on_fenced = self._fenced
            self.topics.replicas = self.cluster.replicas = self.replicas
        self.read_pool = ThreadPoolExecutor(4, thread_name_prefix="headrace-read")
        # fetch responses in memory: reserved before reading, released once sent
        self.fetch_budget = ByteBudget(int(config["queued.max.response.bytes"]))
        self._servers: list[asyncio.base_events.Server] = []
        self._tls: dict[str, ssl.SSLContext] = {}  # listener name -> its TLS context
        self.sasl: dict[str, SaslConfig] = {}  # listener name -> its SASL settings
        self.scram_credentials = ScramCredentials(users)
        # ACLs and client quotas: in the data directory, or in a cluster in ZooKeeper
        self.authorizer = Authorizer(config)
        self.acl_document = self.cluster.document("acls")
        self.quotas = ClientQuotas(config)
        self.quota_document = self.cluster.document("quotas")
        self.features = Features(self.cluster.document("features"), self.node_id)
        # share groups' records in flight on the partitions led here, and the share sessions
        self.shares = SharePartitionManager(
            self.groups.configs,
            max_partitions=int(config["group.share.max.partitions"]),
            max_sessions=int(config["group.share.max.share.sessions"]),
            read_pool=self.read_pool,
            persister=self.share_state,
            dead_letters=DeadLetters(
                topics=self.topics,
                cluster=self.cluster,
                config=config,
                configs=self.groups.configs,
                features=self.features,
                read_pool=self.read_pool,
                client=self.broker_client.channel("share-dlq"),
            ),
        )
        self.group_config_document = self.cluster.document("group_configs")
        self.delegation_tokens = DelegationTokens(config)
        self.delegation_token_document = self.cluster.document("delegation_tokens")
        # the schema registry (schema.registry.listeners): made at start when it is on
        self.schema_registry: SchemaRegistry | None = None
        self._registry_server: RegistryServer | None = None
        self.registry_url = ""  # what other brokers forward registry writes to
        # topics as Iceberg tables (iceberg.enabled): made at start when it is on
        self.iceberg: IcebergTranslator | None = None
        self._router: Router | None = None
        self._tasks: list[asyncio.Task] = []
        self.dir = DataDir(self.data_dir, self.node_id)  # its lock is held from start to stop
        self.dispatcher = Dispatcher(self)  # the pipeline's handler (dispatch.py)

    def brokers(self, listener: Listener | None = None) -> dict[int, Endpoint]:
        """The live brokers by id, as a client that came through ``listener`` reaches them:
        every registered one (this one, or in a cluster every live one) that has a listener of
        that name (as Kafka answers); default: the inter-broker listener."""
        name = listener.name if listener is not None else self.cluster.inter_broker_listener
        found = {b: e.on(name) for b, e in sorted(self.cluster.brokers.items())}
        known = {b: e for b, e in found.items() if e is not None}
        if self.node_id not in known:  # (not registered yet, or again): still here
            host, port = self.advertised(listener)
            rack = str(self.config["broker.rack"]) or None
            known = dict(sorted({**known, self.node_id: Endpoint(host, port, rack)}.items()))
        return known

    @property
    def controller_id(self) -> int:
        return self.cluster.controller_id

    def advertised(self, listener: Listener | None = None) -> tuple[str, int]:
        """The address clients of ``listener`` (default: the inter-broker one) are given."""
        if listener is None:
            listener = inter_broker(self.config, self.listeners)
        port = listener.advertised_port or self.bound.get(listener.name, listener.port)
        return listener.advertised_host, port

    # lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.monotonic()
        if self.config.ignored:
            log.warning(
                "settings of Apache Kafka that change nothing in Headrace, ignored: %s",
                ", ".join(self.config.ignored),
            )
        self._tls, self.sasl = self._security()
        if bool(self.config["iceberg.enabled"]):
            import importlib.util

            if importlib.util.find_spec("pyiceberg") is None:  # (found, not imported)
                raise StartupError(
                    "iceberg.enabled needs pyiceberg: pip install 'headrace[iceberg]'"
                )
        await self._serve_metrics()
        try:
            await asyncio.to_thread(self._open_data_dir)
        except BaseException:
            await self._stop_metrics()
            raise
        config = self.config
        limits = Limits(
            max_frame=int(config["socket.request.max.bytes"]),
            max_first_frame=min(FIRST_REQUEST_MAX_BYTES, int(config["socket.request.max.bytes"])),
            per_connection=int(config["connection.max.request.bytes"]),
            per_broker=int(config["queued.max.request.bytes"]),
            requests_per_connection=int(config["queued.max.requests"]),
            response_bytes=int(config["connection.max.response.bytes"]),
            max_connections=int(config["max.connections"]),
            max_connections_per_ip=int(config["max.connections.per.ip"]),
            per_ip_overrides=connection_overrides(str(config["max.connections.per.ip.overrides"])),
            idle_ms=int(config["connections.max.idle.ms"]),
            send_buffer=int(config["socket.send.buffer.bytes"]),
        )
        limits.admission = self._admission
        try:
            await self._listen(limits)
            await self._serve_registry()
        except StartupError:
            await self._abandon()
            raise
        await self._join()
        if self.schema_registry is not None:
            self.schema_registry.start()
        self._tasks.append(
            asyncio.create_task(run_every(self._flush_interval, self._flush_due, "periodic flush"))
        )
        expiry_s = int(self.config["producer.id.expiration.check.interval.ms"]) / 1000
        self._tasks.append(
            asyncio.create_task(
                run_every(expiry_s, self.topics.expire_producers, "producer id expiration")
            )
        )
        if self.delegation_tokens.enabled:
            every_s = self.delegation_tokens.check_interval_ms / 1000
            self._tasks.append(
                asyncio.create_task(
                    run_every(every_s, self._drop_expired_tokens, "delegation token expiry")
                )
            )
        self.cleaner.start()
        self._start_iceberg()
        # only now are connections accepted: until here they wait in the listen backlog, so
        # no client is answered before the broker knows what to answer (in a cluster: it is
        # registered and has read the brokers, topics, partition states and controller)
        for server in self._servers:
            await server.start_serving()
        self._started = True
        log.info(
            "headrace listening on %s, data in %s (%.0f ms)",
            ", ".join(
                f"{x.name}://{x.host or '0.0.0.0'}:{self.bound[x.name]} ({x.protocol})"
                for x in self.listeners
            ),
            self.data_dir,
            (time.monotonic() - started) * 1000,
        )

    async def _serve_metrics(self) -> None:
        """The Prometheus and health endpoint (``metrics.port``), up before the logs are
        loaded so that /health answers and /ready says "not yet" meanwhile."""
        port = int(self.config["metrics.port"])
        if port < 0:
            return
        from .metrics_http import MetricsServer  # (with prometheus_client: loaded when used)

        server = MetricsServer(self, self.host, port)
        try:
            await server.start()
        except OSError as e:
            raise StartupError(
                f"metrics.port: cannot listen on {self.host or '0.0.0.0'}:{port}: {e.strerror}"
            ) from e
        self._metrics_server = server
        log.info("metrics on http://%s:%d/metrics", self.host or "0.0.0.0", server.port)

    async def _serve_registry(self) -> None:
        """The schema registry's listener (``schema.registry.listeners``), when it is on: its
        libraries (aiohttp and the schema parsers) are imported only then."""
        text = str(self.config["schema.registry.listeners"]).strip()
        if not text:
            return
        from urllib.parse import urlsplit

        from headrace.broker.registry.auth import RegistryAuth
        from headrace.broker.registry.http_api import RegistryServer
        from headrace.broker.registry.registry import SchemaRegistry
        from headrace.broker.registry.schemas_log import SchemasLog

        url = urlsplit(text)
        if url.scheme not in ("http", "https") or url.port is None or "," in text:
            raise StartupError(
                f"schema.registry.listeners: {text!r} is not one http://host:port or"
                " https://host:port"
            )
        config = self.config
        server_tls = client_tls = None
        if url.scheme == "https":  # the TLS settings of listener SCHEMA_REGISTRY (or ssl.*)
            from headrace.broker.config.listeners import REGISTRY_LISTENER, Listener
            from headrace.broker.security.tls import client_context, server_context

            host = url.hostname or ""
            listener = Listener(REGISTRY_LISTENER, "SSL", host, url.port, host, 0)
            try:
                server_tls = server_context(config, listener)
                client_tls = client_context(config, listener)
            except ConfigError as e:
                raise StartupError(f"schema.registry.listeners: {e}") from e
        timeout_ms = int(config["schema.registry.write.timeout.ms"])
        registry = SchemaRegistry(
            SchemasLog(
                self.topics, self.cluster, node_id=self.node_id, write_timeout_ms=timeout_ms
            ),
            max_schemas=int(config["schema.registry.max.schemas"]),
            max_subjects=int(config["schema.registry.max.subjects"]),
            max_schema_bytes=int(config["schema.registry.max.schema.bytes"]),
            max_total_bytes=int(config["schema.registry.max.total.schema.bytes"]),
            write_timeout_ms=timeout_ms,
        )
        server = RegistryServer(
            registry,
            node_id=self.node_id,
            url_of=self._registry_url_of,
            cluster_id=lambda: self.cluster_id,
            host=url.hostname or "",
            port=url.port,
            max_request_bytes=int(config["schema.registry.max.request.bytes"]),
            max_connections=int(config["schema.registry.max.connections"]),
            auth=RegistryAuth(self.authorizer, self.scram_credentials),
            tls=server_tls,
            forward_tls=client_tls,
        )
        try:
            await server.start()
        except OSError as e:
            await server.stop()
            raise StartupError(
                f"schema.registry.listeners: cannot listen on {text}: {e.strerror}"
            ) from e
        self.schema_registry, self._registry_server = registry, server
        host = url.hostname or ""
        if host in ("", "0.0.0.0", "::"):
            host = self.advertised()[0]
        self.registry_url = str(config["schema.registry.advertised.listener"]).strip() or (
            f"{url.scheme}://{host}:{server.port}"
        )
        log.info(
            "schema registry on %s://%s:%d", url.scheme, url.hostname or "0.0.0.0", server.port
        )

    @property
    def registry_port(self) -> int | None:
        """The port the schema registry listens on (None: off)."""
        return self._registry_server.port if self._registry_server is not None else None

    def _registry_url_of(self, node: int) -> str | None:
        endpoint = self.cluster.brokers.get(node)
        return endpoint.registry or None if endpoint is not None else None

    def _start_iceberg(self) -> None:
        """The Iceberg translator (``iceberg.enabled``): the partition leaders' writer of the
        topics whose ``iceberg.mode`` is not disabled. Its libraries load with the first such
        topic's first round."""
        if not bool(self.config["iceberg.enabled"]):
            return
        from headrace.broker.iceberg.translator import IcebergSettings, IcebergTranslator

        self.iceberg = IcebergTranslator(
            self.topics, IcebergSettings.of(self.config, self.data_dir), self.schema_registry
        )
        self.iceberg.start()

    async def _stop_registry(self) -> None:
        if self.schema_registry is not None:
            self.schema_registry.stop()
        if self._registry_server is not None:
            await self._registry_server.stop()
            self._registry_server = None

    @property
    def metrics_port(self) -> int | None:
        """The port /metrics, /health and /ready answer on (None: ``metrics.port`` is -1)."""
        return self._metrics_server.port if self._metrics_server is not None else None

    @property
    def ready(self) -> bool:
        """What /ready says: started (logs loaded, listening, in a cluster registered) and
        not stopping, nor fenced (a cluster broker whose ZooKeeper session was lost, until
        the controller has confirmed it again)."""
        return self._started and not self.cluster.fenced

    @property
    def router(self) -> Router | None:
        return self._router

    def unavailable_coordinator_partitions(self) -> dict[str, list[int]]:
        """Partitions of the internal topics whose state failed to load (see the coordinators'
        ``unavailable``): their groups and transactions answer COORDINATOR_LOAD_IN_PROGRESS."""
        return {
            OFFSETS_TOPIC: sorted(self.groups.unavailable),
            TRANSACTION_TOPIC: sorted(self.transactions.unavailable),
            SHARE_STATE_TOPIC: sorted(self.share_coordinator.unavailable),
        }

    def _security(self) -> tuple[dict[str, ssl.SSLContext], dict[str, SaslConfig]]:
        """TLS contexts of the SSL and SASL_SSL listeners and SASL settings of the SASL ones,
        made before anything else so that a bad setting stops the start at once (its message
        names the setting)."""
        contexts, sasl = {}, {}
        try:
            for listener in self.listeners:
                if listener.tls:
                    contexts[listener.name] = server_context(self.config, listener)
                if listener.sasl:
                    sasl[listener.name] = sasl_config(self.config, listener)
            if self.replicas is not None:  # how it reaches the others (inter_broker.py)
                self.broker_client.security = client_security(self.config, self.listeners)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        return contexts, sasl

    async def _listen(self, limits: Limits) -> None:
        """One server per listener, all on one router (handler queues and limits are the
        broker's)."""
        for listener in self.listeners:
            try:
                server, self._router = await serve(
                    self.dispatcher,
                    listener.host,
                    listener.port,
                    limits,
                    queues=int(self.config["num.io.threads"]),
                    ssl=self._tls.get(listener.name),
                    listener=listener,
                    router=self._router,
                    start_serving=False,  # (``start`` begins accepting once ready)
                )
            except OSError as e:
                for server in self._servers:
                    server.close()
                raise StartupError(
                    f"listeners: cannot listen on {listener.name}://{listener.host}:"
                    f"{listener.port}: {e.strerror}"
                ) from e
            self._servers.append(server)
            self.bound[listener.name] = server.sockets[0].getsockname()[1]
        self.port = self.bound[self.listeners[0].name]

    async def _join(self) -> None:
        """Join the cluster (register, read the topics: the logs follow them; a broker on its
        own has nothing to join), read the ACLs, quotas and SCRAM users, load the
        coordinators' state, then serve: until then every partition and coordinator answers
        as fenced."""
        host, port = self.advertised()
        rack = str(self.config["broker.rack"]) or None
        registered = tuple((x.name, x.protocol, *self.advertised(x)) for x in self.listeners)
        if self.replicas is not None:
            await self.replicas.load()
            self.replicas.start()
        try:
            endpoint = Endpoint(
                host, port, rack, registered, registration(), registry=self.registry_url
            )
            await self.cluster.start(self.topics, endpoint)
        except ClusterError as e:
            await self._abandon()
            raise StartupError(str(e)) from None
        try:
            self.cluster_id = self.cluster.agree_cluster_id(self.cluster_id)
        except ClusterError as e:
            await self.cluster.stop()
            await self._abandon()
            raise StartupError(f"data directory {self.data_dir} {e}") from None
        # the shared documents and who applies them: read now (one that cannot be read stops
        # the start), then followed (an unreadable change is logged, the known state kept)
        followed: list[tuple[Document, Callable[[Any], None], str]] = [
            (self.acl_document, lambda v: self.authorizer.replace(from_document(v)), "ACLs"),
            (
                self.quota_document,
                lambda v: self.quotas.replace(quotas_from_document(v)),
                "client quotas",
            ),
            (self.group_config_document, self.groups.configs.replace, "group configs"),
            (self.delegation_token_document, self.delegation_tokens.replace, "delegation tokens"),
        ]
        where = ""
        try:
            for document, apply, _ in followed:
                where = document.where
                apply(await asyncio.to_thread(document.load))
            where = self.scram_credentials.store.where
            await asyncio.to_thread(self.scram_credentials.load)
            where = self.features.document.where
            await self.features.start()
        except (OSError, *UNREADABLE) as e:
            await self._abandon()
            raise StartupError(f"cannot read {where}: {e}") from None
        for document, apply, what in followed:
            follow(document, apply, what)
        self.scram_credentials.watch()
        if self.replicas is not None:
            self._check_inter_broker_principal()
            # the coordinators load the partitions this broker leads as the replica manager
            # tells them (``serve``), not all at once here
        await self.groups.start(load=self.replicas is None)
        await self.transactions.start(load=self.replicas is None)
        await self.share_coordinator.start(load=self.replicas is None)
        if self.replicas is not None:
            self.replicas.serve()
        self.cluster.serve()
        await self.cluster.controller_known()
        await asyncio.to_thread(self.dir.write_cluster_id, self.cluster_id)

    def _check_inter_broker_principal(self) -> None:
        """A warning when the principal brokers reach each other as lacks CLUSTER_ACTION."""
        authorizer = self.authorizer
        security = self.broker_client.security
        principal = security.principal
        if authorizer.enabled and principal is not None and principal not in authorizer.super_users:
            log.warning(
                "the authorizer is on: brokers reach each other through listener %s as %s,"
                " which needs CLUSTER_ACTION on the cluster (an ACL, or super.users) for"
                " replica fetches, partition moves and transaction markers",
                security.listener,
                principal,
            )

    async def _drop_expired_tokens(self) -> None:
        """(The controller's.) Remove the delegation tokens past their expiry."""
        tokens = self.delegation_tokens
        now = int(time.time() * 1000)
        if not self.cluster.controller.active or not any(
            t.expired(now) for t in tokens.tokens.values()
        ):
            return
        await self.delegation_token_document.change(lambda v: tokens.without_expired(v, now))

    async def _abandon(self) -> None:
        """Undo a start that failed after opening the data directory."""
        await self._stop_metrics()
        await self._stop_registry()
        for server in self._servers:
            server.close()
        if self._router is not None:
            await self._router.close()
        self.groups.stop()
        self.transactions.stop()
        self.share_coordinator.stop()
        await self.appender.close()
        await self.group_commit.close()
        await asyncio.to_thread(self._close_data_dir)
        self._servers = []

    async def _topics_deleted(self, names: set[str]) -> None:
        """Topics are gone (deleted here, or in a cluster by any broker): the coordinators
        purge what they keep about them."""
        self.metrics.topics_deleted(names)
        self.shares.forget_topics(lambda tid: self.topics.find(None, tid) is None)
        await self.groups.on_topics_deleted(names)

    def _admission(self, host: str, now: float) -> str | None:
        """Why a new connection is closed at once, if it is: a fenced broker (its ZooKeeper
        session lost, until the controller confirms it again) answers nothing, then the ip
        quotas (quotas.py)."""
        if self._started and self.cluster.fenced:
            return "fenced (the ZooKeeper session was lost): serving nothing until confirmed"
        return self.quotas.connection_refused(host, now)

    def _fenced(self) -> None:
        """The broker is fenced: its view of the cluster may be stale (another broker may lead
        its partitions by now) and it serves none of them, so it answers nothing: the acks=all
        writes waiting here are answered NOT_LEADER_OR_FOLLOWER, every connection is closed and
        new ones are closed at once until it is confirmed again (``_admission``). Its clients
        take it for down and ask the other brokers, which name the leaders elected meanwhile
        (left open, they would keep asking it, and it could only say what it knew before)."""
        assert self.replicas is not None
        self.replicas.fenced()
        if self._router is not None:
            for conn in list(self._router.connections):
                conn.close()

    def _gaining(self, name: str, index: int) -> None:
        """This broker is about to lead partition ``index`` of ``name``: if it holds a
        coordinator's state, its requests get COORDINATOR_LOAD_IN_PROGRESS until the
        coordinator has loaded it (``_partitions_moved``, told a moment later)."""
        if name == OFFSETS_TOPIC:
            self.groups.loading.add(index)
        elif name == TRANSACTION_TOPIC:
            self.transactions.loading.add(index)
        elif name == SHARE_STATE_TOPIC:
            self.share_coordinator.loading.add(index)

    async def _partitions_moved(self, name: str, gained: list[int], lost: list[int]) -> None:
        """Partitions moved here or away: a coordinator whose state partition it is loads or
        unloads what it keeps there."""
        if name == OFFSETS_TOPIC:
            await self.groups.partitions_moved(gained, lost)
        elif name == TRANSACTION_TOPIC:
            await self.transactions.partitions_moved(gained, lost)
        elif name == SHARE_STATE_TOPIC:
            await self.share_coordinator.partitions_moved(gained, lost)
        topic = self.topics.get(name)
        if topic is not None:
            for index in lost:  # a share partition's state goes with its leader
                self.shares.forget(topic_id=topic.topic_id, index=index)

    def _partition_count(self, topic_id) -> int | None:
        """The partitions of the cluster's topic ``topic_id``; None for an unknown id."""
        for record in self.cluster.topics.values():
            if record.topic_id == topic_id:
                return len(record.replicas)
        return None

    def _open_data_dir(self) -> None:
        try:
            self.dir.lock()
        except DataDirInUse as e:
            raise StartupError(str(e)) from None
        except OSError as e:
            self.dir.unlock()
            raise StartupError(f"data directory {self.data_dir} is not usable: {e}") from e
        clean = self.dir.stopped_cleanly()
        self.cluster_id = self.dir.cluster_id()
        try:
            self.topics.load(recover=not clean)
        except (StorageError, OSError, ValueError) as e:
            self.dir.unlock()
            raise StartupError(f"cannot open the logs in {self.data_dir}: {e}") from e
        self.dir.opened()
        if not clean:
            log.info("no clean-shutdown marker: logs were recovered")

    async def stop(self) -> None:
        """Stop accepting, answer in-flight requests, flush everything, mark the stop clean."""
        if not self._servers:
            return
        self._started = False
        if bool(self.config["controlled.shutdown.enable"]):
            timeout = int(self.config["controlled.shutdown.max.retries"]) * int(
                self.config["controlled.shutdown.retry.backoff.ms"]
            )
            await self.cluster.controller.controlled_shutdown(max(timeout, 0) / 1000)
        for server in self._servers:
            server.close()
        await self._stop_registry()
        for task in self._tasks:
            task.cancel()
        router = self._router
        assert router is not None  # set together with _server
        await router.drain(timeout=5.0)
        for conn in list(router.connections):
            conn.close()
        await router.close()
        await self.cluster.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        await self.cleaner.stop()
        if self.iceberg is not None:
            await self.iceberg.stop()
        self.groups.stop()
        self.transactions.stop()
        self.shares.close()
        self.share_coordinator.stop()
        await self.broker_client.close()
        await self.appender.close()
        await self.group_commit.close()
        await asyncio.to_thread(self._close_data_dir)
        self.read_pool.shutdown(wait=True)
        self._servers = []
        await self._stop_metrics()
        log.info("headrace stopped cleanly")

    async def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None

    def _close_data_dir(self) -> None:
        self.topics.close()
        self.dir.closed()

    def _flush_interval(self, topic=None) -> float:
        """How old unflushed data may get: ``flush.ms``, and at the latest
        ``log.flush.offset.checkpoint.interval.ms``, so that recovery reads little."""
        checkpoint = int(self.config["log.flush.offset.checkpoint.interval.ms"]) / 1000
        if topic is not None:
            return min(int(topic.setting("flush.ms")) / 1000, checkpoint)
        return min((self._flush_interval(t) for t in self.topics.all_topics()), default=checkpoint)

    async def _flush_due(self) -> None:
        now = asyncio.get_running_loop().time()
        due = [
            p
            for p in self.topics.all_partitions()
            if p.unflushed and now - p.flushed_at >= self._flush_interval(p.topic)
        ]
        if due:
            await self.topics.flush(due)


__all__ = ["ApiKey", "BrokerServer", "StartupError"]
