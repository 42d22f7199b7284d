"""The layers of docs/architecture.md, read from the source: what each folder may import, and public seams only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
PROJECT = ("pipeline", "decoders", "jobs")


def modules(folder: str) -> list[Path]:
    return sorted((REPOSITORY / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPOSITORY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) of every import in the file, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
    return found


def violations(folder: str, forbidden: tuple[str, ...], allowed_in: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for path in modules(folder):
        if module_name(path) in allowed_in:
            continue
        for module, _, line in imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(REPOSITORY)}:{line} imports {module}")
    return bad


def test_decoders_import_neither_the_pipeline_nor_its_frameworks():
    assert violations("decoders", ("pipeline", "jobs", "ray", "pyarrow", "nemo")) == []


def test_nothing_below_jobs_imports_a_job():
    assert violations("pipeline", ("jobs",)) + violations("benchmarks", ("jobs",)) == []


def test_no_job_imports_another_job():
    bad = []
    for path in modules("jobs"):
        for module, names, line in imports(path):
            if module.startswith("jobs") and module != module_name(path) or module == "jobs" and names:
                bad.append(f"{path.relative_to(REPOSITORY)}:{line} imports {module} {names}")
    assert bad == []


@pytest.mark.parametrize(("framework", "home"), [("ray.data", ("pipeline.graph",)),
                                                 ("nemo", ("pipeline.model.nemo",))])
def test_one_module_knows_each_framework(framework, home):
    assert violations("pipeline", (framework,), allowed_in=home) + violations("jobs", (framework,)) == []


def test_no_underscored_name_crosses_a_module():
    bad = []
    for folder in PROJECT:
        for path in modules(folder):
            for module, names, line in imports(path):
                if module.split(".")[0] not in PROJECT or module == module_name(path):
                    continue
                private = [n for n in names if n.startswith("_")] + \
                    [part for part in module.split(".") if part.startswith("_") and part != "__init__"]
                if private:
                    bad.append(f"{path.relative_to(REPOSITORY)}:{line} takes {private} from {module}")
    assert bad == []


def test_jobs_tell_local_paths_from_uris_through_the_pipeline():
    """One rule decides local path or URI (pipeline/io/uris.py): no job spells its own test."""
    bad = [f"{path.relative_to(REPOSITORY)}:{number}" for path in modules("jobs")
           for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if '"://"' in line or "'://'" in line]
    assert bad == []


def test_every_package_has_a_light_public_face():
    """Each folder of pipeline/ and decoders/ is a package whose __init__ imports nothing heavy at import time."""
    for folder in ("pipeline", "decoders"):
        for directory in [REPOSITORY / folder, *(p for p in (REPOSITORY / folder).rglob("*") if p.is_dir())]:
            if directory.name == "__pycache__" or not any(directory.glob("*.py")):
                continue
            init = directory / "__init__.py"
            assert init.is_file(), f"{directory.relative_to(REPOSITORY)} has no __init__.py"
            top_level = [node for node in ast.parse(init.read_text(encoding="utf-8")).body
                         if isinstance(node, (ast.Import, ast.ImportFrom)) and
                         not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]
            heavy = [ast.unparse(node) for node in top_level
                     if any(name in ast.unparse(node) for name in ("torch", "nemo", "ray", "triton", "numba"))]
            assert heavy == [], f"{init.relative_to(REPOSITORY)} imports {heavy} at import time"


def test_no_public_name_is_also_a_module_of_its_package():
    """A face's lazy name that is also a submodule's (`pipeline.io.redact`) is shadowed by the submodule once that
    is imported: `from pipeline.io import redact` would give a module where a function was meant."""
    import importlib

    for init in sorted((REPOSITORY / "pipeline").rglob("__init__.py")) + sorted((REPOSITORY / "decoders").rglob(
            "__init__.py")):
        package = importlib.import_module(module_name(init))
        submodules = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir() if p.is_dir()}
        assert set(getattr(package, "__all__", ())) & submodules == set(), package.__name__
        for name in getattr(package, "__all__", ()):
            getattr(package, name)  # each name resolves
