"""BlueDove: an elastic, attribute-based publish/subscribe service (shared core)."""

__version__ = "0.1.0"
