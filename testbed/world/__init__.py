"""The world run: seeded real-world events on a fleet on KMM's own operator, invariants checked
all along (plan.py, events.py, invariants.py, run.py; mutant.py switches a guard off to show a
run catches it). bench/world.py runs it long; tests/integration/chaos/test_world.py short."""
