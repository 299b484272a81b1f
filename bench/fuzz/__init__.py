"""Coverage-guided fuzzing (atheris) of what gpuctl parses from outside: the agent's readers of
sysfs, procfs, debugfs, fdinfo, module files and uevents, and the coordinator's handling of
AgentMessages and NodeService requests.

Each target (targets.py) is a module with `fuzz_one(data: bytes)`, which must only ever
raise the errors its code documents for bad input, and `SEEDS`, a few valid inputs to start
from. `python -m bench.fuzz` runs each for a bounded time in its own process (libFuzzer
under atheris: `-max_total_time`, `-timeout` for hangs, `-rss_limit_mb` for memory) and
prints executions, coverage and what was found; tests/bench/fuzz/test_replay.py replays the seeds
and every input that once found a bug, in CI.
"""
