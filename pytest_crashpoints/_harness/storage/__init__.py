"""A case's files: the run directory and where it lives, the authority store, crash
states (its durable bytes copied and put back), power loss, the agent's own files."""
