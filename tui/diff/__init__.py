"""Stepping through a problem's attempts as diffs, unified or side by side."""
