"""The rollout pipeline's first stage: one pass's facts as plain values (facts.py), built
from what was read (build.py, pass_setup.py, memo.py) with what each node's pods, agent
answers, records and KMM objects say (pod_facts.py, gpu_pod_watch.py, records.py,
kmm_boots.py, kmm_activity.py, image_probe.py, node_keys.py, signing_key.py), and
spec.rollout as the engine uses it (settings.py)."""
