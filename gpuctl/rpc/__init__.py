"""The agent's and the CLI's gRPC client: channels, credentials and bearer tokens
(grpc_client.py) and failures in words (grpc_errors.py). The one part of gpuctl's shared
code that opens connections, kept apart from the pure gpuctl.common."""
