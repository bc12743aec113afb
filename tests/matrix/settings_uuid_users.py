"""Matrix row: a custom user model with a UUID primary key (SQLite, or DATABASE_URL)."""

from tests.matrix.settings_base import *  # noqa: F403
from tests.matrix.settings_base import INSTALLED_APPS

GT_MATRIX_ROW = "uuid-users"
INSTALLED_APPS = [*INSTALLED_APPS, "tests.matrix.uuid_users"]
AUTH_USER_MODEL = "uuid_users.User"
