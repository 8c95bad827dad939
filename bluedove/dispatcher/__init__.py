"""The dispatcher tier: stateless REST front end and one-hop forwarding to matchers."""
