"""pydantic-settings' TOML source, with a public hook after the file is read (pinned by
tests/test_compat.py): ``_read_file`` is the one place that sees the file's path and its data
together, and it is not part of the documented API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_settings import TomlConfigSettingsSource


class PostReadToml(TomlConfigSettingsSource):
    """The TOML source; ``after_read(data, path)`` may rewrite what the file held."""

    def after_read(self, data: dict[str, Any], path: Path) -> dict[str, Any]:
        return data

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        return self.after_read(super()._read_file(file_path), Path(file_path))
