"""Every test that measures carries the `measuring` marker, so that
`pytest -m "not measuring"` runs the pure tests alone.  A static scan of
tests/*.py: a test measures when it, a function of its own file it calls, or
a fixture of its own file it takes starts the CLI's run/survey/tune, a worker
(the runner, `memfx.run`), any other process (subprocess, a Selenium
webdriver), builds a `Lab` or calls a kernel (through `_core` or a checker
that does).  A few pure tests that take seconds carry the marker too
(tests/test_import_validation.py's reader sweeps): the scan only asks for it
where it must be."""
import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MEASURING_COMMANDS = {"run", "survey", "tune"}
MEASURING_CALLS = {"Lab", "run_experiment", "run_survey"}
KERNEL_CALLS = {"_core.run", "_core.team_run", "_core.verify_copy", "_core.fill_check"}
# the experiments' and the lab's helpers that call kernels (byte-exact checks)
KERNEL_HELPERS = {"call_kernel", "check_kernel", "check_read_kernel", "check_random_kernel",
                  "check_write_read_kernel", "verify_kernel", "run_kernel"}
WORKER_CALLS = {"memfx.run", "api.run"}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.append(node.id if isinstance(node, ast.Name) else "?")
    return ".".join(reversed(parts))


def _reasons(fn):
    """What `fn` itself does that measures, and the names it calls."""
    found, called = set(), set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        called.add(last)
        first = node.args[0] if node.args else None
        if last == "run_cli" and isinstance(first, ast.Constant) and first.value in MEASURING_COMMANDS:
            found.add(f"run_cli({first.value!r})")
        elif last in MEASURING_CALLS | KERNEL_HELPERS or name in KERNEL_CALLS | WORKER_CALLS:
            found.add(name)
        elif name.startswith(("subprocess.", "webdriver.")):
            found.add(name)
    return found, called


def _marked(decorators):
    return any("measuring" in ast.unparse(d) for d in decorators)


def unmarked_measuring_tests(source):
    """[(test name, reasons)] for the tests of one file that measure without the marker."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                for t in node.targets):
            if "measuring" in ast.unparse(node.value):
                return []
    functions = {n.name: n for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    direct = {name: _reasons(fn) for name, fn in functions.items()}

    def closure(name, seen):
        if name in seen or name not in functions:
            return set()
        seen.add(name)
        found, called = direct[name]
        found = set(found)
        for other in called | {a.arg for a in functions[name].args.args}:
            found |= closure(other, seen)
        return found

    out = []
    for node in tree.body:
        candidates = [node] if isinstance(node, ast.FunctionDef) else \
            [m for m in node.body if isinstance(m, ast.FunctionDef)] \
            if isinstance(node, ast.ClassDef) else []
        class_marked = isinstance(node, ast.ClassDef) and _marked(node.decorator_list)
        for fn in candidates:
            if not fn.name.startswith("test") or class_marked or _marked(fn.decorator_list):
                continue
            reasons = closure(fn.name, set())
            if reasons:
                out.append((fn.name, sorted(reasons)))
    return out


def test_every_measuring_test_is_marked():
    missing = {}
    for path in sorted(TESTS.glob("test_*.py")):
        found = unmarked_measuring_tests(path.read_text())
        if found:
            missing[path.name] = found
    assert not missing, ("tests that measure without @pytest.mark.measuring "
                         f"(or a module pytestmark): {missing}")


def test_the_scan_finds_what_it_should():
    helper = '''
import pytest
from conftest import run_cli

def _make(db):
    return run_cli("run", "latency", db=db)

@pytest.fixture
def lab():
    return Lab()

def test_via_helper(db_path):
    _make(db_path)

def test_via_fixture(lab):
    pass

@pytest.mark.measuring
def test_marked(db_path):
    _make(db_path)

def test_pure_cli(db_path):
    run_cli("runs", db=db_path)

def test_child():
    subprocess.run(["true"])
'''
    found = dict(unmarked_measuring_tests(helper))
    assert found == {"test_via_helper": ["run_cli('run')"], "test_via_fixture": ["Lab"],
                     "test_child": ["subprocess.run"]}
    whole = "import pytest\npytestmark = pytest.mark.measuring\n" + helper
    assert unmarked_measuring_tests(whole) == []
    listed = "import pytest\npytestmark = [pytest.mark.measuring, pytest.mark.slow]\n" + helper
    assert unmarked_measuring_tests(listed) == []
