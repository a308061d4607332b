"""headrace.pipeline"""
