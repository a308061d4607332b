"""headrace.broker.iceberg: topics as Apache Iceberg tables, written by the partition leaders
from committed records (off unless ``iceberg.enabled``; pyiceberg and pyarrow, the ``iceberg``
extra, are imported only when a topic's ``iceberg.mode`` is not ``disabled``).

translator.py  On the event loop: which topics and partitions have new committed records, the
               rounds (sent to worker processes), backoff after failures, the bounds, lag and
               counters
workers.py     The worker processes (at most iceberg.max.open.files): start, send, answer,
               kill a dead or hung one, never outlive the broker
rounds.py      One round in a worker process: read, make the rows, commit
budget.py      The bytes all rounds hold at once (iceberg.buffer.max.bytes): reserved by the
               event loop, read within by the worker
committed.py   A partition's records as a read_committed consumer gets them, into columns
rows.py        Those columns as Arrow rows: key_value, or value_schema_id_prefix (Avro, JSON
               and Protobuf values decoded with their registered schema)
protobuf_values.py  Protobuf values (Confluent's framing: message indexes, then the message)
               as Arrow struct arrays, made a field at a time
tables.py      The catalog (SQL or REST), the table, and the commit that appends rows and
               records each partition's next offset in the same snapshot
"""
