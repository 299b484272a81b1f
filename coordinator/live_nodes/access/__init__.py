"""Who may speak for a node and who may read: an agent's identity (identity.py,
token_review.py), the read API's callers (access_review.py) and the Nodes this
coordinator serves (node_scope.py)."""
