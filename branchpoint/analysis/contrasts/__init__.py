"""Matched contrasts and their sensitivity to the simulator."""
