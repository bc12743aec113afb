"""The error catalog: a site's entries beside the guard's, exported for agents.

Defined in ``guarded_tools.core.catalog``.
"""

from guarded_tools.core.catalog import (
    CatalogEntry,
    ErrorCatalog,
    catalogs,
    export_json,
    export_llms_txt,
)

__all__ = ["CatalogEntry", "ErrorCatalog", "catalogs", "export_json", "export_llms_txt"]
