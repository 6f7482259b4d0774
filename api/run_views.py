"""The views every run-like resource (jobs, batches, pipelines, agent runs, embeddings) shares:
submit, list, detail and cancel. Each is a base class; the resource's ``apis.py`` subclasses it
with what is its own (its ``RunResource``, summaries, serializers, the service a cancel calls)
and the operation's OpenAPI schema is built from those when the subclass is defined, so every
resource documents the same statuses and headers the same way::

    class JobDetailApi(RunDetailApi):
        resource = JOBS
        summary = "One of the caller's jobs"
        serializer = JobOutputSerializer

The logic stays in services and selectors: a view finds the run through the resource's
selector (``RunResource.lookup``), calls one service and serializes.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer, ModelSerializer
from rest_framework.views import APIView

from api.pagination import Pagination, paginated_response
from api.path_ids import uuid_or_not_found
from api.runs import run_filters, run_list_parameters, run_list_responses
from api.schema import IDEMPOTENCY_KEY, error_headers, errors, location_header
from api.submit_throttles import SubmitThrottle
from api.submits import submit_from_request
from keys.permissions import check_submitter
from keys.scopes import JOBS_READ, JOBS_WRITE

__all__ = [
    "RunCancelApi",
    "RunDetailApi",
    "RunList",
    "RunListCreateApi",
    "RunResource",
    "RunSubmit",
    "RunSubmitApi",
]

Serializer = type[BaseSerializer]


@dataclass(frozen=True)
class RunResource:
    """A run-like resource as its views name and find it."""

    prefix: str
    """Of its operation ids: ``jobs`` gives jobs_submit, jobs_list, jobs_retrieve, jobs_cancel."""
    noun: str
    """``job``: its path's ``job_id``; "The job's status URL." for a submit's ``Location``."""
    not_found: tuple[str, str]
    """The message and code of the ``404`` of an id that is malformed, unknown or not the
    caller's."""
    get: Callable[..., Any]
    """Its selector of one run for a user: ``user=``, the id by the path's name (a UUID) and,
    for a cancel or an approval, ``permission=``."""
    detail_url_name: str
    """The URL name of a run's status (``jobs:job-detail``), for a submit's ``Location``."""
    context: Callable[[Any], dict[str, Any]] = lambda run: {}
    """What the serializer of one run needs beyond the run (an agent run's steps)."""
    path_id: OpenApiParameter | None = None
    """The id in its paths where it is not the ``<noun>_id`` of ``path_parameter``."""

    @cached_property
    def path_parameter(self) -> OpenApiParameter:
        """The id in its paths; its name is the URL's keyword."""
        return self.path_id or OpenApiParameter(
            f"{self.noun}_id",
            OpenApiTypes.UUID,
            OpenApiParameter.PATH,
            description=f"The {self.noun}'s id; any other value, or another user's "
            f"{self.noun}, answers 404.",
        )

    def lookup(self, request: Request, value: str, *, permission: str | None = None) -> Any:
        """The caller's run of the path id ``value``; ``404`` for any other (and ``403`` for
        a key let in only to read its own runs, where another key submitted it)."""
        message, code = self.not_found
        run_id = uuid_or_not_found(value, message=message, code=code)
        scope = {"permission": permission} if permission else {}
        run = self.get(user=cast(User, request.user), **{self.path_parameter.name: run_id}, **scope)
        check_submitter(request, run)
        return run


@dataclass(frozen=True)
class RunSubmit:
    """A resource's submit: its service and what the schema says of it."""

    service: Callable[..., tuple[Any, bool]]
    """Called with ``user=``, ``data=``, ``idempotency_key=`` and ``api_key_id=``; returns the
    run and whether it was created (a repeated ``Idempotency-Key`` returns the first)."""
    request: Serializer
    example: OpenApiExample
    accepted: OpenApiResponse
    """The ``202``."""
    summary: str
    invalid: Sequence[str]
    """The codes of its ``400``."""
    descriptions: dict[int, str] | None = None
    """Of its error statuses, where the generic meaning is not enough."""
    idempotent: bool = True
    """Whether it takes an ``Idempotency-Key`` (and answers ``409 idempotency_conflict``)."""

    def schema(self, resource: RunResource) -> dict[str, Any]:
        conflict = {409: ["idempotency_conflict"]} if self.idempotent else {}
        statuses = {400: list(self.invalid), **conflict, 413: [], 415: []}
        return {
            "operation_id": f"{resource.prefix}_submit",
            "summary": self.summary,
            "request": self.request,
            "examples": [self.example],
            "parameters": [
                *([IDEMPOTENCY_KEY] if self.idempotent else []),
                location_header(f"The {resource.noun}'s status URL."),
                *error_headers(),
            ],
            "responses": {
                202: self.accepted,
                **errors({**statuses, 429: ["budget_exceeded"]}, descriptions=self.descriptions),
            },
        }


