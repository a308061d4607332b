"""TLS for SSL and SASL_SSL listeners, through the standard library's ``ssl`` module.

Kafka's settings, PEM files only (each may be set per listener as
``listener.name.<name>.<setting>``):

* ``ssl.keystore.location``: one PEM file with the broker's certificate chain and its private
  key (Kafka's PEM keystore file), ``ssl.key.password`` when the key is encrypted;
* ``ssl.truststore.location``: the CA certificates client certificates are checked against;
* ``ssl.client.auth``: ``none``, ``requested`` (a certificate, when given, must check out) or
  ``required`` (a client without one is refused in the handshake);
* ``ssl.enabled.protocols``: TLSv1.2 and/or TLSv1.3;
* ``ssl.cipher.suites``: TLS 1.2 suites, OpenSSL names or the IANA names Kafka's
  documentation uses (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``). The ``ssl`` module cannot
  narrow TLS 1.3's suites, so naming one is an error rather than a setting silently ignored.

Every problem is a ``ConfigError`` naming the setting, raised when the listener is set up at
start-up. A client certificate's subject becomes the principal, as Kafka's default
principal builder makes it: ``User:`` and the distinguished name in RFC 2253 form
(``User:CN=alice,O=example``).
"""

from __future__ import annotations

import ssl
from typing import Any

from headrace.broker.config.config import BrokerConfig
from headrace.broker.config.listeners import Listener
from headrace.broker.config.settings import ConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS13_SUITES = {
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
}


def server_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context of an SSL or SASL_SSL listener (see the module docstring)."""

    def get(name: str) -> Any:
        return config.for_listener(listener.name, name)

    def named(name: str) -> str:
        prefixed = f"listener.name.{listener.name.lower()}.{name}"
        return prefixed if prefixed in config.explicit else name

    where = f"listener {listener.name} ({listener.protocol})"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in str(get("ssl.enabled.protocols")).split(",") if v.strip()]
    unknown = [v for v in versions if v not in _VERSIONS]
    if unknown or not versions:
        raise ConfigError(
            f"{named('ssl.enabled.protocols')}: {', '.join(unknown) or 'empty'} for {where};"
            f" supported: {', '.join(_VERSIONS)}"
        )
    chosen = sorted(_VERSIONS[v] for v in versions)
    context.minimum_version, context.maximum_version = chosen[0], chosen[-1]

    keystore = str(get("ssl.keystore.location"))
    if not keystore:
        raise ConfigError(
            f"{named('ssl.keystore.location')}: {where} needs a PEM file with the broker's"
            " certificate chain and private key"
        )
    password = str(get("ssl.key.password")) or None
    try:
        context.load_cert_chain(keystore, password=password)
    except FileNotFoundError:
        raise ConfigError(f"{named('ssl.keystore.location')}: no file {keystore}") from None
    except (ssl.SSLError, OSError) as e:
        try:
            encrypted = b"ENCRYPTED" in open(keystore, "rb").read()
        except OSError:
            encrypted = False
        if encrypted:
            raise ConfigError(
                f"{named('ssl.key.password')}: cannot decrypt the private key in {keystore}"
                f" for {where} ({'wrong password' if password else 'no password given'})"
            ) from None
        raise ConfigError(
            f"{named('ssl.keystore.location')}: cannot load a certificate chain and private key"
            f" for {where} from {keystore}: {e}"
        ) from None

    auth = str(get("ssl.client.auth"))
    context.verify_mode = _VERIFY[auth]
    truststore = str(get("ssl.truststore.location"))
    if auth != "none" and not truststore:
        raise ConfigError(
            f"{named('ssl.truststore.location')}: ssl.client.auth={auth} on {where} needs the"
            " CA certificates to check client certificates against"
        )
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(
                f"{named('ssl.truststore.location')}: cannot load {truststore}: {e}"
            ) from None

    suites = [s.strip() for s in str(get("ssl.cipher.suites")).split(",") if s.strip()]
    if suites:
        tls13 = [s for s in suites if s in _TLS13_SUITES]
        if tls13:
            raise ConfigError(
                f"{named('ssl.cipher.suites')}: {', '.join(tls13)} are TLS 1.3 suites, which"
                " cannot be chosen here (TLS 1.3 uses OpenSSL's defaults); list TLS 1.2 suites"
            )
        names = [openssl_name(s) for s in suites]
        for suite, name in zip(suites, names):
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
            except ssl.SSLError:
                raise ConfigError(
                    f"{named('ssl.cipher.suites')}: {suite} is not a cipher suite OpenSSL has"
                ) from None
        context.set_ciphers(":".join(names))
    return context


def client_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext:
    """The TLS context a broker connects to the others' ``listener`` (the inter-broker one)
    with, from that listener's settings as Kafka takes them: the truststore checks the other
    broker's certificate (and ``ssl.endpoint.identification.algorithm=https`` its host name),
    the keystore is this broker's certificate for mutual TLS."""

    def get(name: str) -> Any:
        return config.for_listener(listener.name, name)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    versions = [v.strip() for v in str(get("ssl.enabled.protocols")).split(",") if v.strip()]
    chosen = sorted(_VERSIONS[v] for v in versions if v in _VERSIONS)
    if chosen:
        context.minimum_version, context.maximum_version = chosen[0], chosen[-1]
    truststore = str(get("ssl.truststore.location"))
    keystore = str(get("ssl.keystore.location"))
    try:  # (server_context has checked the files and says what is wrong with them)
        if truststore:
            context.load_verify_locations(cafile=truststore)
        else:
            context.load_default_certs()
        if keystore:
            context.load_cert_chain(keystore, password=str(get("ssl.key.password")) or None)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"the inter-broker listener {listener.name}'s TLS files: {e}") from None
    context.check_hostname = str(get("ssl.endpoint.identification.algorithm")).lower() == "https"
    return context


_KEY_EXCHANGE = {"ECDHE_ECDSA": "ECDHE-ECDSA", "ECDHE_RSA": "ECDHE-RSA", "DHE_RSA": "DHE-RSA"}
_CIPHERS = {
    "AES_128_GCM": "AES128-GCM",
    "AES_256_GCM": "AES256-GCM",
    "AES_128_CBC": "AES128",
    "AES_256_CBC": "AES256",
    "CHACHA20_POLY1305": "CHACHA20-POLY1305",
}


def openssl_name(suite: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name
    (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``); other
    names are returned as they are."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    exchange, _, rest = suite[len("TLS_") :].partition("_WITH_")
    cipher, _, mac = rest.rpartition("_")
    if cipher not in _CIPHERS or (exchange != "RSA" and exchange not in _KEY_EXCHANGE):
        return suite
    parts = [_KEY_EXCHANGE.get(exchange, ""), _CIPHERS[cipher]]
    if cipher != "CHACHA20_POLY1305":
        parts.append(mac)
    return "-".join(p for p in parts if p)


_ATTRIBUTES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def certificate_principal(certificate: Any) -> str | None:
    """``User:<subject DN, RFC 2253>`` of a verified peer certificate (``getpeercert()``), or
    None without one."""
    if not certificate or "subject" not in certificate:
        return None
    rdns = []
    for rdn in reversed(certificate["subject"]):  # RFC 2253 lists the last RDN first
        rdns.append("+".join(f"{_ATTRIBUTES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out
