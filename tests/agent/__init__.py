"""Tests of the node agent: fixture scenarios, bad input, the fd scan, decisions, the CLI."""
