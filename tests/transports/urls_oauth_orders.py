"""The demo site plus an order route that takes DOT's OAuth tokens, as a site's own API may."""

from __future__ import annotations

from django.urls import path
from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from rest_framework.authentication import SessionAuthentication

from project.demo.api import OrderViewSet
from project.urls import urlpatterns as site


class OAuthOrderViewSet(OrderViewSet):
    """Your orders, for the site's own OAuth clients and its people."""

    authentication_classes = [OAuth2Authentication, SessionAuthentication]


urlpatterns = [
    path("api/oauth-orders/<int:pk>/", OAuthOrderViewSet.as_view({"delete": "destroy"})),
    *site,
]
