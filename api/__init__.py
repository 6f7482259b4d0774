"""The HTTP API's shared plumbing: what every resource's views use and no resource owns.

The error root and its DRF exception handler (``errors``), the OpenAPI vocabulary (``schema``),
the paginated list and the ``202`` submit (``pagination``, ``submits``), the bound on request
bodies (``body_limits``, ``parsers``), the per-user submit throttle (``submit_throttles``,
``throttle_rates``), WebSocket token auth (``websocket_auth``) and the caller's own endpoint
(``apis``). Settings name these by dotted path; the resources themselves live in their apps.
"""
