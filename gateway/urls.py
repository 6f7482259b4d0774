"""The front doors' URLs: ``/anthropic/`` and ``/openai/`` (included in llmops/urls.py). The SDKs
send paths without a trailing slash; one added by hand is served too. Any other path under a
door answers that API's 404."""

from django.urls import re_path

from gateway import anthropic_batch_views, anthropic_views, openai_views

anthropic_urlpatterns = [
    re_path(r"^v1/messages/?$", anthropic_views.messages, name="anthropic-messages"),
    re_path(
        r"^v1/messages/count_tokens/?$",
        anthropic_views.count_tokens,
        name="anthropic-count-tokens",
    ),
    re_path(
        r"^v1/messages/batches/?$",
        anthropic_batch_views.message_batches,
        name="anthropic-message-batches",
    ),
    re_path(
        r"^v1/messages/batches/(?P<batch_id>[^/]+)/?$",
        anthropic_batch_views.message_batch,
        name="anthropic-message-batch",
    ),
    re_path(
        r"^v1/messages/batches/(?P<batch_id>[^/]+)/results/?$",
        anthropic_batch_views.message_batch_results,
        name="anthropic-message-batch-results",
    ),
    re_path(
        r"^v1/messages/batches/(?P<batch_id>[^/]+)/cancel/?$",
        anthropic_batch_views.message_batch_cancel_view,
        name="anthropic-message-batch-cancel",
    ),
    re_path(r"^v1/models/?$", anthropic_views.models, name="anthropic-models"),
    re_path(
        r"^v1/models/(?P<model_id>[^/]+)/?$",
        anthropic_views.model_detail,
        name="anthropic-model",
    ),
    re_path(r"^(?P<rest>.*)$", anthropic_views.not_found, name="anthropic-not-found"),
]

openai_urlpatterns = [
    re_path(r"^v1/chat/completions/?$", openai_views.chat_completions, name="openai-chat"),
    re_path(r"^v1/embeddings/?$", openai_views.embeddings, name="openai-embeddings"),
    re_path(r"^v1/models/?$", openai_views.models, name="openai-models"),
    re_path(r"^v1/models/(?P<model_id>.+?)/?$", openai_views.model_detail, name="openai-model"),
    re_path(r"^(?P<rest>.*)$", openai_views.not_found, name="openai-not-found"),
]
