"""The WebSocket URL patterns (the HTTP ones are in jobs/urls.py); llmops/asgi.py serves them."""

from django.urls import path

from jobs.consumers import JobEventsConsumer

websocket_urlpatterns = [
    path("ws/jobs/", JobEventsConsumer.as_asgi()),
]
