"""The agent daemon (`gpuctl-agent run`): one long-lived gRPC stream to the coordinator.

It sends this node's NodeReport when the stream opens, again whenever udev or the periodic
rescan shows a change, answers the coordinator's requests, and heartbeats in between.

- `runner`: the event loop tying it together (and why it is asyncio); the inspection worker.
- `link`: connect, Hello/Welcome, serve the stream, reconnect with backoff; `session`: one
  welcomed stream (sequence numbers, last report sent, writes).
- `dispatch`: request kind -> handler; `work`: coalescing what the next inspection is for;
  `node_actions`: PrepareRequest/RestoreRequest, run on the inspection worker;
  `changes`: what counts as a change, the report rate; `backoff`.
- `uevents`: which kernel uevents matter, debounce, the pyudev source; `uevent_watch`: the
  source in the event loop.
- `health`, `health_http`, `health_grpc`: liveness/readiness and their servers.
- `flags`, `config`, `command`, `logs`: the command line, JSON logs, signals.
"""
