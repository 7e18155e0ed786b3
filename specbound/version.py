"""The package version (one place; read by the package and by certificates)."""

__version__ = "0.1.0"
