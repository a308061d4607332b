"""headrace.protocol"""
