"""Core: what every stage uses – the clock, the error taxonomy and the classification of
failures (retry or not), bounded caches and Prometheus metrics.

Imports nothing of `agents/`; nothing of `storage/`.
"""
