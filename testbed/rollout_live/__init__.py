"""The rollout's live rig: the coordinator as a process, agents, fake nodes, a Node watch.

``rig.RolloutRig`` is what the ``rollout_rig`` fixture (tests/integration/conftest.py)
yields; ``images`` names the versions tests speak of (OLD, NEW) and their module images;
``fake_nodes`` builds the nodes' fake roots; ``kernels`` reads what their kernels saw;
``protocol_agent`` is a hand-written agent; ``node_watch`` checks the rollout's invariants
on every Node event.
"""
