"""The registry's server metadata (Confluent's ``/v1/metadata/id``, ``/version``,
``/deployment``) against a real broker: the Kafka cluster's id as the broker's own admin API
tells it, Headrace's version."""

from __future__ import annotations

import registryhttp
import requests
from confluent_kafka.admin import AdminClient

import headrace

broker, base = registryhttp.fixtures("registry-metadata")


def get(base: str, path: str):
    r = requests.get(base + path, timeout=30)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith(registryhttp.CT)
    return r.json()


def test_cluster_id_is_the_kafka_clusters(broker, base):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster_id = admin.describe_cluster().result(30).cluster_id
    assert cluster_id
    assert get(base, "/v1/metadata/id") == {
        "scope": {
            "path": [],
            "clusters": {"kafka-cluster": cluster_id, "schema-registry-cluster": "schema-registry"},
        }
    }


def test_version_and_deployment(base):
    assert get(base, "/v1/metadata/version") == {"version": headrace.__version__}
    assert get(base, "/v1/metadata/deployment") == {"attributes": []}
    # other methods and paths under it: Confluent's 405 and 404 bodies, no crash
    r = requests.post(base + "/v1/metadata/id", timeout=30)
    assert r.status_code == 405
    r = requests.get(base + "/v1/metadata/nothing", timeout=30)
    assert (r.status_code, r.json()["error_code"]) == (404, 404)
