"""The GPUDriver controller: the spec model and CRD, validation, the GPUDriver -> KMM Module
mapping, the Nodes' labels as facts, the reconcile plan and its I/O, status and conflicts."""
