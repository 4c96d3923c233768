"""The version of snowir, one place (pyproject.toml reads it too when it is dynamic)."""

__version__ = "0.1.0"
