"""Small helpers shared by the agent, the coordinator and the CLI."""
