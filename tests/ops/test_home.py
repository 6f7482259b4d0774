"""The home page (``/``, also the admin's "View site" link): where everything is."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_home_page_links_everything_a_newcomer_looks_for(admin_client):
    for client in (Client(), admin_client):
        page = client.get("/")
        assert page.status_code == 200
        html = page.content.decode()
        for link in ("/live/", "/admin/", "/admin/ops/dashboard/", "/api/docs/", "/api/schema/"):
            assert f'href="{link}"' in html, link
        assert "/api/v1/jobs/" in html and "make token" in html
    # The admin's "View site" leads there.
    assert 'href="/"' in admin_client.get("/admin/").content.decode()
