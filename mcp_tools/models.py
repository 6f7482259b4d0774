from django.core.validators import RegexValidator
from django.db import models

from agents.tools import SOURCE_SEPARATOR

SEPARATOR = SOURCE_SEPARATOR
"""Between a server's name and its tool's: ``<server>__<tool>`` (agents/tools.py: no Python tool
may hold it)."""
SERVER_NAME_RE = r"^[a-z0-9](?:[a-z0-9-]|_(?!_)){0,30}$"
"""A slug without ``__``: the separator of ``<server>__<tool>``."""
ENV_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]*$", "An environment variable's name: letters, digits and _."
)


class MCPServer(models.Model):
    """A Model Context Protocol server whose tools agent runs may call, as
    ``<name>__<tool>`` (mcp_tools/registry.py).

    Secrets never reach the database: the row names the environment variable that holds the
    bearer token or the OAuth client secret (the rule of a provider's key variable,
    providers/key_envs.py). ``tools`` is the server's listing as of ``tools_refreshed_at``
    (at registration and on ``llm_mcp refresh``), each tool with its input schema.
    """

    class Auth(models.TextChoices):
        NONE = "none", "None"
        BEARER = "bearer", "Bearer token from an environment variable"
        OAUTH = "oauth", "OAuth 2.1 client credentials"

    name = models.CharField(
        max_length=31,
        unique=True,
        validators=[RegexValidator(SERVER_NAME_RE, "A slug of a-z, 0-9, - and single _.")],
        help_text="Its tools are named <name>__<tool>.",
    )
    url = models.CharField(
        max_length=500, help_text="The Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp"
    )
    auth = models.CharField(max_length=10, choices=Auth.choices, default=Auth.NONE)
    bearer_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[ENV_NAME_VALIDATOR],
        verbose_name="bearer token environment variable",
        help_text="The NAME of the variable holding the token (never the token).",
    )
    oauth_token_url = models.CharField(max_length=500, blank=True)
    oauth_client_id = models.CharField(max_length=200, blank=True)
    oauth_secret_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[ENV_NAME_VALIDATOR],
        verbose_name="OAuth client secret environment variable",
        help_text="The NAME of the variable holding the client secret (never the secret).",
    )
    oauth_scope = models.CharField(max_length=500, blank=True)
    timeout_seconds = models.FloatField(
        default=30.0, help_text="Each call (and each listing) ends by then, as an error result."
    )
    enabled = models.BooleanField(default=True, help_text="Disabled: its tools are not offered.")
    allowed_tools = models.JSONField(
        default=list, blank=True, help_text="The tools offered (empty: every tool it lists)."
    )
    approval_tools = models.JSONField(
        default=list, blank=True, help_text="The tools whose calls wait for a person's approval."
    )
    price_per_call_usd = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Booked in the ledger for each call (empty: free).",
    )
    tool_prices = models.JSONField(
        default=dict, blank=True, help_text='Per tool, over the server\'s: {"search": "0.01"}.'
    )
    tools = models.JSONField(
        default=list, blank=True, help_text="Its tools as last listed: name, description, schema."
    )
    tools_refreshed_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(
        default=0, help_text="Calls in a row that did not reach it (down, slow, refused)."
    )
    last_error = models.TextField(blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name


EDITABLE_FIELDS = [
    "name",
    "url",
    "auth",
    "bearer_env",
    "oauth_token_url",
    "oauth_client_id",
    "oauth_secret_env",
    "oauth_scope",
    "timeout_seconds",
    "enabled",
    "allowed_tools",
    "approval_tools",
    "price_per_call_usd",
    "tool_prices",
]
"""What a person sets on a server (the admin's form, the API's body); the rest is its state."""
