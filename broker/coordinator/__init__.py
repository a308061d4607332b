"""headrace.broker.coordinator: the coordinators: ``group/`` (consumer groups and their offsets)
and ``txn/`` (transactions).
"""
