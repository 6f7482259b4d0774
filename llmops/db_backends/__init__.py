"""Database backends: django-prometheus's (every query counted) with what llmops's threads need."""
