"""The suite's own set-up: every pinned test requirement is installed at its pin (a missing one would only show as
skipped tests), and no test imports its helpers through a `tests` package that an installed wheel can shadow."""

import importlib.metadata
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEST_REQUIREMENTS = ("requirements-test.txt", "requirements-test-nodeps.txt")
INSTALL = "make install-test (or: pip install -r requirements-test.txt && pip install --no-deps -r " \
          "requirements-test-nodeps.txt)"


def pins(path: pathlib.Path) -> list[tuple[str, str]]:
    """(distribution, version) of each `name==version` line of a requirements file; -r includes are not followed."""
    found = []
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line.split("#")[0].strip())
        if m:
            found.append((m[1], m[3]))
    return found


@pytest.mark.parametrize("requirements", TEST_REQUIREMENTS)
def test_every_pinned_test_requirement_is_installed_at_its_pin(requirements):
    wanted = pins(ROOT / requirements)
    assert wanted, f"{requirements} pins nothing"
    wrong = {}
    for name, version in wanted:
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None or installed.split("+")[0] != version:  # torch's CPU build is 2.13.0+cpu
            wrong[name] = f"want {version}, installed {installed}"
    assert not wrong, f"test requirements not installed as pinned: {wrong}; run {INSTALL}"


def test_pins_reads_names_extras_and_versions(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("# comment\n-r requirements.txt\njax[cuda12]==0.10.2\nverl==0.9.1  # why\nloose>=1\n")
    assert pins(path) == [("jax", "0.10.2"), ("verl", "0.9.1")]


def test_no_test_imports_helpers_as_a_tests_package():
    """veRL's wheel installs a top-level `tests` package, which shadows this folder (no __init__.py) in
    `from tests.x import y`; helpers are imported as top-level modules (`from x import y`)."""
    offenders = [f"{p.name}:{i}" for p in sorted((ROOT / "tests").glob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.match(r"\s*(from tests[.\s]|import tests\b)", line)]
    assert not offenders, f"import the helper as a top-level module instead: {offenders}"
