"""Pairing apart from statistics: forks, matched pairs and realised branches."""
