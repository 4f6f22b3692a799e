"""Model providers behind the gateway. Import the one you need; each imports its library lazily."""

from simulator.providers.base import Provider

__all__ = ["Provider"]
