"""Headrace: a Kafka-wire-compatible message broker.

The code lives in four packages: ``headrace.protocol`` (the sans-IO Kafka codec),
``headrace.storage`` (the segmented log), ``headrace.pipeline`` (the request path) and
``headrace.broker`` (the server process and one module per Kafka API).
"""

__version__ = "0.1.0"
