"""Tests of the fuzz targets and their runner (bench/fuzz)."""
