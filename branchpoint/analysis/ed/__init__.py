"""The eating-disorder study's analysis: single responses and multi-turn conversations."""
