"""Generated protobuf/gRPC code for proto/ (see hack/gen_proto.py). Never edit by hand."""
