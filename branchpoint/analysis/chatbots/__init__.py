"""Comparing chatbots: pairing two targets' design cells (``alignment``), their paired statistics (``comparison``) and the ranking of several (``ranking``)."""
