"""search stage."""
