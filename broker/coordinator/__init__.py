"""headrace.broker.coordinator: the coordinators: ``group/`` (consumer groups and their offsets),
``share/`` (share groups' state at the share coordinator, and the persister partition leaders
reach it through) and ``txn/`` (transactions).
"""
