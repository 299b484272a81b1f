"""The agent daemon (`gpuctl-agent run`): one long-lived gRPC stream to the coordinator.

It sends this node's NodeReport when the stream opens, again whenever udev or the periodic
rescan shows a change, answers the coordinator's requests, and heartbeats in between. The
pieces: `runner` (the event loop that ties them together, and why it is asyncio), `session`
(one stream), `dispatch` (request kind -> handler), `work` (coalescing what to inspect),
`uevents` (udev filtering and debounce), `changes` (what counts as a change, the report
rate), `backoff`, `health` (HTTP and gRPC health), `logs` (JSON lines), `config`.
"""
