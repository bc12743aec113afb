"""How a tool's request reads to people: the one entry point every screen uses.

Defined in ``guarded_tools.confirmations.presentation``.
"""

from guarded_tools.confirmations.presentation import present_request

__all__ = ["present_request"]
