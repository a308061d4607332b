"""headrace.broker.config: settings: broker and topic settings with Kafka's names, types and
defaults; Kafka's settings read differently; listeners.

config.py          Broker and topic settings, with Kafka's names, types and defaults
kafka_settings.py  Apache Kafka's broker settings that Headrace reads differently: an unmodified
                   Kafka ``server.properties`` starts Headrace
listeners.py       Listeners: where the broker listens, with what security, and what it tells
                   clients
"""
