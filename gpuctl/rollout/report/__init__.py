"""The rollout pipeline's last stage: status.rollout (status.py), the message and Events
(messages.py) and status.revisions (history.py), from the same facts."""
