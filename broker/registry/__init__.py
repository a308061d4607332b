"""headrace.broker.registry: a schema registry speaking Confluent's Schema Registry REST API,
its schemas, ids, compatibility levels and modes kept in the compacted topic ``_schemas``
(off unless ``schema.registry.listeners`` is set; its libraries are imported only then).

http_api.py         The HTTP listener (aiohttp, http or https): Confluent's routes, content
                    types and error bodies; writes forwarded to the leader of ``_schemas``
auth.py             With the broker's authorizer on: HTTP Basic against its SCRAM users (or a
                    client certificate), its ACLs on subjects (as their topics); 40101, 40301
registry.py         The operations: reads from this broker's view, writes at the leader (ids
                    and versions allocated there), Confluent's rules and errors; the view as
                    the produce path's schema id checks see it (log_validator.SchemaIds)
schemas_log.py      ``_schemas``: written by its leader (acks=all), read by every replica into
                    the broker's view (read-your-writes through ``wait_for``)
state.py            The view: subjects, versions, schemas by id, levels and modes, as the
                    records of ``_schemas`` leave them
records.py          The records of ``_schemas`` in Confluent's JSON layouts
schema_types.py     The schema types, and compatibility levels over them
avro_schema.py      AVRO: fastavro's parser, Avro's schema-resolution rules
json_schema.py      JSON Schema: the jsonschema library's checks, Confluent's rules
protobuf_schema.py  PROTOBUF: .proto text or a FileDescriptorProto, Confluent's rules
protobuf_text.py    PROTOBUF between .proto text and a FileDescriptorProto (format=serialized)
errors.py           Confluent's error codes, statuses and messages
"""
