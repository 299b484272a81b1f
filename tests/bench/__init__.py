"""Tests of the benchmarks' own modules (bench/)."""
