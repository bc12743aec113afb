"""Matrix row: a second authentication backend beside Django's ModelBackend."""

from tests.matrix.settings_base import *  # noqa: F403

GT_MATRIX_ROW = "two-backends"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "tests.matrix.backends.GrantsByName",
]
