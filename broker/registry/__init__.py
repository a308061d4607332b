"""headrace.broker.registry: a schema registry speaking Confluent's Schema Registry REST API,
its schemas (with their data contracts: metadata and rule sets, stored and answered, run by
clients), ids, configs and modes kept in the compacted topic ``_schemas``
(off unless ``schema.registry.listeners`` is set; its libraries are imported only then).

http_api.py         The HTTP listener (aiohttp, http or https): Confluent's routes, each calling
                    one part of the registry below
http_reads.py       The read routes (GETs, lookup, compatibility test), lists paged (paging.py);
                    the server's metadata (/v1/metadata: the Kafka cluster's id, the version)
paging.py           Confluent's ``offset`` and ``limit`` on lists: Java ints, 404 otherwise
http_site.py        Below the routes: JSON answers, Confluent's error bodies, the connection cap
forwarding.py       Writes (and a replica-less broker's reads) sent to the leader of ``_schemas``
http_auth.py        With the broker's authorizer on: what each route needs (``NEEDS``), checked
                    before it runs
auth.py             Who may: the broker's SCRAM users (HTTP Basic) or a client certificate, its
                    ACLs on subjects (as their topics); 40101, 40301
registry.py         ``SchemaRegistry``: the parts below built over one reader of ``_schemas``
broker_view.py      What the rest of the broker reads: the produce path's schema id checks
                    (log_validator.SchemaIds), the schema texts topics as tables decode with
schemas.py          Schemas by id: the door to the view, the parsed-schema cache, references,
                    a request's schema as it would be kept
formats.py          ``format=``: a schema's text as a read asks for it (AVRO ``resolved``,
                    PROTOBUF ``serialized``), as Confluent's ``formattedString``
lookups.py          The reads by subject, version and id; lookup of a schema in a subject (a
                    ``confluent:version`` apart too); the latest version with given metadata
compatibility.py    Whether a schema may follow a subject's versions, under its level
settings.py         Configs (/config: levels, data contract defaults and overrides) and modes
                    (/mode, READONLY_OVERRIDE too), global and per subject
registration.py     Registering (ids and versions allocated, ``confluent:version`` set) and
                    deleting versions, subjects
writer.py           The one write path: at the leader, one at a time, on a caught-up view
schemas_log.py      ``_schemas``: written by its leader (acks=all), read by every replica into
                    the broker's view (read-your-writes through ``wait_for``)
contexts.py         Schema contexts: Confluent's qualified subjects (``:.ctx:name``), their
                    prefixes, references read in the referring context
context_records.py  The named contexts' CONTEXT records: listed (/contexts), deleted
context_paths.py    The ``/contexts/{c}/...`` path prefix: a route addressed in a context,
                    rewritten before routing (Confluent's ContextFilter)
guids.py            Schema GUIDs: Confluent 8's MD5 over a schema's text, references, metadata
                    and rule set, as a UUID
state.py            The view: subjects, versions, schemas by id and GUID (per context), contexts,
                    configs and modes, as the records of ``_schemas`` leave them
records.py          The records of ``_schemas`` in Confluent's JSON layouts
contracts.py        Data contracts: metadata and rule sets in Confluent's form (42201, 42210),
                    config fields, a config's defaults and overrides merged on registration,
                    the ``confluent:version`` property
schema_types.py     The schema types, and compatibility levels over them
avro_schema.py      AVRO: fastavro's parser, Avro's schema-resolution rules
avro_canonical.py   Avro's own text of a schema (Confluent's canonical and normalized forms)
json_schema.py      JSON Schema: the jsonschema library's checks, Confluent's rules
protobuf_schema.py  PROTOBUF: .proto text or a FileDescriptorProto, Confluent's rules
protobuf_text.py    PROTOBUF between .proto text and a FileDescriptorProto (format=serialized)
errors.py           Confluent's error codes, statuses and messages
"""
