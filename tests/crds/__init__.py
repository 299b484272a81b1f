"""Tests of the API kinds' CustomResourceDefinitions (gpuctl/crds)."""
