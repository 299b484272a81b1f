"""Benchmarks: each compares against a baseline in the same run and prints ratios."""
