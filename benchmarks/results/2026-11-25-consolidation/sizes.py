"""Module sizes and the longest functions of a package: python sizes.py PACKAGE_DIR"""

import ast
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
mods, funcs = [], []
for f in sorted(root.rglob("*.py")):
    text = f.read_text()
    mods.append((text.count("\n"), str(f.relative_to(root.parent))))
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.append((n.end_lineno - n.lineno + 1, f"{f.relative_to(root.parent)}:{n.name}"))
print(f"{len(mods)} modules, {sum(m for m, _ in mods):,} lines; largest:")
for n, m in sorted(mods, reverse=True)[:6]:
    print(f"  {n:4d}  {m}")
print("longest functions:")
for n, m in sorted(funcs, reverse=True)[:6]:
    print(f"  {n:4d}  {m}")
