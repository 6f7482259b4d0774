"""The API's JSON parser: a body over its limit is refused (``413 request_too_large``) before
it is decoded. ``limit_setting`` names the limit; api/body_limits.py reads it too, so the ASGI
layer refuses such a body before Django reads it."""

from io import BytesIO
from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from api.errors import RequestTooLarge


class LimitedJSONParser(JSONParser):
    """JSON parser that refuses bodies over a limit (the setting named by ``limit_setting``,
    LLM_MAX_REQUEST_BYTES by default) before decoding them."""

    limit_setting = "LLM_MAX_REQUEST_BYTES"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit: int = getattr(settings, self.limit_setting)
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        if stream is not None:
            body = stream.read(limit + 1)
            if len(body) > limit:
                raise _too_large(limit)
            stream = BytesIO(body)
        return super().parse(stream, media_type, parser_context)


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"The request body is larger than {limit} bytes.", detail={"limit_bytes": limit}
    )
