"""The test suite shadows no installed package.

pytest's default (``prepend``) import mode puts the folder above each test module's topmost
package at the front of ``sys.path``; every package and module in that folder then hides an
installed one of the same name. ``tests/kernels`` once hid the ``kernels`` package that
transformers 5.25 imports at model build, and 143 tests failed on a fresh machine. This
test computes, by pytest's own rule, the names the suite puts first on ``sys.path`` and fails
when one of them is also a name an installed distribution provides."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
OWN_DISTRIBUTION = "workbench-rl"


def prepended_folders(tests: pathlib.Path) -> set[pathlib.Path]:
    """The folders pytest's ``prepend`` mode puts on ``sys.path`` for the test tree: for each
    test module or conftest, the first folder above it that is not a package."""
    folders = set()
    for module in [*tests.rglob("test_*.py"), *tests.rglob("conftest.py")]:
        if "node_modules" in module.parts:
            continue
        folder = module.parent
        while (folder / "__init__.py").exists():
            folder = folder.parent
        folders.add(folder)
    return folders


def importable_names(folder: pathlib.Path) -> set[str]:
    """The top-level names ``import NAME`` finds in ``folder``: packages (a folder with an
    ``__init__.py``, or any folder of Python files: a namespace package) and modules."""
    names = set()
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name.isidentifier() and any(entry.glob("*.py")):
            names.add(entry.name)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            names.add(entry.stem)
    return names


def installed_names() -> dict[str, str]:
    """Every top-level import name and every (normalised) distribution name installed here,
    each mapped to the distribution that provides it; this project's own left out."""
    names: dict[str, str] = {}
    for top, distributions in importlib.metadata.packages_distributions().items():
        others = [d for d in distributions if _normalised(d) != OWN_DISTRIBUTION]
        if others:
            names[top] = others[0]
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"] or ""
        if _normalised(name) != OWN_DISTRIBUTION:
            names.setdefault(_normalised(name).replace("-", "_"), name)
    return names


def shadowed(tests: pathlib.Path, installed: dict[str, str]) -> dict[str, str]:
    """``{name: distribution}`` for each name the test tree would put ahead of an installed
    one."""
    return {
        name: installed[name]
        for folder in prepended_folders(tests)
        for name in importable_names(folder)
        if name in installed
    }


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_no_test_folder_or_module_shadows_an_installed_package():
    found = shadowed(REPO / "tests", installed_names())
    assert not found, (
        "these names on the test run's sys.path hide installed packages: "
        + ", ".join(f"{name} (from {dist})" for name, dist in sorted(found.items()))
        + "; rename them, or keep them inside the `tests` package"
    )


def test_the_check_sees_a_test_package_named_like_an_installed_one(tmp_path):
    """A ``tests`` folder that is not a package puts its sub-packages on ``sys.path``."""
    (tmp_path / "tests" / "kernels").mkdir(parents=True)
    (tmp_path / "tests" / "kernels" / "__init__.py").write_text("")
    (tmp_path / "tests" / "kernels" / "test_gae.py").write_text("")
    (tmp_path / "tests" / "test_top.py").write_text("")
    assert shadowed(tmp_path / "tests", {"kernels": "kernels"}) == {"kernels": "kernels"}
    assert shadowed(tmp_path / "tests", {"test_top": "x"}) == {"test_top": "x"}
    (tmp_path / "tests" / "__init__.py").write_text("")
    assert shadowed(tmp_path / "tests", {"kernels": "kernels", "test_top": "x"}) == {}
    assert prepended_folders(tmp_path / "tests") == {tmp_path}
