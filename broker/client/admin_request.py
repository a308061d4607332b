"""One admin request to a running broker over a plain blocking socket (the test fixtures'
``create_topic``).

``create_topic(bootstrap_servers, name, partitions, configs)`` connects to the first address
of ``bootstrap_servers`` (PLAINTEXT), sends CreateTopics v7 over a ``BlockingConnection``
(blocking.py) and returns once the broker has created the topic; an error in the answer raises
``AdminError`` with Kafka's error name and the broker's message. The response frame's length
is bounded before it is read.
"""

from __future__ import annotations

from headrace.protocol import ApiKey, ErrorCode, messages

from .blocking import BlockingConnection

CREATE_TOPICS_VERSION = 7
MAX_RESPONSE_BYTES = 1 << 20


class AdminError(Exception):
    """The broker answered an admin request with an error."""

    def __init__(self, error_code: int, message: str) -> None:
        self.error_code = error_code
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"error {error_code}"
        super().__init__(f"{name}: {message}" if message else name)


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    configs: dict[str, object] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create topic ``name`` with ``partitions`` partitions and topic ``configs`` (Kafka's
    names, e.g. ``{"cleanup.policy": "compact"}``); raises ``AdminError`` on a refusal."""
    R = messages.CreateTopicsRequest
    topic = R.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=-1,
        configs=[
            R.CreatableTopicConfig(name=k, value=_text(v)) for k, v in (configs or {}).items()
        ],
    )
    request = R(topics=[topic], timeout_ms=int(timeout * 1000), validate_only=False)
    response = _request(bootstrap_servers, ApiKey.CREATE_TOPICS, request, timeout)
    for result in response.topics:
        if result.error_code != ErrorCode.NONE:
            raise AdminError(result.error_code, result.error_message or "")


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _request(bootstrap_servers: str, api_key: int, message, timeout: float):
    host, _, port = bootstrap_servers.split(",")[0].strip().rpartition(":")
    with BlockingConnection.connect(
        host,
        int(port),
        timeout,
        client_id="headrace-admin",
        max_response_bytes=MAX_RESPONSE_BYTES,
    ) as conn:
        return conn.request(api_key, CREATE_TOPICS_VERSION, message)
