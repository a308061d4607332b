"""A real broker with its schema registry on, for the registry's HTTP tests: ``start`` one,
``url`` of its registry, ``fixtures`` for a test module, ``call`` a route and check its status."""

from __future__ import annotations

import json

import pytest
import requests

from headrace.broker.tools.process import BrokerProcess

CT = "application/vnd.schemaregistry.v1+json"


def start(directory, **settings) -> BrokerProcess:
    """A broker in ``directory`` serving the registry on a free port (plus ``settings``)."""
    return BrokerProcess(
        directory, {"schema.registry.listeners": "http://127.0.0.1:0", **settings}
    ).start()


def fixtures(name: str, **settings):
    """A test module's ``broker`` (the registry on, plus ``settings``; one per module, in a
    directory named ``name``) and ``base`` (its registry's URL) fixtures:
    ``broker, base = registryhttp.fixtures("registry-x")``."""

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory):
        b = start(tmp_path_factory.mktemp(name), **settings)
        yield b
        b.kill()

    @pytest.fixture(scope="module")
    def base(broker) -> str:
        return url(broker)

    return broker, base


def url(broker: BrokerProcess) -> str:
    return f"http://127.0.0.1:{broker.listener_ports['SCHEMA_REGISTRY']}"


def call(base: str, method: str, path: str, body=None, status: int = 200, **params):
    """``method path`` with ``body`` as JSON; asserts ``status``; the answer's JSON."""
    data = None if body is None else json.dumps(body)
    r = requests.request(
        method, base + path, data=data, params=params, headers={"Content-Type": CT}, timeout=30
    )
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()
