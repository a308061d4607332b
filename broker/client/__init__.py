"""headrace.broker.client: the broker as a Kafka client: to other brokers (replica fetches,
markers) and to a running broker (the admin commands, the test fixtures).

broker_client.py  The client one broker uses to send requests to another (WriteTxnMarkers,
                  replica fetches): asyncio, over ``headrace.protocol.client``
inter_broker.py   How this broker reaches the others: the inter-broker listener's client side
blocking.py       A blocking connection: a socket driven by ``headrace.protocol.client`` (the
                  admin client and request, and the tools in bench/ and compat/)
admin_client.py   A small blocking Kafka admin client over the project's codec, for ``headrace
                  topics`` and ``headrace groups``
admin_request.py  One admin request to a running broker over a plain blocking socket (the test
                  fixtures' ``create_topic``)
"""
