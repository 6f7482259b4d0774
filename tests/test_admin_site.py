"""The admin index (and its sidebar) as a new staff member reads it: what needs someone first, the
dead-letter queue and then the budgets, every other section after them in the admin's own order."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def sections(html: str) -> list[str]:
    """The index's sections, top to bottom, each as (app label, its models' links)."""
    return re.findall(r'<div class="app-(\w+) module', html)


def models_of(html: str, app_label: str) -> list[str]:
    block = html.split(f'<div class="app-{app_label} module')[1].split("</table>")[0]
    return re.findall(r'<tr class="model-(\w+)', block)


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def test_it_puts_the_dlq_then_the_budgets_first_and_the_rest_as_before(root):
    html = root.get("/admin/").content.decode()
    index = html.split('id="content-main"')[1]
    found = sections(index)
    assert found[:2] == ["dlq", "ledger"], found
    assert models_of(index, "dlq")[0] == "failurerecord"
    assert models_of(index, "ledger")[0] == "budget"
    rest = found[2:]
    names = [
        re.search(
            rf'<div class="app-{label} module.*?<a href="[^"]*" class="section"[^>]*>([^<]+)</a>',
            index,
            re.S,
        ).group(1)
        for label in rest
    ]
    assert names == sorted(names, key=str.lower), names  # the admin's order: by name


def test_the_sidebar_has_the_same_order(root):
    html = root.get("/admin/ledger/costentry/").content.decode()
    sidebar = html.split('id="nav-sidebar"')[1]
    assert sections(sidebar)[:2] == ["dlq", "ledger"]
    assert models_of(sidebar, "ledger")[0] == "budget"


def test_someone_who_may_see_neither_gets_the_rest_in_order():
    client = Client()
    client.force_login(make_user("pat", "view_llmjob", "view_provider", is_staff=True))
    found = sections(client.get("/admin/").content.decode().split('id="content-main"')[1])
    assert found == ["jobs", "providers"]


def test_one_apps_page_lists_its_first_model_first(root):
    html = root.get("/admin/dlq/").content.decode().split('id="content-main"')[1]
    assert models_of(html, "dlq") == ["failurerecord", "bulkrequeue"]
