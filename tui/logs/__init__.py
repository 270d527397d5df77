"""The fleet's event log (bounded)."""
