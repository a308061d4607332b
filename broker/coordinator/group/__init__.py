"""headrace.broker.coordinator.group: the group coordinator: classic, KIP-848 consumer,
KIP-932 share and KIP-1071 streams groups, and committed offsets in ``__consumer_offsets``.

group_coordinator.py    The group coordinator: classic, KIP-848 consumer, KIP-932 share and
                        KIP-1071 streams groups, and the committed offsets of all but share
                        groups
classic_coordinator.py  Classic groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, the
                        rebalance between them
classic_group.py        The classic group model: a group, its members and the answer to a
                        JoinGroup
group_state.py          The classic consumer group's state machine, as data
modern_group.py         What consumer, share and streams groups have in common: group and
                        assignment epochs, members and their timers, removing a member, the
                        subscribed topics
consumer_group.py       KIP-848 consumer groups: the broker assigns, members reconcile through
                        heartbeats
consumer_records.py     A consumer group in ``__consumer_offsets``: its records, and the group
                        they describe
share_group.py          KIP-932 share groups: the broker assigns partitions, and members may
                        share one; their partitions' state initialized at assignment
share_records.py        A share group in ``__consumer_offsets``: its records, and the group
                        they describe
streams_coordinator.py  KIP-1071 streams groups: the broker assigns a Kafka Streams
                        application's tasks; StreamsGroupHeartbeat, members joining and
                        leaving, their sessions and deadlines
streams_records.py      A streams group in ``__consumer_offsets``: its records, and the group
                        they describe
streams_group.py        The streams group model: members, their tasks and epochs, the
                        group's state; offset commits checked against task epochs
streams_assignment.py   A streams group's target assignment, and each member's steps towards
                        it (revoking, then taking what others released)
streams_topology.py     A streams group's topology, and what the cluster's topics make of it
streams_assignor.py     The "sticky" task assignor of streams groups
group_sessions.py       Member sessions, for every kind of group
group_configs.py        Group configs (the GROUP config resource): a group's own settings
offset_store.py         Committed offsets of every group, classic and KIP-848, kept in
                        ``__consumer_offsets``
group_offsets.py        Committed offsets in the internal topic ``__consumer_offsets``, in
                        Kafka's record layouts
group_membership.py     A classic group's membership in ``__consumer_offsets``, as Kafka stores
                        it
modern_records.py       Consumer, share and streams groups' records in ``__consumer_offsets``,
                        in Kafka's layouts
modern_group_log.py     Writing what changed in a consumer, share or streams group, through
                        the committed offsets' write path
"""
