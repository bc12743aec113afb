"""The package as a site installs it: the sdist and the wheel built from it carry every file
of ``guarded_tools`` (its templates, the admin's included; its static files; its
migrations), the license, and nothing of the repository around it; and the admin's pages
render from the wheel installed in a new environment, with none of this checkout on the path.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "guarded_tools"
#: What a build must not read or carry: checkouts' environments, caches and build output.
LEFT_OUT = shutil.ignore_patterns(".git", ".venv*", "node_modules", "__pycache__", "*.pyc",
                                  "*.egg-info", "build", "dist", "var", "bench-results",
                                  ".*_cache", ".hypothesis", "*.sqlite3*")

pytestmark = [pytest.mark.slow, pytest.mark.once]


def _run(*command: str | Path, cwd: Path | None = None) -> None:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"


def _uv() -> str | None:
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


def _build(source: Path, out: Path, work: Path) -> None:
    """The sdist, then the wheel built from it (as a package index's users get them)."""
    uv = _uv()
    if uv is not None:
        _run(uv, "build", "--out-dir", out, source)
        return
    python = sys.executable
    if importlib.util.find_spec("build") is None:  # a build frontend of its own
        _run(sys.executable, "-m", "venv", work / "build-env")
        python = str(work / "build-env" / "bin" / "python")
        _run(python, "-m", "pip", "install", "-q", "build")
    _run(python, "-m", "build", "--outdir", out, source)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("package")
    source, out = work / "source", work / "dist"
    shutil.copytree(REPO_ROOT, source, ignore=LEFT_OUT)
    _build(source, out, work)
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist, "work": work}


