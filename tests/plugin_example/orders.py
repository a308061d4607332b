"""A tiny application: it publishes orders to Kafka and adds up what the topic holds."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, KafkaProducer

TOPIC = "orders"


def publish(bootstrap_servers: str, orders: list[dict]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    for order in orders:
        producer.send(TOPIC, key=order["id"].encode(), value=json.dumps(order).encode())
    producer.flush()
    producer.close()


def total(bootstrap_servers: str) -> int:
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
    )
    amount = sum(json.loads(message.value)["amount"] for message in consumer)
    consumer.close()
    return amount
