"""Developer scripts: code generation, the local control plane."""
