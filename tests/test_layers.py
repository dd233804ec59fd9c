"""The house matches its plan (issues 24 and 44): every package of memfx is
one layer, and a module imports only from its own layer or the layers
below it.

The layers, bottom to top (docs/architecture.md draws the same map), with
the package that holds each:

  base          memfx.model: units, errors, statuses, stats, curves, outputs,
                protocol types, the version, the typed machine fingerprint
  vocabulary    memfx.model's answers, findings and plotspec: what an
                experiment declares and returns (questions and answers,
                verdict rules and thresholds, plot specs)
  lab           memfx.lab: the lab, the machine's collection and identity,
                the C core (memfx.lab._core)
  store         memfx.store: SQLite, PostgreSQL, the export schema
  kit           memfx.experiments' base, levels and _-prefixed modules: what
                the experiments share (the Experiment protocol and registry,
                level, sweep and thread helpers); and the modules inside an
                effect's package besides its protocol (its analysis and kernels)
  experiments   memfx.experiments: one package per effect, whose __init__ is
                the effect's protocol, and the package that registers them
  analysis      memfx.analysis: samples -> points -> answers -> documents,
                compare, fleet views
  running       memfx.running: the runner and the worker (the worker's
                refinement rounds analyse the points taken so far, so running
                sits on analysis)
  presentation  memfx.report: terminal tables and screens, plots, the HTML report
  advice        memfx.advice: GCC and glibc advice, tune
  face          memfx.cli and the package's own __init__, __main__ and api:
                the command line, the Python API, the survey

Two packages hold two layers each, split by a rule rather than a list: in
the model, the vocabulary sits on the base; in the experiments, the kit
sits below the effects.  Besides the order, some downward edges are
forbidden: the analysis is a function of documents and samples handed to
it (it never imports the store), the presentation reads documents only (no
lab, store, experiment or runner), only the lab touches the C core, and an
experiment imports the kit, never another experiment.  There is no list of
allowed exceptions.

The test parses the source with `ast` (imports inside functions count too),
so it sees the package as written, not as installed.  Long modules are
reported, not refused (issue 44: the 800-line limit is advisory).
"""
import ast
import warnings
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "memfx"

