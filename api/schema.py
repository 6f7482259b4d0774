"""The OpenAPI vocabulary every API view shares: the error body and the error statuses.

Each view declares, with ``extend_schema``, the statuses it really answers; the error ones come
from :func:`errors`, so every error response in the schema is the one body that
``api.errors.exception_handler`` renders, ``{"code", "message", "detail"}``, with the codes
the view may put in it. ``tests/test_api_schema.py`` fuzzes every operation of the schema and
fails on any status, content type or body the schema does not describe.

How a view is annotated (jobs/apis.py is the full example)::

    @extend_schema(
        operation_id="things_retrieve",            # unique: <app>_<action>
        summary="One of the caller's things",
        parameters=[THING_ID, *error_headers()],   # path ids, list filters, headers
        request=ThingInputSerializer,              # or None for a body-less POST
        responses={200: ThingOutputSerializer, **errors({404: ["thing_not_found"]})},
    )
    def get(self, request, thing_id): ...

A list (``paginated_response`` of api/pagination.py) sets ``pagination_class`` and answers
``Serializer(many=True)`` with ``errors({...404: []}, descriptions=PAGE_NOT_FOUND)``; a submit
(``accepted_response`` of api/submits.py) answers ``202`` with ``location_header(...)``, and
``IDEMPOTENCY_KEY`` where a repeat returns the first object; a ``SerializerMethodField`` gets
``@extend_schema_field``; a nested ``InputSerializer`` gets
``@extend_schema_serializer(component_name=...)`` so that component names stay unique.
"""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

__all__ = [
    "IDEMPOTENCY_KEY",
    "PAGE_NOT_FOUND",
    "ErrorSerializer",
    "ScopedAutoSchema",
    "errors",
    "error_headers",
    "page_responses",
]


class ErrorSerializer(serializers.Serializer):
    """Every error body (api/errors.py)."""

    code = serializers.CharField(help_text="Stable and machine-readable: branch on this.")
    message = serializers.CharField(help_text="For people; its wording may change.")
    detail = serializers.JSONField(
        allow_null=True,
        help_text="More about the error (e.g. the field at fault, a limit), or null.",
    )


# What each status means whatever the view, and the codes any view may answer with it.
_GENERIC = {
    400: ("The request is invalid.", ["invalid_request", "malformed_json"]),
    401: (
        "No credentials, or an API key that is not valid: unknown, revoked, expired, or a "
        "rotated secret past its grace period (WWW-Authenticate says which scheme).",
        ["not_authenticated", "authentication_failed"],
    ),
    403: ("The caller may not do this.", ["permission_denied"]),
    404: ("No such object, or one the caller may not see.", ["not_found"]),
    409: ("The object's state does not allow this.", ["conflict"]),
    413: ("The request body is larger than LLM_MAX_REQUEST_BYTES.", ["request_too_large"]),
    415: ("The body is not application/json.", ["unsupported_media_type"]),
    429: ("A limit was hit; Retry-After says when to try again.", ["throttled"]),
    503: (
        "The database or Redis is unavailable; nothing was saved. Retry after Retry-After.",
        ["service_unavailable"],
    ),
}


def errors(
    specific: dict[int, list[str]] | None = None,
    *,
    authenticated: bool = True,
    descriptions: dict[int, str] | None = None,
) -> dict[int, OpenApiResponse]:
    """Error responses for ``extend_schema(responses=...)``: ``specific`` maps each status the
    view answers to the codes it may carry beyond the generic ones, ``descriptions`` replaces
    the generic meaning of a status for this view; 401 (unless ``authenticated`` is False) and
    503 are always added, since the token and every view's data live in the database."""
    statuses: dict[int, list[str]] = dict(specific or {})
    if authenticated:
        statuses.setdefault(401, [])
    statuses.setdefault(503, [])
    responses = {}
    for status in sorted(statuses):
        description, generic = _GENERIC.get(status, ("An error.", []))
        description = (descriptions or {}).get(status, description)
        codes = [*statuses[status], *(c for c in generic if c not in statuses[status])]
        responses[status] = OpenApiResponse(
            ErrorSerializer,
            description=f"{description} Codes: {', '.join(f'`{c}`' for c in codes)}.",
        )
    return responses


