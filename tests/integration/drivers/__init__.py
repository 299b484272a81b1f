"""Integration tests of the GPUDriver controller: the KMM Module it writes, the unload guard,
validation, watches, the coordinator as a process and under the chart's RBAC."""
