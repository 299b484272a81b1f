"""The GPUDriver's spec (model.py) and the KMM Module it maps to (module_spec.py): what the
coordinator writes and what `gpuctl rollout plan` reads, in one home."""
