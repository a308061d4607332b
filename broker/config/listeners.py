"""Listeners: where the broker listens, with what security, and what it tells clients.

Kafka's settings and formats:

* ``listeners``: ``NAME://host:port,...``; an empty host or ``0.0.0.0``/``::`` binds every
  interface. Names are case-insensitive (kept upper-case).
* ``advertised.listeners``: ``NAME://host:port,...``, the address clients are given for the
  listener of that name (port 0: the port bound); a listener not named there advertises its
  bind address, which must then not be a wildcard.
* ``listener.security.protocol.map``: ``NAME:PROTOCOL,...``; each listener's protocol is
  PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
* ``inter.broker.listener.name``: the listener other brokers reach this one through (unset:
  the one named as ``security.inter.broker.protocol``, default PLAINTEXT, else the first; the
  two settings are not given together). In a cluster every broker registers all its
  advertised listeners, and reaches the others through their listener of this name.

Every inconsistency is a ``ConfigError`` naming the setting: a protocol that is not one of the
four, a listener without a protocol, an advertised name that is no listener, a wildcard bind
without an advertised address, two listeners on one port, a name given twice. Nothing falls
back to plaintext.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import BrokerConfig
from .settings import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WILDCARDS = ("", "0.0.0.0", "::")
_ENDPOINT = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/\[\]]*):([0-9]+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: its name, security protocol, bind address and advertised address."""

    name: str
    protocol: str
    host: str  # bind address ("" binds every interface)
    port: int  # 0: a free port, chosen at bind
    advertised_host: str
    advertised_port: int  # 0: the port bound

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _endpoints(setting: str, text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None:
            raise ConfigError(f"{setting}: {item!r} is not NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if port > 65535:
            raise ConfigError(f"{setting}: port {port} of {item!r} is out of range")
        if any(name == n for n, _, _ in out):
            raise ConfigError(f"{setting}: listener {name} is given twice")
        out.append((name, host, port))
    return out


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    """``listener.security.protocol.map`` as {listener name: security protocol}."""
    setting = "listener.security.protocol.map"
    out = {}
    for item in str(config[setting]).split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ConfigError(f"{setting}: {item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{setting}: security protocol {protocol} of listener {name} is not supported"
                f" (one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name] = protocol
    return out


def listeners(config: BrokerConfig) -> list[Listener]:
    """The listeners the settings describe, checked (see the module docstring)."""
    protocols = protocol_map(config)
    bound = _endpoints("listeners", str(config["listeners"]))
    if not bound:
        raise ConfigError("listeners: no listener given")
    advertised = {
        name: (host, port)
        for name, host, port in _endpoints(
            "advertised.listeners", str(config["advertised.listeners"])
        )
    }
    names = [name for name, _, _ in bound]
    for name in advertised:
        if name not in names:
            raise ConfigError(
                f"advertised.listeners: {name} is not a listener (listeners has {', '.join(names)})"
            )
    ports: dict[int, str] = {}
    out = []
    for name, host, port in bound:
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"listener.security.protocol.map: no security protocol for listener {name}"
            )
        if port and port in ports:
            raise ConfigError(f"listeners: {ports[port]} and {name} both use port {port}")
        ports[port] = name
        ad_host, ad_port = advertised.get(name, (host, port))
        if ad_host in WILDCARDS:
            where = "advertised.listeners" if name in advertised else "listeners"
            raise ConfigError(
                f"{where}: listener {name} binds {host or 'every interface'} ({where} gives"
                f" no address a client can reach); set advertised.listeners={name}://HOST:PORT"
            )
        out.append(Listener(name, protocol, host, port, ad_host, ad_port))
    inter = str(config["inter.broker.listener.name"]).strip().upper()
    if inter and inter not in names:
        raise ConfigError(
            f"inter.broker.listener.name: {inter} is not a listener"
            f" (listeners has {', '.join(names)})"
        )
    if inter and "security.inter.broker.protocol" in config.explicit:
        raise ConfigError(
            "security.inter.broker.protocol: give it or inter.broker.listener.name, not both"
        )
    protocol = str(config["security.inter.broker.protocol"]).strip().upper()
    if not inter and "security.inter.broker.protocol" in config.explicit and protocol not in names:
        raise ConfigError(
            f"security.inter.broker.protocol: no listener named {protocol}"
            f" (listeners has {', '.join(names)}); or set inter.broker.listener.name"
        )
    _check_prefixed(config, names)
    return out


def listeners_text(found: list[Listener], shift: int = 0, advertised: bool = False) -> str:
    """``listeners`` (or ``advertised.listeners``) for ``found`` with every port that is not 0
    moved by ``shift`` (the workers of ``--workers N``)."""
    items = []
    for x in found:
        host, port = (x.advertised_host, x.advertised_port) if advertised else (x.host, x.port)
        host = f"[{host}]" if ":" in host else host
        items.append(f"{x.name}://{host}:{port + shift if port else 0}")
    return ",".join(items)


def inter_broker(config: BrokerConfig, found: list[Listener]) -> Listener:
    """The listener other brokers use: ``inter.broker.listener.name``, else the one named as
    ``security.inter.broker.protocol`` (PLAINTEXT), else the first."""
    name = str(config["inter.broker.listener.name"]).strip().upper()
    name = name or str(config["security.inter.broker.protocol"]).strip().upper()
    return next((x for x in found if x.name == name), found[0])


# the schema registry's https listener takes its TLS settings by this listener name
REGISTRY_LISTENER = "SCHEMA_REGISTRY"


def _check_prefixed(config: BrokerConfig, names: list[str]) -> None:
    for key in config.explicit:
        if key.startswith("listener.name."):
            name = key[len("listener.name.") :].split(".", 1)[0].upper()
            if name not in names and name != REGISTRY_LISTENER:
                raise ConfigError(f"{key}: no listener {name} in listeners")
