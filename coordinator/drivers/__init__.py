"""The GPUDriver controller: the spec model and CRD, validation, the GPUDriver -> KMM Module
mapping, the reconcile plan and its I/O, status, conflicts and the unload guard."""
