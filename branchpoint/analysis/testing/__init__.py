"""Test support that ships because benchmarks use it: synthetic stores with planted effects
(``branchpoint.analysis.testing.synthetic``). Not part of the analysis API."""
