"""DescribeLogDirs (key 35), versions 1-5: the data directory and the partitions in it.

A broker has one data directory (``log.dirs``). The answer lists the partitions this broker
holds there (a cluster broker: only its own), all of them when the request's topics are null,
else those it names. A partition's size is the sum of its segments' sizes, as the log keeps
them in memory (no disk access); its offset lag is 0 (one replica: the log end is the high
watermark) and is_future false (logs never move between directories). The volume's total and
usable bytes (sent from v4) come from ``os.statvfs`` of the directory, in a thread, so a
stalled disk cannot stop the event loop; a directory it fails on answers KAFKA_STORAGE_ERROR
with no topics. The directory is never cordoned (v5's ``is_cordoned``: there is no other
directory to send new partitions to).

Version 0 is not served, as by Kafka 4: the schema this codec reads starts at 1 (v1 has v0's
layout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

import asyncio
import os

from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.DescribeLogDirsResponse


async def handle(broker: Broker, header, request: messages.DescribeLogDirsRequest):
    if not broker.authorizer.allows_cluster(header.session, Operation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # (v0-2 have no field: no results)
        return R(throttle_time_ms=0, error_code=code, results=[])
    path = str(broker.data_dir)
    error, total, usable = ErrorCode.NONE, -1, -1
    try:
        st = await asyncio.to_thread(os.statvfs, path)
        total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:
        error = ErrorCode.KAFKA_STORAGE_ERROR
    topics = [] if error else _topics(broker, request.topics)
    result = R.DescribeLogDirsResult(
        error_code=error, log_dir=path, topics=topics, total_bytes=total, usable_bytes=usable
    )
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=[result])


def _topics(broker: Broker, wanted) -> list:
    """The partitions held here, by topic; ``wanted`` (None: all) names topics and indexes."""
    only = None if wanted is None else {t.topic: set(t.partitions) for t in wanted}
    out = []
    for topic in sorted(broker.topics.all_topics(), key=lambda t: t.name):
        if only is not None and topic.name not in only:
            continue
        indexes = None if only is None else only[topic.name]
        partitions = [
            R.DescribeLogDirsPartition(
                partition_index=p.index,
                partition_size=p.log.size_in_bytes,
                offset_lag=0,
                is_future_key=False,
            )
            for p in sorted(topic.partitions, key=lambda p: p.index)
            if indexes is None or p.index in indexes
        ]
        if partitions:
            out.append(R.DescribeLogDirsTopic(name=topic.name, partitions=partitions))
    return out