def error_headers() -> list[OpenApiParameter]:
    """Headers of the error responses that carry them, for ``extend_schema(parameters=...)``."""
    return [
        OpenApiParameter(
            "Retry-After",
            OpenApiTypes.INT,
            OpenApiParameter.HEADER,
            response=[429, 503],
            description="Seconds to wait before retrying.",
        ),
        OpenApiParameter(
            "WWW-Authenticate",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=[401],
            description="The authentication scheme to use (Bearer).",
        ),
    ]


PAGE_NOT_FOUND = {404: "A page past the last one (or not a number)."}
"""``errors(descriptions=...)`` of a paginated list."""


def page_responses(serializer: Any, specific: dict[int, list[str]]) -> dict[Any, Any]:
    """A paginated list's responses: a page of ``serializer`` rows, the errors ``specific``
    names, and ``404`` for a page past the last (``PAGE_NOT_FOUND``)."""
    return {
        200: serializer(many=True),
        **errors({404: [], **specific}, descriptions=PAGE_NOT_FOUND),
    }


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "At most 255 characters, compared byte for byte. A repeated key with the same body "
        "returns the first job (202); with another body, 409 `idempotency_conflict`."
    ),
)


def location_header(description: str) -> OpenApiParameter:
    """The ``Location`` header of a ``202`` submit: where to poll what was accepted."""
    return OpenApiParameter(
        "Location",
        OpenApiTypes.URI,
        OpenApiParameter.HEADER,
        response=[202],
        description=description,
    )


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """``Authorization: Bearer <key>`` (``Token <key>`` is accepted too: api/authentication.py)."""

    target_class = "api.authentication.ApiTokenAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (`llmq_...`), as `Authorization: Bearer <key>`; "
            "`Token <key>` works as well. Each operation names the scope its key needs.",
        }


_INSUFFICIENT_SCOPE = "insufficient_scope"


class ScopedAutoSchema(AutoSchema):
    """drf-spectacular's schema, with the scope each operation asks of an API key
    (keys/permissions.py): ``x-required-scope`` (null: any key), a line of the description,
    and ``403 insufficient_scope`` among its responses."""

    def get_operation(self, *args: Any, **kwargs: Any) -> Any:
        from keys.permissions import HasScope, required_scope

        operation = super().get_operation(*args, **kwargs)
        if operation is None or not any(
            isinstance(permission, HasScope) for permission in self.view.get_permissions()
        ):
            return operation
        scope = required_scope(self.view, self.method)
        operation["x-required-scope"] = scope
        note = f"**Scope:** `{scope}`." if scope else "**Scope:** any API key."
        operation["description"] = f"{operation.get('description', '')}\n\n{note}".strip()
        if scope is None:
            return operation
        responses = operation.setdefault("responses", {})
        forbidden = responses.get("403")
        if forbidden is None:
            responses["403"] = {
                "description": "The API key lacks the scope this operation needs (`detail."
                f"required_scope`). Codes: `{_INSUFFICIENT_SCOPE}`.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                "headers": {
                    "WWW-Authenticate": {
                        "schema": {"type": "string"},
                        "description": 'Bearer error="insufficient_scope", scope="<scope>".',
                    }
                },
            }
        elif _INSUFFICIENT_SCOPE not in forbidden.get("description", ""):
            forbidden["description"] = forbidden["description"].replace(
                "Codes: ", f"Codes: `{_INSUFFICIENT_SCOPE}`, ", 1
            )
        # Responses in status order, as every other operation's.
        operation["responses"] = dict(sorted(responses.items()))
        return operation
