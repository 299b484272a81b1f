"""Tests of hack/generate.py and its generators (hack/generators/)."""
