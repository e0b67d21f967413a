"""placeholder"""

from __future__ import annotations

MongogateStore = None
