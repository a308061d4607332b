"""The application's tests, against a real broker from the kafka_broker fixture."""

from orders import publish, total


def test_orders_add_up(kafka_broker):
    kafka_broker.create_topic("orders", partitions=3)
    publish(kafka_broker.bootstrap_servers, [{"id": "a", "amount": 10}, {"id": "b", "amount": 32}])
    assert total(kafka_broker.bootstrap_servers) == 42


def test_acknowledged_orders_survive_a_crash(kafka_broker):
    publish(kafka_broker.bootstrap_servers, [{"id": "c", "amount": 7}])
    kafka_broker.kill()
    kafka_broker.restart()
    assert total(kafka_broker.bootstrap_servers) == 7
