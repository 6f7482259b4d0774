"""Thin DRF view of /api/v1/webhooks/: a key rolls its own webhook signing secret."""

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import ValidationFailed
from api.schema import error_headers, errors
from keys.permissions import request_api_key_id
from keys.scopes import JOBS_WRITE
from webhooks.signing import key_owner
from webhooks.signing_secrets import signing_secret_roll

__all__ = ["SigningSecretApi"]


class SigningSecretApi(APIView):
    """``POST /api/v1/webhooks/signing-secret/``: a new signing secret for the webhooks of what
    the calling key submits, shown once (as a key's own secret is)."""

    required_scopes = {"POST": JOBS_WRITE}

    @extend_schema_serializer(component_name="WebhookSigningSecret")
    class OutputSerializer(serializers.Serializer):
        secret = serializers.CharField(help_text="`whsec_...`, shown this once.")
        signer = serializers.CharField(help_text="Whose secret it is: `key:<id>`.")
        generation = serializers.IntegerField(help_text="1 for a first secret, then +1 a roll.")
        previous_valid_until = serializers.DateTimeField(
            allow_null=True,
            help_text="Until then deliveries carry a second `v1=` signature, with the previous "
            "secret (null: a first secret).",
        )

    @extend_schema(
        operation_id="webhooks_signing_secret_roll",
        summary="A new webhook signing secret for this key, shown once",
        description="What this key submits with a `callback_url` is signed with this secret "
        "(`LLM-Signature`). A first call makes it; a later one rolls it: the new secret signs "
        "from now on, the previous one beside it for `WEBHOOK_SECRET_ROLL_GRACE_SECONDS` (a "
        "day). Nothing stores it: keep it where your receiver reads it.",
        request=None,
        parameters=error_headers(),
        responses={
            201: OpenApiResponse(OutputSerializer, description="The secret, once."),
            **errors({400: ["no_api_key"]}),
        },
    )
    def post(self, request: Request) -> Response:
        key_id = request_api_key_id(request)
        if key_id is None:
            raise ValidationFailed(
                "Webhook signing secrets belong to API keys: call this with the key whose "
                "webhooks you verify (a session's jobs are signed with their feature's secret).",
                code="no_api_key",
            )
        owner = key_owner(key_id)
        rolled = signing_secret_roll(owner=owner, user=cast(User, request.user))
        body = {
            "secret": rolled.secret,
            "signer": owner,
            "generation": rolled.generation,
            "previous_valid_until": rolled.previous_valid_until,
        }
        return Response(self.OutputSerializer(body).data, status=201)
