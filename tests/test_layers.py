"""The house matches its plan (issue 24): every module of memfx sits in one
layer, and a module imports only from its own layer or the layers below it.

The layers, bottom to top (docs/architecture.md draws the same map):

  base          units, errors, statuses, stats, outputs, protocol types, the version,
                the typed machine fingerprint
  vocabulary    what an experiment declares and returns: questions and answers,
                verdict rules and thresholds, plot specs
  lab           the lab, the machine's collection and identity, the C core
  store         SQLite, PostgreSQL, the export schema
  kit           what the experiments share: the Experiment protocol and registry,
                level and thread helpers
  experiments   one module per effect, and the package that registers them
  analysis      samples -> points -> answers -> documents, compare, fleet views
  running       the runner and the worker (the worker's refinement rounds
                analyse the points taken so far, so running sits on analysis)
  presentation  terminal tables and screens, plots, the HTML report
  advice        GCC and glibc advice, tune
  face          the command line, the Python API, the survey

Besides the order, some downward edges are forbidden: the analysis is a
function of documents and samples handed to it (it never imports the store),
the presentation reads documents only (no lab, store, experiment or runner),
only the lab touches the C core, and an experiment imports the kit, never
another experiment.

The test parses the source with `ast` (imports inside functions count too),
so it sees the package as written, not as installed.
"""
import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "memfx"

LAYERS = ["base", "vocabulary", "lab", "store", "kit", "experiments", "analysis", "running",
          "presentation", "advice", "face"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Every module, by its dotted name.  An experiment module needs no entry:
# any memfx.experiments.X not named here is an effect (adding an effect
# stays "add a module", with no list to keep).
PLACES = {
    # base
    "memfx.units": "base",
    "memfx.errors": "base",
    "memfx.status": "base",
    "memfx.version": "base",
    "memfx.protocol": "base",
    "memfx.stats": "base",
    "memfx.curves": "base",
    "memfx.outputs": "base",
    "memfx.forking": "base",
    "memfx.machine_view": "base",
    # vocabulary
    "memfx.answers": "vocabulary",
    "memfx.findings": "vocabulary",
    "memfx.plotspec": "vocabulary",
    # lab
    "memfx._lab": "lab",
    "memfx._perf": "lab",
    "memfx.busy": "lab",
    "memfx._core": "lab",
    "memfx.machine": "lab",
    "memfx.sysfs": "lab",
    "memfx.cpuid": "lab",
    "memfx.ldso": "lab",
    # store
    "memfx.store": "store",
    "memfx.store_sql": "store",
    "memfx.store_sqlite": "store",
    "memfx.store_files": "store",
    "memfx.pgstore": "store",
    "memfx.schema": "store",
    # kit
    "memfx.experiments.base": "kit",
    "memfx.experiments.levels": "kit",
    "memfx.experiments._kit": "kit",
    # an effect's helpers, split off by concern (a leading underscore: the
    # registry's loader takes them for no experiment); in the kit, so that
    # they import no experiment and any experiment may use them
    "memfx.experiments._fill_checks": "kit",
    "memfx.experiments._fill_ratio": "kit",
    "memfx.experiments._bandwidth_kernels": "kit",
    "memfx.experiments._bandwidth_analysis": "kit",
    "memfx.experiments._sweep": "kit",
    "memfx.experiments._copy_kernels": "kit",
    "memfx.experiments._copy_curves": "kit",
    "memfx.experiments._store_forward_kernels": "kit",
    "memfx.experiments._store_forward_analysis": "kit",
    # experiments: the package (the registry's loader); effects by the rule above
    "memfx.experiments": "experiments",
    # analysis
    "memfx.results": "analysis",
    "memfx.documents": "analysis",
    "memfx.answer_cache": "analysis",
    "memfx.compare": "analysis",
    "memfx.compare_curves": "analysis",
    "memfx.fleet": "analysis",
    # running
    "memfx.runner": "running",
    "memfx._worker": "running",
    # presentation
    "memfx.render": "presentation",
    "memfx.screen": "presentation",
    "memfx.plots": "presentation",
    "memfx.report": "presentation",
    "memfx.report_html": "presentation",
    "memfx.report_sections": "presentation",
    "memfx.report_advice": "presentation",
    "memfx.fleetreport": "presentation",
    "memfx.cli_show": "face",
    "memfx.cli_args": "face",
    # advice
    "memfx.advise": "advice",
    "memfx.advise_common": "advice",
    "memfx.advise_gcc": "advice",
    "memfx.advise_glibc": "advice",
    "memfx.advise_prefetch": "advice",
    "memfx.tune": "advice",
    # face
    "memfx": "face",
    "memfx.__main__": "face",
    "memfx.cli": "face",
    "memfx.api": "face",
    "memfx.survey": "face",
}

KIT = {m for m, layer in PLACES.items() if layer == "kit"}

# Downward edges that are still not allowed: (from layer, to layer) -> why.
FORBIDDEN = {
    ("analysis", "store"): "the analysis works on the documents and samples it is handed",
    ("presentation", "lab"): "the presentation reads documents only",
    ("presentation", "store"): "the presentation reads documents only",
    ("presentation", "kit"): "the presentation reads documents only",
    ("presentation", "experiments"): "the presentation reads documents only",
    ("presentation", "running"): "the presentation reads documents only",
}
CORE = "memfx._core"

# Edges that break the rules today, each with the reason it is still here
# (the test fails on an entry that no longer matches an import, so the list
# can only shrink).  Empty: the presentation reads what the documents carry
# (their plots, the experiment's description, the machine's capabilities).
ALLOWED: dict = {}

# Modules over MAX_LINES that are split elsewhere; remove each entry when
# its module is split.  Empty: every module is at most MAX_LINES long.
MAX_LINES = 800
LONG = {"memfx._lab": "the lab's sampling splits off with issue 44's move"}


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


def layer_of(module):
    if module in PLACES:
        return PLACES[module]
    if module.startswith("memfx.experiments."):
        return "experiments"
    return None


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
    assert not unplaced, f"modules in no layer (add them to PLACES): {unplaced}"


def test_the_table_names_only_modules_that_exist():
    stale = sorted(set(PLACES) - known_modules())
    assert not stale, f"PLACES names modules that do not exist: {stale}"


def test_imports_point_down():
    bad = []
    for src, targets in sorted(import_graph().items()):
        for dst, line in sorted(targets.items()):
            why = broken_rule(src, dst)
            if why and (src, dst) not in ALLOWED:
                bad.append(f"{src}:{line} imports {dst}: {why}")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_allowed_edges_are_still_needed():
    graph = import_graph()
    stale = [f"{s} -> {d}" for s, d in ALLOWED
             if d not in graph.get(s, {}) or broken_rule(s, d) is None]
    assert not stale, f"ALLOWED lists edges that are gone or now fine (remove them): {stale}"


def test_no_import_cycles():
    graph = {s: {d for d in targets if (s, d) not in ALLOWED}
             for s, targets in import_graph().items()}
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


@pytest.mark.parametrize("module", sorted(python_modules()))
def test_module_length(module):
    lines = len(python_modules()[module].read_text().splitlines())
    if module in LONG:
        assert lines > MAX_LINES, f"{module} is {lines} lines now: remove it from LONG"
    else:
        assert lines <= MAX_LINES, f"{module} is {lines} lines (at most {MAX_LINES}): split it"
