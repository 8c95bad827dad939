"""REST routers, one per resource (docs/api.md)."""
