"""Generated protobuf/gRPC code for proto/ (see hack/generate.py). Never edit by hand."""
