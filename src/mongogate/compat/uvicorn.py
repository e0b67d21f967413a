"""uvicorn's h11 protocol class, subclassed by server/http.py (uvicorn 0.55, first read against
0.54; pinned by tests/test_compat.py): the subclass reads ``cycle``, ``headers``, ``config``,
``loop``, ``transport`` and ``timeout_keep_alive_task``, calls ``_unset_keepalive_if_required`` and
``timeout_keep_alive_handler`` (to close an idle kept-alive connection as its timeout would), and
extends ``connection_made``, ``data_received``, ``handle_events``, ``on_response_complete`` and
``connection_lost``, none of which uvicorn documents as an API. ``CLOSE_HEADER`` (the
``connection: close`` header pair of its flow-control module, also undocumented) is what that
subclass adds to the response of the last request a connection may carry."""

from __future__ import annotations

from uvicorn.protocols.http.flow_control import CLOSE_HEADER
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["CLOSE_HEADER", "H11Protocol"]
