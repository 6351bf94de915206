"""The layers between the programs, read from the source: which package may import which (NSQ's
shape: the cluster model and its HTTP client in clusterinfo/, used by nsqadmin and the utilities
alike), common/ free of I/O, and docstrings that cite only files the repository has."""

import ast
import re
from pathlib import Path

import pytest

from .helpers import ROOT

# Each package and the first-party packages it may import.
LAYERS = {
    "common": set(),
    "clusterinfo": {"common"},
    "serving": {"common"},
    "nsqclient": {"common"},
    "nsqd": {"common", "serving"},
    "nsqlookupd": {"common", "serving"},
    "nsqadmin": {"common", "serving", "clusterinfo", "nsqclient"},
    "nsqutils": {"common", "serving", "clusterinfo", "nsqclient"},
}
# What a sans-IO module must not use: sockets, files, processes, event loops, output streams.
IO_MODULES = {"socket", "ssl", "select", "selectors", "asyncio", "trio", "anyio", "httpx", "httptools", "subprocess",
              "os", "io", "sys", "shutil", "tempfile", "pathlib", "threading", "signal"}
IO_NAMES = {"open", "print", "input", "StreamHandler", "FileHandler", "basicConfig"}
# A file named in a docstring: a path with one of these extensions (a .go file is NSQ's, and says so).
FILE_REFERENCE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w.-]+\.(?:py|md|toml|cfg|html|yml|yaml|sh|js|txt))\b")
OWNED_ELSEWHERE = re.compile(r"\w's (?:``)?$")  # "Spark's sbin/start-master.sh": another project's file
SOURCE_DIRS = ["bench", "deploy", "tests", *LAYERS]


def files(directory: str, pattern: str = "*") -> list[Path]:
    return sorted(path for path in (ROOT / directory).rglob(pattern) if "node_modules" not in path.parts)


def modules(package: str) -> list[Path]:
    return files(package, "*.py")


def imported(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_each_package_imports_only_the_layers_below_it(package):
    wrong = {f"{path.relative_to(ROOT)} imports {name}" for path in modules(package)
             for name in imported(path) & set(LAYERS) - LAYERS[package] - {package}}
    assert not wrong


def test_common_does_no_io():
    found = []
    for path in modules("common"):
        found += [f"{path.name} imports {name}" for name in imported(path) & IO_MODULES]
        found += [f"{path.name} uses {node.id if isinstance(node, ast.Name) else node.attr}"
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Name) and node.id in IO_NAMES
                  or isinstance(node, ast.Attribute) and node.attr in IO_NAMES]
    assert not found


def docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    nodes = [tree] + [node for node in ast.walk(tree)
                      if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    return "\n".join(filter(None, (ast.get_docstring(node) for node in nodes)))


def missing_references(path: Path, names_in_repository: set[str]) -> list[str]:
    missing = []
    for match in FILE_REFERENCE.finditer(docstrings(path)):
        reference = match.group(1)
        if OWNED_ELSEWHERE.search(match.string[max(0, match.start() - 40):match.start()]):
            continue
        if "/" not in reference and reference in names_in_repository:
            continue
        if not any((base / reference).exists() for base in (ROOT, path.parent, path.parent.parent)):
            missing.append(reference)
    return missing


def test_docstrings_cite_only_files_in_the_repository():
    paths = [path for directory in SOURCE_DIRS for path in modules(directory)]
    names = {path.name for directory in SOURCE_DIRS for path in files(directory)}
    names |= {path.name for path in ROOT.iterdir()}
    missing = {str(path.relative_to(ROOT)): found for path in paths if (found := missing_references(path, names))}
    assert not missing
