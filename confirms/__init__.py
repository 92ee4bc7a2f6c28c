"""Publisher confirm tracking."""
