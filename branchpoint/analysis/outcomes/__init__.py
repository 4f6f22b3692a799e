"""Outcome tables: failure rates with scenario-clustered intervals, reasoning traces."""
