"""Time to the first failure: per-conversation events with censoring, Kaplan-Meier, restricted mean and matched tests."""
