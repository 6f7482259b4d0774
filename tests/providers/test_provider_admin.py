"""Providers are edited in the admin; their key stays in the environment."""

import pytest
from django.test import Client

from providers.models import Provider
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

ADD = "/admin/providers/provider/add/"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(
        make_user(
            "olga",
            "add_provider",
            "change_provider",
            "view_provider",
            "change_provider_endpoint",
            is_staff=True,
        )
    )
    return client


def test_staff_add_an_openai_compatible_provider(staff):
    response = staff.post(
        ADD,
        {"name": "vllm", "kind": "openai", "base_url": "http://vllm:8000/v1",
         "api_key_env": "VLLM_API_KEY", "enabled": "on"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[-2000:]
    provider = Provider.objects.get(name="vllm")
    assert (provider.kind, provider.base_url, provider.api_key_env) == (
        "openai",
        "http://vllm:8000/v1",
        "VLLM_API_KEY",
    )
    page = staff.get("/admin/providers/provider/")
    assert page.status_code == 200 and b"vllm" in page.content and b"anthropic" in page.content


def test_the_admin_refuses_a_key_in_place_of_its_variable(staff):
    response = staff.post(
        ADD, {"name": "openai", "kind": "openai", "base_url": "https://api.openai.com/v1",
              "api_key_env": "sk-proj-abc123"},
    )  # fmt: skip
    assert response.status_code == 200 and not Provider.objects.filter(name="openai").exists()


def test_the_admin_refuses_an_openai_provider_without_its_url(staff):
    response = staff.post(ADD, {"name": "openai", "kind": "openai", "base_url": ""})
    assert response.status_code == 200 and b"needs the URL of its API" in response.content
    assert not Provider.objects.filter(name="openai").exists()
