"""The embedded engine as a shared local service: one engine process per data directory.

`embedded` is the building block (a mongoeco wire server on a SQLite file, on its own thread);
`daemon` runs one of them as a detached process that requires SCRAM-SHA-256 credentials and
stops when idle; `client` finds it through `<data_dir>/engine.json`, or starts it under a lock
so that processes racing to start it end with one engine; `files` keeps every file private.
"""

from __future__ import annotations
