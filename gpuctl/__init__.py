"""gpuctl: the CLI (gpuctl.cli), the generated wire API (gpuctl.api) and small shared helpers."""
