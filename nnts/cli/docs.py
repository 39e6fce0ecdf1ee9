"""``nnts docs [NAME]``: the documentation the README links, installed with nnts (``nnts.docs``,
``nnts.conformance``, ``nnts.examples``): without a name, each document with its title and the
path to open; with one, its text (``nnts docs remote-protocol | less``)."""
from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from nnts.formats import paths


def register(sub) -> None:
    p = sub.add_parser("docs", help="the documentation installed with nnts: list it, or print one document")
    p.add_argument("name", nargs="?", help="the document to print (a name `nnts docs` lists), e.g. remote-protocol")
    p.set_defaults(func=run)


def documents() -> dict[str, Path | None]:
    """Name -> file of every installed document; the README (the package's description) has no file."""
    found: dict[str, Path | None] = {"readme": None}
    for folder in (paths.docs_folder(), paths.CONFORMANCE):
        for path in sorted(folder.glob("*.md")):
            found[path.stem] = path
    for name in ("python_driver", "c_driver"):
        path = paths.examples_folder() / name / "README.md"
        if path.is_file():
            found[name.replace("_", "-")] = path
    return found


def text_of(name: str, path: Path | None) -> str:
    if path is None:
        return metadata.metadata("nnts").get_payload() or ""
    return path.read_text(encoding="utf-8")


def title(text: str) -> str:
    return next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")


def run(args) -> int:
    try:
        found = documents()
    except ModuleNotFoundError as e:  # an editable install made before nnts.docs existed
        print(f"nnts docs: {e.name} is not installed: reinstall nnts (pip install -e .)", file=sys.stderr)
        return 2
    if args.name:
        key = args.name.lower().removesuffix(".md")
        if key not in found:
            print(f"nnts docs: {args.name}: no such document; the documents are {', '.join(found)}", file=sys.stderr)
            return 2
        sys.stdout.write(text_of(key, found[key]))
        return 0
    for name, path in found.items():
        where = str(path) if path is not None else "(the package description: nnts docs readme)"
        print(f"{name:18s} {title(text_of(name, path))[:70]:70s} {where}")
    print("`nnts docs NAME` prints one; `nnts init` makes a driver project from the python-driver template.")
    return 0
