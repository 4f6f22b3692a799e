"""Test support that ships because commands and benchmarks use it: a loopback OpenAI-compatible
server (``python -m branchpoint.gateway.testing.openai_server``). Not part of the engine's API."""
