"""headrace.broker.security: who is asking and what they may do: sessions, TLS, SASL and SCRAM
users, delegation tokens, ACLs, client quotas.

session.py            Who is asking: the state the broker keeps per client connection, and a
                      request's context
tls.py                TLS for SSL and SASL_SSL listeners, through the standard library's ``ssl``
                      module
sasl.py               SASL on SASL_PLAINTEXT and SASL_SSL listeners: Kafka's state machine and
                      the mechanisms
scram_credentials.py  SCRAM credentials, salted and iterated, kept in the data directory (or in
                      ZooKeeper)
delegation_tokens.py  Delegation tokens: made, renewed and expired by their users, logged in
                      with through SCRAM, kept cluster-wide
authorizer.py         The authorizer: Kafka's ACLs, and the decision whether a principal may do
                      an operation
quotas.py             Client quotas: byte rates and request time per user and client id, as
                      Kafka keeps them
"""
