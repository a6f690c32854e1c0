"""``python -m benchmarks [NAME [ARGS ...]]``: run the benchmark NAME with ARGS, or, with no
name, list the benchmarks, one line each (what each module's docstring says first)."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def runnable() -> dict[str, str]:
    """Each benchmark module that runs as a program (it has a ``__main__`` guard) → its
    docstring's first sentence; read from the source, so listing imports none of them."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        try:
            tree = ast.parse(path.read_text(), str(path))
        except SyntaxError as exc:  # one being edited: the others still run
            found[path.stem] = f"(does not parse: {exc.msg}, line {exc.lineno})"
            continue
        guarded = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
        if guarded:
            found[path.stem] = first_sentence(ast.get_docstring(tree) or "")
    return found


def first_sentence(doc: str, width: int = 100) -> str:
    """The docstring's first sentence on one line, cut at ``width``.

    >>> first_sentence("Cost of the runtime's\\ntiming. More here.")
    "Cost of the runtime's timing."
    """
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = paragraph.split(". ")[0].rstrip(".") + "."
    return sentence if len(sentence) <= width else sentence[: width - 1] + "…"


def main() -> None:
    known = runnable()
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        width = max(map(len, known))
        print("python -m benchmarks NAME [ARGS ...]   (NAME --help: its options)\n")
        print("\n".join(f"  {name:{width}s}  {line}" for name, line in known.items()))
        return
    name = sys.argv[1]
    name = name if name in known else f"bench_{name}"
    if name not in known:
        sys.exit(f"no benchmark {sys.argv[1]!r}; `python -m benchmarks` lists them")
    sys.argv = [f"benchmarks.{name}", *sys.argv[2:]]
    runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
