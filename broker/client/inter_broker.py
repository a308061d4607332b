"""How this broker reaches the others: the inter-broker listener's client side.

Every request one broker sends another (replica fetches, partition moves, transaction markers)
goes to the other broker's listener named ``inter.broker.listener.name`` (or as
``security.inter.broker.protocol``), as registered in ZooKeeper, and speaks that listener's
security protocol, with Kafka's settings:

* SSL, SASL_SSL: TLS with the listener's ``ssl.truststore.location`` (the other broker's
  certificate must check out against it, and name its host unless
  ``ssl.endpoint.identification.algorithm`` is empty) and ``ssl.keystore.location`` (this
  broker's certificate, for ``ssl.client.auth=required``).
* SASL_PLAINTEXT, SASL_SSL: SaslHandshake and SaslAuthenticate with
  ``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), as the
  ``username``/``password`` of ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (else
  ``sasl.jaas.config``). That user is the brokers' principal: with an authorizer, it needs
  CLUSTER_ACTION on the cluster (or to be in ``super.users``).

Everything is checked at start-up; a mechanism the listener does not enable, a JAAS entry
without ``username`` and ``password``: a ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.listeners import Listener, inter_broker
from headrace.broker.config.settings import SASL_MECHANISMS, ConfigError
from headrace.broker.security.sasl import jaas_options
from headrace.broker.security.session import ANONYMOUS
from headrace.broker.security.tls import client_context


@dataclass(frozen=True)
class ClientSecurity:
    """What a connection to another broker does before its first request."""

    listener: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    mechanism: str = ""  # "": no SASL
    username: str = ""
    password: str = ""

    @property
    def principal(self) -> str | None:
        """The principal other brokers see (None: a certificate's subject, not known here)."""
        if self.mechanism:
            return f"User:{self.username}"
        return None if self.tls is not None else ANONYMOUS


def client_security(config: BrokerConfig, listeners: list[Listener]) -> ClientSecurity:
    listener = inter_broker(config, listeners)
    tls = client_context(config, listener) if listener.tls else None
    if not listener.sasl:
        return ClientSecurity(listener.name, tls)
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).strip().upper()
    enabled = str(config.for_listener(listener.name, "sasl.enabled.mechanisms")).upper()
    if mechanism not in SASL_MECHANISMS or mechanism not in enabled.replace(" ", "").split(","):
        raise ConfigError(
            f"sasl.mechanism.inter.broker.protocol: {mechanism} is not a mechanism the"
            f" inter-broker listener {listener.name} ({listener.protocol}) enables"
            f" (sasl.enabled.mechanisms; supported: {', '.join(SASL_MECHANISMS)})"
        )
    setting = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = str(config.explicit.get(setting, ""))
    if not jaas:
        setting, jaas = "sasl.jaas.config", str(config["sasl.jaas.config"])
    options = jaas_options(setting, jaas, mechanism) if jaas else {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            f"{setting}: the inter-broker listener {listener.name} uses {mechanism}, so it needs"
            ' the brokers\' username="..." password="..."'
        )
    return ClientSecurity(listener.name, tls, mechanism, options["username"], options["password"])
