"""The rate-limit settings' vocabulary (pure: no Django models, no Redis).

``ratelimits/checks.py`` checks the settings with it; ``configured_limits.py`` and
``selectors.py`` read them.
"""

import re

__all__ = ["FEATURE_SLUG", "LIMIT_FIELDS", "WILDCARD"]

LIMIT_FIELDS = ("rpm", "input_tpm", "output_tpm")
"""Requests, input tokens and output tokens per minute: the provider's three limits."""
WILDCARD = "*"
"""A model key that applies to every model without a key of its own."""
FEATURE_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
"""What a feature name in LLM_FEATURE_WEIGHTS and LLM_PRIORITY_FEATURES looks like."""
