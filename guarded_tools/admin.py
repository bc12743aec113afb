"""The module Django's admin autodiscovery imports.

The admin lives in ``guarded_tools.console.admin``.
"""

from guarded_tools.console import admin  # noqa: F401 - registers the ModelAdmins
