"""Tool definitions and where they come from: the registry and the tool sources."""
