"""Exchange types and routing."""
