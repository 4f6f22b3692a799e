"""Tidy tables of the store and the rule that keeps versions apart."""
