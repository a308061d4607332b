"""headrace.broker.log: the topics and partitions this broker holds: the topic table, one
partition and its append path, its leader's view of the followers, producer state, record
checks, cleaning.

topics.py          The topic table: every topic here, created, grown, changed and deleted,
                   ``topics.json``; in a cluster it follows ZooKeeper (``apply``)
roles.py           What the topic table tells of its partitions: who leads them (a broker on
                   its own: ``LeaderOfAll``)
topic.py           One topic: its id, its settings, the partitions of it held here; its name's
                   rules and its errors
replay.py          An internal topic read back whole at start-up (the coordinators' state)
partition.py       One partition: its log, its producers' state, the fetches waiting for it, and
                   the append path of a produce (validation, offsets, producer checks,
                   transaction markers); the one writer of its high watermark
leader_state.py    What the leader of a partition keeps about its followers: their log ends,
                   the ISR, the high watermark, and the acks=all produces waiting for it
producer_state.py  Producer state of one partition: idempotent sequences and open transactions
log_validator.py   What Kafka's LogValidator checks in a produced payload before anything of it
                   is stored, beyond the batch framing and CRC that ``Partition.append`` checks;
                   on topics that ask, the schema ids of keys and values (``SchemaIds``: the
                   registry's view, which registry/ provides)
txn_markers.py     Transaction markers (control batches) and the per-partition aborted-
                   transactions index
log_cleaner.py     The log cleaner: retention and compaction in the background, off the request
                   path
storage_errors.py  Storage errors in the broker's log: the partition, what failed, and the cause
"""
