"""The GPUDriver: its spec (model.py) and the KMM Module it maps to (module_spec.py), what the
coordinator writes and what `gpuctl rollout plan` reads, in one home; with the GPUDriver's own
rules: which nodes it targets (targeting.py, node_selectors.py, tolerations.py, wanted_memo.py,
re2.py for its kernel mappings), its revisions (revisions.py), validation, status and the plan
of the reconciler's writes (plan.py over driver_nodes.py). Its CRD is in gpuctl/crds.
"""
