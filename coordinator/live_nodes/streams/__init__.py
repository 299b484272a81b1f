"""The agents' live streams and what they report: AgentService (agent_service.py) and
NodeService (node_service.py) over the streams (sessions.py), the registry the rest of
the coordinator reads (registry.py, node_record.py, freshness.py), the limits on what
an agent sends (limits.py, ratelimit.py) and GPUNode inspect requests
(inspect_requests.py)."""
