"""WriteTxnMarkers (key 27), versions 1-2: a transaction coordinator asks the leader of some
partitions to close a transaction there (version 0 was removed by Kafka 4.0; the schemas the
codec reads start at 1).

Each marker (producer id and epoch, commit or abort, coordinator epoch, partitions) is written
to the partitions led here by ``coordinator.txn.markers.write_here``, which says what each
partition's code means. Only brokers may send this request (CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import Broker

from headrace.broker.coordinator.txn.markers import write_here
from headrace.broker.security.authorizer import Operation
from headrace.protocol import ErrorCode, messages

R = messages.WriteTxnMarkersResponse


def handle(broker: Broker, header, request: messages.WriteTxnMarkersRequest):
    # brokers only (Kafka's CLUSTER_ACTION on the cluster)
    allowed = broker.authorizer.allows_cluster(header.session, Operation.CLUSTER_ACTION)
    return _write(broker, request, allowed)


async def _write(broker: Broker, request, allowed: bool):
    txns = broker.transactions
    results = []
    for marker in request.markers:
        keys = [(t.name, index) for t in marker.topics for index in t.partition_indexes]
        codes: dict[tuple[str, int], int]
        if not allowed:
            codes = dict.fromkeys(keys, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            codes = await write_here(
                broker.topics,
                broker.groups,
                marker.producer_id,
                marker.producer_epoch,
                marker.transaction_result,
                marker.coordinator_epoch,
                keys,
                txns.is_leader,
            )
        results.append(
            R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=index, error_code=codes[(t.name, index)]
                            )
                            for index in t.partition_indexes
                        ],
                    )
                    for t in marker.topics
                ],
            )
        )
    return R(markers=results)