LAYERS = ["base", "vocabulary", "lab", "store", "kit", "experiments", "analysis", "running",
          "presentation", "advice", "face"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Every package, by its dotted name, and its layer.  A module is placed by
# the package it is in; a new module in a package needs no entry.
PLACES = {
    "memfx.model": "base",
    "memfx.lab": "lab",
    "memfx.store": "store",
    "memfx.experiments": "experiments",
    "memfx.analysis": "analysis",
    "memfx.running": "running",
    "memfx.report": "presentation",
    "memfx.advice": "advice",
    "memfx.cli": "face",
}
# The top of the package is the public door, nothing else: `import memfx`
# (the API's re-exports), `python -m memfx` and the API itself.
TOP = {"memfx": "face", "memfx.__main__": "face", "memfx.api": "face"}

# In the model, the vocabulary: what an experiment declares and returns.
VOCABULARY = {"memfx.model.answers", "memfx.model.details", "memfx.model.findings",
              "memfx.model.plotspec"}


def in_kit(module):
    """The experiments' kit: the protocol and registry (base), the level
    helpers (levels), every _-prefixed module (the registry's loader skips
    those: shared helpers), and every module inside an effect's package but
    its __init__ (the effect's protocol): its analysis and kernels, split off
    by concern, which the protocol imports and re-exports."""
    parts = module.split(".")
    if parts[:2] != ["memfx", "experiments"] or len(parts) < 3:
        return False
    if len(parts) == 3:
        return parts[2] in ("base", "levels") or parts[2].startswith("_")
    return True


# Downward edges that are still not allowed: (from layer, to layer) -> why.
FORBIDDEN = {
    ("analysis", "store"): "the analysis works on the documents and samples it is handed",
    ("presentation", "lab"): "the presentation reads documents only",
    ("presentation", "store"): "the presentation reads documents only",
    ("presentation", "kit"): "the presentation reads documents only",
    ("presentation", "experiments"): "the presentation reads documents only",
    ("presentation", "running"): "the presentation reads documents only",
}
CORE = "memfx.lab._core"

# Modules longer than this are reported (a warning), not refused: a module
# is split where it has seams, not at a line count (issue 44, item 5).
MAX_LINES = 800


def module_name(path):
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_modules():
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def known_modules():
    mods = set(python_modules())
    mods.add(CORE)      # the C extension: only its sources are in the tree
    return mods


def package_of(module):
    """The package of PLACES a module is in (itself for a package's
    __init__), or None; "memfx" for the top's modules."""
    if module in TOP:
        return "memfx"
    while module not in PLACES and "." in module:
        module = module.rpartition(".")[0]
    return module if module in PLACES else None


def layer_of(module):
    if module in TOP:
        return TOP[module]
    layer = PLACES.get(package_of(module))
    if layer == "base" and module in VOCABULARY:
        return "vocabulary"
    if layer == "experiments" and in_kit(module):
        return "kit"
    return layer


def _owner(name, known):
    """The module a dotted name belongs to: itself or its nearest parent."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in known else None


def imports_of(module, path, known):
    """{imported memfx module: first line}, from every import statement in
    the file (inside functions too)."""
    is_package = path.name == "__init__.py"
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base.pop()
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from x import y` imports the module x.y when there is one
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin
                       for a in node.names]
        for name in targets:
            if name == "memfx" or name.startswith("memfx."):
                owner = _owner(name, known)
                if owner and owner != module:
                    found.setdefault(owner, node.lineno)
    return found


def import_graph():
    known = known_modules()
    return {m: imports_of(m, p, known) for m, p in python_modules().items()}


def broken_rule(src, dst):
    """Why the import src -> dst is not allowed, or None."""
    a, b = layer_of(src), layer_of(dst)
    if RANK[b] > RANK[a]:
        return f"points up ({a} -> {b})"
    if (a, b) in FORBIDDEN:
        return f"{a} -> {b}: {FORBIDDEN[(a, b)]}"
    if dst == CORE and a != "lab":
        return "only the lab touches the C core"
    if a == "experiments" == b and src != "memfx.experiments" and dst != "memfx.experiments":
        return "an experiment imports the kit, never another experiment"
    return None


def test_every_module_is_placed():
    unplaced = sorted(m for m in known_modules() if layer_of(m) is None)
    assert not unplaced, (f"modules in no layer (put them in a package of PLACES; the top "
                          f"holds only {sorted(TOP)}): {unplaced}")


def test_the_table_names_only_packages_that_exist():
    stale = sorted(set(PLACES) - known_modules()) + sorted(set(TOP) - known_modules()) + \
        sorted(VOCABULARY - known_modules())
    assert not stale, f"PLACES, TOP or VOCABULARY name what does not exist: {stale}"


def test_imports_point_down():
    bad = []
    for src, targets in sorted(import_graph().items()):
        for dst, line in sorted(targets.items()):
            why = broken_rule(src, dst)
            if why:
                bad.append(f"{src}:{line} imports {dst}: {why}")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {s: set(targets) for s, targets in import_graph().items()}
    # Tarjan's strongly connected components
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_packages_import_one_way():
    """Between packages, too, the graph has no cycle: analysis -> experiments
    -> model, never back (issue 44)."""
    edges = {(package_of(s), package_of(d))
             for s, targets in import_graph().items() for d in targets}
    back = sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges)
    assert not back, f"packages that import each other: {back}"


@pytest.mark.parametrize("package", sorted(PLACES))
def test_every_package_says_what_it_owns_and_stays_light(package):
    """Its __init__ has a docstring saying what it may import, and imports
    nothing at import time (the experiments' registry loader excepted: it
    is the package's one job), so that `import memfx` stays quick."""
    path = SRC.parent / package.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    assert "import" in doc, f"{package}: its docstring should say what it may import"
    if package != "memfx.experiments":
        imports = [n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not imports, f"{package}/__init__.py imports at lines {imports}: keep it light"


def test_long_modules_are_reported_not_refused():
    long = {m: n for m, p in python_modules().items()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    if long:
        warnings.warn("modules over %d lines (advisory, issue 44): %s" % (
            MAX_LINES, ", ".join(f"{m} {n}" for m, n in sorted(long.items()))))
