"""What the chart installs beside the coordinator to keep others' writes in bounds: the
admission guards (ValidatingAdmissionPolicies over Modules, NodeModulesConfigs, KMM's CRDs,
pool and worker-hold labels) and the coordinator's RBAC. Pure: hack/generate.py renders them
into the chart, and tests read them as data."""
