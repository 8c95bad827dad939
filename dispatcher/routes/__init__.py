"""REST routers, one per resource (API.md)."""
