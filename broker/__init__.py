"""headrace.broker"""
