"""The chosen tests of distributed's test_client.py as a module of their own, with one import changed.

Kept from the original, verbatim: the chosen test functions (with their decorators), the module's helper
definitions they use, and the imports of the names they use. Changed: every name they import from
`distributed` or `distributed.client` comes from `scaler.compat.dask.distributed`, as a user's code
would after the one-line switch; a name that module does not offer is bound to a stand-in that fails
the test using it, saying so. distributed's `gen_cluster` becomes stand_ins.gen_cluster (the test's
client is ours, on a Scaler cluster). Everything else (dask, and test helpers such as `inc`, `slowinc`
or `poll_for` from `distributed.utils_test`) is imported from where the original imports it.
"""

from __future__ import annotations

import ast

import scaler.compat.dask.distributed as compat

CLIENT_MODULES = ("distributed", "distributed.client")  # what the one import switch replaces
OFFERED = frozenset(compat.__all__)
STAND_INS = {("distributed.utils_test", "gen_cluster")}


def subset_module(source: str, chosen: list[str], origin: str) -> str:
    """Python source of a test module holding the tests named in `chosen` of `source` (a test_client.py)."""
    tree = ast.parse(source)
    tests = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = [name for name in chosen if name not in tests]
    if missing:
        raise ValueError(f"not in {origin}: {missing}")
    helpers = {
        name: node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))
        for name in _defined_names(node) if not name.startswith("test_")
    }
    kept: list[ast.stmt] = [tests[name] for name in chosen]
    used = set().union(*(_used_names(node) for node in kept))
    pending = [name for name in used if name in helpers]
    while pending:  # helpers that the kept helpers use, in turn
        node = helpers[pending.pop()]
        if node not in kept:
            kept.append(node)
            fresh = _used_names(node) - used
            used |= fresh
            pending.extend(name for name in fresh if name in helpers)
    lines = [f'"""Tests of {origin}, chosen in tests/distributed_suite/selection.py; made by rewrite.py."""', ""]
    lines.append("from __future__ import annotations")
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.extend(_imports(node, used))
    lines.append("")
    for node in tree.body:  # in the original order: a decorator may use a helper defined above it
        if node in kept:
            segment = ast.get_source_segment(source, node, padded=False)
            decorators = [f"@{ast.get_source_segment(source, decorator)}" for decorator in _decorators(node)]
            lines.extend(["", "", *decorators, segment or ""])
    return "\n".join(lines) + "\n"


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return list(node.decorator_list) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]
    return []


def _used_names(node: ast.AST) -> set[str]:
    return {name.id for name in ast.walk(node) if isinstance(name, ast.Name)}


def _imports(node: ast.Import | ast.ImportFrom, used: set[str]) -> list[str]:
    lines = []
    for alias in node.names:
        bound = alias.asname or alias.name.split(".")[0]
        if bound not in used or alias.name == "annotations":
            continue
        if isinstance(node, ast.Import):
            lines.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
            continue
        module = "." * node.level + (node.module or "")
        if (module, alias.name) in STAND_INS:
            lines.append(f"from tests.distributed_suite.stand_ins import {alias.name} as {bound}")
        elif module in CLIENT_MODULES and alias.name in OFFERED:
            lines.append(f"from scaler.compat.dask.distributed import {alias.name} as {bound}")
        elif module in CLIENT_MODULES:
            lines.append("from tests.distributed_suite.stand_ins import not_offered as _not_offered")
            lines.append(f"{bound} = _not_offered({module + '.' + alias.name!r})")
        else:
            lines.append(f"from {module} import {alias.name} as {bound}")
    return lines


def candidates(source: str) -> list[str]:
    """The tests of `source` that selection.py's rule makes candidates (see its docstring), in file order."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test_"):
            continue
        parameters = [argument.arg for argument in node.args.args]
        decorators = [ast.unparse(decorator) for decorator in node.decorator_list]
        parametrized = {name.strip() for decorator in node.decorator_list if "parametrize" in ast.unparse(decorator)
                        for name in _parametrized_names(decorator)}
        if isinstance(node, ast.FunctionDef):
            if parameters[:1] == ["c"] and set(parameters[1:]) <= parametrized:
                found.append(node.name)
            continue
        cluster = [decorator for decorator in decorators if decorator.startswith("gen_cluster")]
        if cluster != ["gen_cluster(client=True)"]:
            continue
        used = _used_names(node)
        servers = [name for name in parameters[1:4] if name not in parametrized]
        if node.args.vararg is not None:
            servers.append(node.args.vararg.arg)
        if not any(name in used for name in servers):
            found.append(node.name)
    return found


def _parametrized_names(decorator: ast.expr) -> list[str]:
    if isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant):
        return str(decorator.args[0].value).split(",")
    return []
