"""The dashboard's URLconf: ``path("riverboat/", include("riverboat.contrib.django.urls"))``.

See :mod:`riverboat.contrib.django.ui` for who may see it and its settings.
"""

from __future__ import annotations

from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from riverboat.contrib.django.ui import dashboard_view

app_name = "riverboat"

# The dashboard checks its own CSRF token on every action (a double-submit cookie and the
# Origin header, see riverboat.ui.app), so Django's check, which expects Django's token
# in the form, is turned off for it alone.
urlpatterns = [
    re_path(r"^(?P<subpath>.*)\Z", csrf_exempt(dashboard_view), name="dashboard"),
]
