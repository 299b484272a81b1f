"""The GPUDriver controller's I/O: the reconciler carries out gpuctl.gpudriver's pure plan
(the Module, the target labels, status, Events), and kmm_check finds KMM's API."""