@dataclass(frozen=True)
class RunList:
    """A resource's list: its selector, filtered by the shared filters (api/runs.py)."""

    rows: Callable[..., QuerySet[Any]]
    """Called with ``user=`` and ``filters=``."""
    serializer: type[ModelSerializer]
    """Of a row; the ``status`` filter offers its model's statuses."""
    what: str
    """The rows in the summary and the filters' descriptions: "Only jobs of it."."""
    summary: str | None = None
    """If not "The caller's <what>, newest first"."""
    feature: bool = True
    tags: bool = True

    def schema(self, resource: RunResource) -> dict[str, Any]:
        model: Any = self.serializer.Meta.model
        statuses = list(model.Status.values)
        return {
            "operation_id": f"{resource.prefix}_list",
            "summary": self.summary or f"The caller's {self.what}, newest first",
            "parameters": run_list_parameters(
                statuses, what=self.what, feature=self.feature, tags=self.tags
            ),
            "responses": run_list_responses(self.serializer),
        }


# The view classes carry no docstring: drf-spectacular would make it every subclass's description.


# POST: the submit, 202 with Location (api/submits.py).
class RunSubmitApi(APIView):
    required_scopes = {"POST": JOBS_WRITE}
    # A run is a submit: every resource shares the per-user submit rate (POST only).
    throttle_classes = [SubmitThrottle]
    resource: ClassVar[RunResource]
    submit: ClassVar[RunSubmit]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "submit"):
            extend_schema_view(post=extend_schema(**cls.submit.schema(cls.resource)))(cls)

    def post(self, request: Request) -> Response:
        return submit_from_request(
            request, self.submit.service, status_url_name=self.resource.detail_url_name
        )


# POST as RunSubmitApi, GET the caller's runs by the shared filters, paged.
class RunListCreateApi(RunSubmitApi):
    required_scopes = {"GET": JOBS_READ, "POST": JOBS_WRITE}
    pagination_class = Pagination
    listing: ClassVar[RunList]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "listing"):
            extend_schema_view(get=extend_schema(**cls.listing.schema(cls.resource)))(cls)

    def get(self, request: Request) -> Response:
        rows = self.listing.rows(user=cast(User, request.user), filters=run_filters(request))
        return paginated_response(request, self, rows, self.listing.serializer)


# A view of one run, found by its path id.
class _OneRunApi(APIView):
    resource: ClassVar[RunResource]
    summary: ClassVar[str]
    serializer: ClassVar[Serializer]
    permission: ClassVar[str | None] = None
    """What a staff user needs to reach another user's run (the selector's default if None)."""

    def run(self, request: Request, path: dict[str, str]) -> Any:
        value = path[self.resource.path_parameter.name]
        return self.resource.lookup(request, value, permission=self.permission)

    def body(self, run: Any) -> Any:
        """What the answer shows of the run."""
        return self.serializer(run, context=self.resource.context(run)).data

    @classmethod
    def responses(cls, statuses: dict[int, list[str]], ok: str | None = None) -> dict[Any, Any]:
        """``200`` with the run (``ok`` its description), ``404`` and ``statuses``."""
        run = OpenApiResponse(cls.serializer, description=ok) if ok else cls.serializer
        return {200: run, **errors({404: [cls.resource.not_found[1]], **statuses})}


# GET: one run.
class RunDetailApi(_OneRunApi):
    required_scopes = {"GET": JOBS_READ}
    submitter_may_read = True  # a key without jobs:read reads the runs it submitted

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        schema = extend_schema(
            operation_id=f"{cls.resource.prefix}_retrieve",
            summary=cls.summary,
            parameters=[cls.resource.path_parameter, *error_headers()],
            responses=cls.responses({}),
        )
        extend_schema_view(get=schema)(cls)

    def get(self, request: Request, **path: str) -> Response:
        return Response(self.body(self.run(request, path)))


# POST: the resource's cancel service (``cancel``), the run as it then is; 409 not_cancellable
# when it has ended.
class RunCancelApi(_OneRunApi):
    required_scopes = {"POST": JOBS_WRITE}
    description: ClassVar[str | None] = None
    cancelled: ClassVar[str | None] = None
    """What its ``200`` means, where the run alone does not say it."""
    accepted: ClassVar[dict[int, Any]] = {}
    """Statuses other than ``200`` a cancel may answer with the run."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        schema = extend_schema(
            operation_id=f"{cls.resource.prefix}_cancel",
            summary=cls.summary,
            description=cls.description,
            request=None,
            parameters=[cls.resource.path_parameter, *error_headers()],
            responses={
                **cls.responses({409: ["not_cancellable"]}, ok=cls.cancelled),
                **cls.accepted,
            },
        )
        extend_schema_view(post=schema)(cls)

    def post(self, request: Request, **path: str) -> Response:
        return self.answer(self.run(request, path))

    def cancel(self, run: Any) -> Any:
        """The resource's cancel service; returns the run as it then is."""
        raise NotImplementedError

    def answer(self, run: Any) -> Response:
        return Response(self.body(self.cancel(run)))
