"""headrace.broker.config: settings, with Kafka's names, types and defaults; listeners.

settings.py        Every broker and topic setting: Kafka's name, type, default and meaning, one
                   table (the documentation's settings reference is made from it)
config.py          A broker's settings (``BrokerConfig``), read from a properties file and
                   overrides, and checked as Kafka checks them
kafka_settings.py  Apache Kafka's broker settings that Headrace reads differently: an unmodified
                   Kafka ``server.properties`` starts Headrace
listeners.py       Listeners: where the broker listens, with what security, and what it tells
                   clients
"""
