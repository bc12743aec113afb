"""Every public class and function has a docstring of its own (the Python API page renders
them), and no docstring of the package tells history."""

from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

from tests.conftest import REPO_ROOT
from tests.docs.reference import HISTORY

PUBLIC_API = (REPO_ROOT / "tests" / "integration" / "test_public_api.py").read_text()
MODULES = [*re.findall(r'^    "(guarded_tools[\w.]*)": frozenset', PUBLIC_API, flags=re.M),
           "guarded_tools.core.errors"]


def own_doc(value: object) -> str:
    doc = value.__doc__ or ""
    if inspect.isclass(value):
        inherited = {getattr(base, "__doc__", None) for base in value.__mro__[1:]}
        if doc in inherited:
            return ""
    return doc.strip()


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_class_and_function_has_its_own_docstring(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), module_name
    bare = [name for name in module.__all__
            if (inspect.isclass(value := getattr(module, name)) or inspect.isfunction(value))
            and not own_doc(value)]
    assert bare == []


def test_no_docstring_of_the_package_tells_history() -> None:
    told = []
    for path in sorted((REPO_ROOT / "guarded_tools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                told += [f"{path.name}: {hit}" for hit in HISTORY.findall(doc)]
    assert told == []
