"""The audit trail: one event per refused call, written to a file and/or ``audit_events``.

``log`` builds events (``AuditLog``), ``file`` and ``mongo`` are its sinks on one background
queue (``queue``), ``read``/``store`` read them back with one ``AuditQuery`` (``query``).
Plain Python over pymongo: never MCP, the server or the tools.
"""
