"""Headrace: a Kafka-wire-compatible message broker.

``headrace.Broker`` runs a broker inside the calling process (``headrace.broker.app.embedded``);
``headrace serve`` runs one on its own, ``headrace.broker.tools.process.BrokerProcess`` in a child
process, and the pytest plugin (``headrace.pytest_plugin``) gives tests a ``kafka_broker``.

The code lives in four packages: ``headrace.protocol`` (the sans-IO Kafka codec),
``headrace.storage`` (the segmented log), ``headrace.pipeline`` (the request path) and
``headrace.broker`` (the server process and one module per Kafka API).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headrace import _compiled

_compiled.install()  # (a checkout: an edited module runs from source until it is compiled again)

if TYPE_CHECKING:
    from headrace.broker.app.embedded import Broker

__version__ = "0.1.0"
__all__ = ["Broker", "__version__"]


def __getattr__(name: str) -> object:
    # imported on first use: ``import headrace.protocol`` runs this file and must stay light
    if name == "Broker":
        from headrace.broker.app.embedded import Broker

        return Broker
    raise AttributeError(f"module 'headrace' has no attribute {name!r}")
