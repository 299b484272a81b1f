"""The API kinds gpuctl serves, as CustomResourceDefinitions, in one home: GPUDriver
(gpudriver.py, from the spec model in gpuctl/gpudriver/model.py), GPUNode (gpunode.py)
and the envelope both share (envelope.py). hack/generate.py writes them into the chart."""
