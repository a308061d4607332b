"""A broker answers clients only once it knows the cluster: real brokers and ZooKeeper on
127.0.0.1, and a client that asks a starting broker for Metadata as fast as it can.

A broker binds its port before it has registered and read the cluster (it must know its port
to register it), but accepts connections only once it knows the brokers, topics, partition
states and controller: a client that connects early waits in the listen backlog and then gets
a whole answer, never one with no brokers, no topics or no controller (librdkafka's admin
client then waits for a controller until its own timeout; other clients drop the partitions
they had)."""

from __future__ import annotations

import socket
import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kafkawire import WireClient

from headrace.broker.tools.process import BrokerProcess
from headrace.protocol import ApiKey, messages

SESSION_MS = 4000


def start_broker(tmp_path, zk_connect: str, node: int, port: int = 0) -> BrokerProcess:
    b = BrokerProcess(
        tmp_path / f"node{node}",
        {"zookeeper.connect": zk_connect, "node.id": node, "zookeeper.session.timeout.ms": SESSION_MS},
        args=["--workers", "1"],
        port=port,
    )
    return b.start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetadataProbe:
    """Asks the broker at ``port`` for Metadata (every topic) over and over, on a new
    connection each time, from before it listens until ``stop``: every answer is kept."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answers: list[messages.MetadataResponse] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MetadataProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        request = messages.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        while not self._stop.is_set():
            try:
                with WireClient(self.port, timeout=30) as c:
                    self.answers.append(c.request(ApiKey.METADATA, 12, request))
            except OSError:  # not listening yet (refused), or closed as it stopped
                time.sleep(0.001)


def check_answers(answers, nodes: set[int], topic: str) -> None:
    assert answers, "the probe got no answer"
    for a in answers:
        assert {b.node_id for b in a.brokers} == nodes, [b.node_id for b in a.brokers]
        assert a.controller_id in nodes and a.cluster_id, (a.controller_id, a.cluster_id)
        assert topic in {t.name for t in a.topics}, [t.name for t in a.topics]


def test_a_starting_or_restarting_broker_answers_metadata_only_with_the_whole_cluster(
    tmp_path, zk_connect
):
    b1 = start_broker(tmp_path, zk_connect, 1)
    b2 = start_broker(tmp_path, zk_connect, 2)
    admin = AdminClient({"bootstrap.servers": f"{b1.bootstrap},{b2.bootstrap}"})
    admin.create_topics([NewTopic("known", 2, replication_factor=2)])["known"].result(30)
    port = free_port()
    try:
        with MetadataProbe(port) as probe:
            b3 = start_broker(tmp_path, zk_connect, 3, port)
            time.sleep(0.2)
        print(f"new broker: {len(probe.answers)} answers")
        check_answers(probe.answers, {1, 2, 3}, "known")
        # a restart (a rolling restart's step): the data directory is known, the view not yet
        b3.stop()
        with MetadataProbe(port) as probe:
            b3.start()
            time.sleep(0.2)
        print(f"restarted broker: {len(probe.answers)} answers")
        check_answers(probe.answers, {1, 2, 3}, "known")
    finally:
        for b in (b1, b2, b3 if "b3" in locals() else None):
            if b is not None:
                b.kill()


def create_rf3(client: WireClient, name: str) -> int:
    R = messages.CreateTopicsRequest
    request = R(
        topics=[R.CreatableTopic(name=name, num_partitions=3, replication_factor=3, assignments=[], configs=[])],
        timeout_ms=10000,
        validate_only=False,
    )
    return client.request(ApiKey.CREATE_TOPICS, 5, request).topics[0].error_code


def test_an_rf3_topic_is_made_the_moment_the_third_broker_registers(tmp_path, zk_connect, zk_client):
    """The test watches the registrations itself and, the moment the third broker registers,
    asks another broker (on a connection made before) to create a topic with replication factor
    3: that broker's own watch event may not have reached its view yet, and it must not refuse
    for want of brokers."""
    b1 = start_broker(tmp_path, zk_connect, 1)
    b2 = start_broker(tmp_path, zk_connect, 2)
    zk = zk_client()
    codes: list[int] = []
    b3 = None
    try:
        for round_ in range(6):
            through = (b1, b2)[round_ % 2]
            with WireClient(through.port, timeout=30) as client:
                sent = threading.Event()

                def registered(ids, client=client, round_=round_, sent=sent):
                    if "3" in ids and not sent.is_set():
                        sent.set()
                        codes.append(create_rf3(client, f"rf3-{round_}"))
                        return False  # stop watching
                    return None

                zk.ChildrenWatch("/brokers/ids", registered)
                if b3 is None:
                    b3 = start_broker(tmp_path, zk_connect, 3)
                else:
                    b3.start()
                assert sent.wait(30), "the third broker's registration was not seen"
                while len(codes) <= round_:
                    time.sleep(0.01)
            b3.stop()  # a clean stop removes its registration at once
    finally:
        for b in (b1, b2, b3):
            if b is not None:
                b.kill()
    assert codes == [0] * 6, codes
