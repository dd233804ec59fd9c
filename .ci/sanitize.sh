#!/usr/bin/env bash
# The C core under AddressSanitizer and UndefinedBehaviorSanitizer: build it
# into a scratch directory (never the tree the other tests import), then run
# the core and binding tests against that build with libasan preloaded
# (CPython itself is not instrumented, so the runtime must come first).
# Any sanitizer report fails the job: the runtimes abort on the first error,
# and the log is searched for reports a test might have swallowed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/memfx-sanitize.XXXXXX")
trap '[ -n "${KEEP_SANITIZE:-}" ] || rm -rf "$work"' EXIT

san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
echo "sanitize: building the core with $san"
CFLAGS="$san -g" LDFLAGS="$san" python setup.py -q build_ext \
    --build-lib "$work/lib" --build-temp "$work/tmp" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log"; exit 1; }

# the package's Python files with the sanitized extension next to them
mkdir -p "$work/pkg"
cp -r src/memfx "$work/pkg/memfx"
find "$work/pkg/memfx" -name '_core*.so' -delete
cp "$work"/lib/memfx/lab/_core*.so "$work/pkg/memfx/lab/"

preload=$(gcc -print-file-name=libasan.so)
[ -f "$preload" ] || { echo "sanitize: libasan.so not found (gcc -print-file-name)"; exit 1; }
# numpy and friends may load C++ code; libstdc++ loaded up front keeps
# ASan's interceptors consistent
stdcxx=$(gcc -print-file-name=libstdc++.so)
[ -f "$stdcxx" ] && preload="$preload $stdcxx"

export LD_PRELOAD="$preload"
# CPython keeps objects alive until exit by design: leaks are not errors here
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$work/pkg"
export MEMFX_SANITIZED=1

python - <<'PY'
import memfx.lab._core as c, os, sys
assert c.__file__.startswith(os.environ["PYTHONPATH"]), c.__file__
print("sanitize: testing", c.__file__)
PY

# --capture=sys: a report written by the runtime to fd 2 reaches the log even
# when it aborts pytest itself
status=0
python -m pytest -q -p no:cacheprovider --capture=sys \
    "$repo/tests/test_core.py" "$repo/tests/test_core_fuzz.py" "$repo/tests/test_team.py" \
    "$repo/tests/test_binding_safety.py" 2>&1 | tee "$work/pytest.log" \
    || status=$?
unset LD_PRELOAD

if grep -qE "ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" \
        "$work/pytest.log"; then
    echo "sanitize: FAILED: the sanitizers reported an error (above)"
    exit 1
fi
[ "$status" -eq 0 ] || echo "sanitize: FAILED: tests failed under the sanitizers (status $status)"
exit "$status"