def package_files(*folders: str) -> set[str]:
    """The files under ``guarded_tools/<folder>`` in this checkout, as paths from the root."""
    found = set()
    for folder in folders:
        for path in (PACKAGE / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.add(path.relative_to(REPO_ROOT).as_posix())
    return found


def test_the_wheel_and_the_sdist_carry_every_file_of_the_package_and_the_license(
        built: dict[str, Path]) -> None:
    wheel = set(zipfile.ZipFile(built["wheel"]).namelist())
    with tarfile.open(built["sdist"]) as archive:
        top = archive.getnames()[0].split("/")[0]
        sdist = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    shipped = package_files("templates", "static", "migrations", "locale")
    assert "guarded_tools/locale/django.pot" in shipped
    admin = {name for name in shipped if name.startswith("guarded_tools/templates/admin/")}
    assert len(admin) >= 15 and "guarded_tools/static/guarded_tools/admin.css" in shipped
    assert any(name.startswith("guarded_tools/migrations/0001") for name in shipped)
    assert shipped - wheel == set()
    assert shipped - sdist == set()
    # Everything else of the package too: its modules and the typing marker.
    everything = package_files(".")
    assert "guarded_tools/py.typed" in everything
    assert everything - wheel == set()
    assert everything - sdist == set()
    # The wheel holds the package and its metadata, nothing of the repository around it.
    info = next(name.split("/")[0] for name in wheel if ".dist-info/" in name)
    assert {name.split("/")[0] for name in wheel} == {"guarded_tools", info}
    assert not [name for name in wheel
                if name.split("/")[0] in ("tests", "project", "bench", "templates", "scripts")]
    # The license: a file of its own in both, named by the metadata.
    license_text = (REPO_ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert "Copyright (c) 2026 The guarded_tools authors" in license_text
    assert "LICENSE" in sdist
    assert f"{info}/licenses/LICENSE" in wheel
    archive = zipfile.ZipFile(built["wheel"])
    assert archive.read(f"{info}/licenses/LICENSE").decode() == license_text
    metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]


def test_twine_check_passes_on_both(built: dict[str, Path]) -> None:
    """What a package index checks before it takes an upload: the metadata, and the long
    description rendering (README.md, as Markdown)."""
    pytest.importorskip("twine")
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           built["wheel"], built["sdist"]],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_metadata_names_one_version_known_classifiers_and_the_tested_lines(
        built: dict[str, Path]) -> None:
    """One version (guarded_tools.core.version, which pyproject reads); classifiers that all
    exist, with the Python and Django lines CI tests (scripts/venv.sh: Django 6.0 on
    Python 3.12, 5.2 on 3.11) and a development status; Django capped below the first line
    nothing tests; project URLs only where an address exists."""
    from email.parser import Parser

    trove = pytest.importorskip("trove_classifiers")
    from guarded_tools import __version__

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "guarded_tools.core.version.VERSION"}
    info = next(n for n in zipfile.ZipFile(built["wheel"]).namelist()
                if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(zipfile.ZipFile(built["wheel"]).read(info).decode())
    assert metadata["Version"] == __version__
    written = [path.relative_to(REPO_ROOT).as_posix()
               for folder in ("guarded_tools", "project")
               for path in (REPO_ROOT / folder).rglob("*.py")
               if f'"{__version__}"' in path.read_text()]
    assert written == ["guarded_tools/core/version.py"]  # the one place it is written
    assert built["wheel"].name.startswith(f"guarded_tools-{__version__}-")
    classifiers = metadata.get_all("Classifier")
    assert set(classifiers) - trove.classifiers == set()
    for expected in ("Framework :: Django", "Framework :: Django :: 5.2",
                     "Framework :: Django :: 6.0", "Programming Language :: Python :: 3.11",
                     "Programming Language :: Python :: 3.12", "Typing :: Typed"):
        assert expected in classifiers
    assert [c for c in classifiers if c.startswith("Development Status :: ")]
    venvs = (REPO_ROOT / "scripts" / "venv.sh").read_text()
    assert "py=3.12" in venvs and "py=3.11" in venvs
    assert "Django>=6.0,<6.1" in (REPO_ROOT / "requirements-demo.txt").read_text()
    assert "Django>=5.2,<5.3" in (REPO_ROOT / "requirements-dj52.txt").read_text()
    assert "Django<6.1,>=5.2" in metadata.get_all("Requires-Dist") or \
        "Django>=5.2,<6.1" in metadata.get_all("Requires-Dist")
    assert metadata["Requires-Python"] == ">=3.11"
    # No repository or documentation address exists yet: none is invented.
    assert metadata.get_all("Project-URL") is None and "urls" not in project
    assert metadata["Description-Content-Type"] == "text/markdown"


#: Links and images in Markdown: [text](target), ![alt](target), <img src="...">, and
#: reference definitions "[name]: target".
MARKDOWN_TARGETS = re.compile(
    r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)|<img[^>]+src=[\"']([^\"']+)|^\s*\[[^\]]+\]:\s*(\S+)",
    re.MULTILINE)


SETTINGS = """
SECRET_KEY = "package-test"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = ["guarded_tools", "django.contrib.admin", "django.contrib.auth",
                  "django.contrib.contenttypes", "django.contrib.sessions",
                  "django.contrib.messages", "django.contrib.staticfiles", "rest_framework"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.middleware.common.CommonMiddleware",
              "django.middleware.csrf.CsrfViewMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware",
              "django.contrib.messages.middleware.MessageMiddleware"]
ROOT_URLCONF = "site_urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
              "OPTIONS": {"context_processors": [
                  "django.template.context_processors.request",
                  "django.contrib.auth.context_processors.auth",
                  "django.contrib.messages.context_processors.messages"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "site.sqlite3"}}
STATIC_URL = "static/"
USE_TZ = True
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls), path("agent/", include("guarded_tools.urls"))]
"""

#: Run by the new environment's Python: the admin's pages as a superuser sees them.
RENDER = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "site_settings"
import django
django.setup()
from django.test.utils import setup_test_environment
setup_test_environment()  # responses then say which templates rendered them
from django.core.management import call_command
call_command("migrate", verbosity=0)
import guarded_tools
from django.contrib.auth import get_user_model
from django.test import Client
from guarded_tools.models import Confirmation, Operation
confirmation = Confirmation.objects.create(tool="t", scope="user:1", key="k", fingerprint="f",
                                           input={"n": 1}, summary="Pay 5.00")
operation = Operation.objects.create(tool="t", scope="user:1", key="k2", fingerprint="f",
                                     input={"n": 1}, state="outcome_unknown")
client = Client()
client.force_login(get_user_model().objects.create_superuser("boss", password="pw"))
pages = {}
for url in ["/admin/", "/admin/guarded_tools/confirmation/",
            f"/admin/guarded_tools/confirmation/{confirmation.pk}/change/",
            "/admin/guarded_tools/operation/",
            f"/admin/guarded_tools/operation/{operation.pk}/change/"]:
    response = client.get(url)
    pages[url] = [response.status_code, [t.origin.name for t in response.templates
                                         if t.origin and t.origin.name]]
print(json.dumps({"file": guarded_tools.__file__, "pages": pages}))
"""


def test_the_admin_pages_render_from_the_wheel_installed_in_a_new_environment(
        built: dict[str, Path]) -> None:
    """A new virtualenv with the wheel installed and nothing of this checkout: the
    dependencies come from the running environment's site-packages (a ``.pth`` after the
    new environment's own), the site is a settings module and a URLconf of its own."""
    import json

    env, site = built["work"] / "venv", built["work"] / "site"
    _run(sys.executable, "-m", "venv", "--without-pip", env)
    python = env / "bin" / "python"
    uv = _uv()
    if uv is not None:
        _run(uv, "pip", "install", "--python", python, "--no-deps", built["wheel"])
    else:
        _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
             built["wheel"])
    purelib = Path(subprocess.run([python, "-c", "import sysconfig;"
                                   " print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    site.mkdir()
    (site / "site_settings.py").write_text(SETTINGS)
    (site / "site_urls.py").write_text(URLS)
    (site / "render.py").write_text(textwrap.dedent(RENDER))
    done = subprocess.run([python, "-s", "render.py"], cwd=site, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    installed = Path(seen["file"])
    assert installed.is_relative_to(purelib), installed  # the wheel's copy, not this checkout
    assert not installed.is_relative_to(REPO_ROOT)
    for url, (status, templates) in seen["pages"].items():
        assert status == 200, (url, done.stderr[-3000:])
        ours = [t for t in templates if "/guarded_tools/templates/" in t]
        assert ours, (url, templates)  # rendered with the package's own templates
        assert all(Path(t).is_relative_to(purelib) for t in ours), ours
