"""One module per driver: how to build it, and the caller-side connections it wraps."""
