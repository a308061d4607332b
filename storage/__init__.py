"""headrace.storage"""
