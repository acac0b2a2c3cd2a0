"""The apps stack ``portal → jobs → accounts → clusters → audit``: each imports only
itself and the apps below it (DESIGN's picture; README "Architecture")."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ["portal", "jobs", "accounts", "clusters", "audit"]


def imported_apps(path: Path) -> set[str]:
    """The apps a module imports, at any depth (imports inside functions count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & set(LAYERS)


@pytest.mark.parametrize("app", LAYERS)
def test_an_app_imports_only_itself_and_the_apps_below_it(app):
    allowed = set(LAYERS[LAYERS.index(app) :])
    upward = {
        f"{path.relative_to(REPO)} imports {', '.join(sorted(imported_apps(path) - allowed))}"
        for path in (REPO / app).rglob("*.py")
        if imported_apps(path) - allowed
    }
    assert not upward, sorted(upward)
