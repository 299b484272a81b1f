"""Benchmarks: each compares against a baseline in the same run and prints ratios.

Each one's command, baseline and latest figure: docs/benchmarks.md.
"""
