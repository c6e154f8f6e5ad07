"""Integrations with frameworks: each subpackage imports its framework lazily."""
