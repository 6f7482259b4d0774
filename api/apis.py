"""API views of the project itself, not of one app: who the caller is."""

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.schema import error_headers, errors

__all__ = ["MeApi"]


class MeApi(APIView):
    """``GET /api/v1/me/``: the authenticated caller, e.g. to check a token, or for a frontend
    to know whether it may watch every job (staff: ``/ws/jobs/?all=1``). Reads nothing beyond
    the authentication itself."""

    required_scopes = {"GET": None}

    @extend_schema_serializer(component_name="Me")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        username = serializers.CharField()
        is_staff = serializers.BooleanField()

    @extend_schema(
        operation_id="me_retrieve",
        summary="The authenticated caller",
        parameters=error_headers(),
        responses={200: OutputSerializer, **errors()},
    )
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(request.user).data)
