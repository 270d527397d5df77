"""The fleet header and the score histogram."""
