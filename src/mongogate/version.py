"""The package version, in a module of its own: what imports it never imports the package root
(whose type-checking imports name every layer: import-linter counts them)."""

from __future__ import annotations

__version__ = "0.1.0"
