"""Statistics: paired and scenario-level tests, intervals, corrections, the cluster bootstrap."""
