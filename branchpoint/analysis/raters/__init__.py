"""Raters: agreement between judges and people, persona realism."""
