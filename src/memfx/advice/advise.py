"""`memfx advise`: GCC string-op strategies and glibc tunables from stored
copy results, each checked by measuring it (shared/DESIGN.md, seed 002).

The seed's kernel thread chose the size below which plain stores beat
`rep movsq/stosq` "semi-arbitrarily ... Someone should revisit this from time
to time".  This module revisits it for the machine at hand:

1. From the newest complete `copy` run it reads the copy analysis's answers:
   the best strategy per size range (copy.best_strategy and
   copy.best_set_strategy, computed once, in experiments/copy/, from the
   points; never a second way here).
2. GCC: it maps the ranges over the strategies GCC can emit to GCC's
   string-op algorithms, merges them to at most four only when there are
   more, and writes `-mmemcpy-strategy=` /
   `-mmemset-strategy=` strings.  Where gcc is installed it compiles a small
   test twice (with and without the strings), runs both in child processes,
   interleaved, and measures the gain per size.
3. glibc: it proposes `GLIBC_TUNABLES` thresholds inside the brackets of
   copy's crossovers (copy.find_crossovers) of the two paths, checks the value glibc really uses (`ld.so
   --list-diagnostics`, which shows clamping) and measures libc
   memcpy/memset in child processes with the current and the proposed
   tunables (tunables are read at process start).
4. Nothing that measured slower (or not measurably faster) is advised: the
   advice is then "keep the default", with the measurement that says so.

The pure parts (strategy strings, ranges, thresholds, the keep-or-advise
decision) are functions of their arguments and are tested on synthetic
curves; the measuring parts run only in child processes.
"""
from __future__ import annotations

import os
import shutil
import time

from ..experiments import copy as copy_analysis
from ..model import findings as fnd
from ..model.errors import MemfxError
from ..model.units import MISSING, format_number, format_size, format_value
from .common import (  # noqa: F401 (re-exported: advise's names stay importable here)
    _child_cpu,
    _interleave,
    _pinned,
    _print,
    _with_losses,
    compare_variants,
    decide,
    disagreement_text,
    gain_text,
    log_gain,
    newest_complete,
    replica_disagreement,
    size_class,
    slower_sizes,
    voters_text,
)
from .gcc import (  # noqa: F401 (re-exported: advise's names stay importable here)
    _C_FUNCS,
    _MISSING_PENALTY,
    BASELINE_VECTOR,
    CHECK_MAX_SIZE,
    CHECK_SIZES,
    DEST_ALIGN,
    GCC_ALGORITHMS,
    GCC_INT_MAX,
    MAX_RANGES,
    METRIC,
    MODE_PREFERENCE,
    OPS,
    STRATEGY_ALG,
    GccCheck,
    NoCopyResults,
    StrategyError,
    _classify,
    _collapse,
    _cost,
    _fastest,
    _gcc_version,
    _geo_ratio,
    _loss,
    _op_of,
    alg_at,
    alg_table,
    check_sizes,
    complete_sizes,
    gcc_check,
    gcc_flags,
    gcc_ranges,
    gcc_stability,
    gcc_test_source,
    gcc_usable,
    merge_ranges,
    modes_of,
    parse_codegen,
    point_curves,
    roundest,
    shown_ranges,
    snap_boundaries,
    strategy_string,
    validate_strategy,
)
from .glibc import (  # noqa: F401 (re-exported: advise's names stay importable here)
    CROSSOVER_QUESTION,
    NT_MINIMUM,
    TUNABLES,
    _as_stat,
    _clear_log_ratio,
    _threshold_evidence,
    best_threshold,
    crossover_check,
    effective_thresholds,
    glibc_check,
    glibc_vector,
    libc_check_sizes,
    path_gain,
    propose_tunable,
    run_libc_child,
    threshold_in_use,
    tunable_proposals,
    tunable_stability,
    tunables_env,
)
from .prefetch import (  # noqa: F401 (re-exported: advise's names stay importable here)
    CHECK_INCONCLUSIVE,
    CONFIRMED,
    CONTRADICTED,
    PREFETCH_CHECK_SAMPLE_MS,
    PREFETCH_CHECK_SAMPLES,
    PREFETCH_CHECK_SEED_OFFSET,
    UNCHECKED,
    _answer,
    _ratio_text,
    check_decision,
    measure_unstored,
    prefetch_advice,
    prefetch_check,
    prefetch_proposals,
    render_prefetch,
)

SCHEMA_VERSION = 1
ADVICE_KIND = "memfx-advice"

# ---- gathering the inputs --------------------------------------------------------------

def copy_sources(store, run_missing=False, runner=None, related=("aliasing", "fill")):
    """{"copy": run, "aliasing": run|None, "fill": run|None}.  Without a
    complete copy run: run it (quick preset) if run_missing, else NoCopyResults."""
    from ..experiments import get_experiment
    out = {}
    for name in ("copy",) + tuple(related):
        run = newest_complete(store, name)
        if run is None and run_missing and runner is not None \
                and get_experiment(name, missing_ok=True) is not None:
            run = store.run(runner(name))
        out[name] = run
    if out["copy"] is None:
        raise NoCopyResults("no copy results in DB; run `memfx run copy` or pass --run-missing")
    return out


def _machine_flags(machine):
    flags = (machine or {}).get("flags") or {}
    return {k: flags.get(k) for k in ("erms", "fsrm", "fzrm", "fsrs", "fsrc", "avx2", "avx512f",
                                       "avx512vl") if k in flags}


def _related_notes(store, runs, documents=None):
    """What the newest aliasing and fill runs found, shown beside the advice
    (their documents from ``documents`` when the caller made them already)."""
    from ..analysis.results import document
    notes = []
    for name in ("aliasing", "fill"):
        run = runs.get(name)
        if run is None:
            notes.append({"experiment": name, "run_id": None,
                          "message": f"no complete {name} run in the DB (advice uses copy results only)"})
            continue
        try:
            doc = (documents or {}).get(run["id"]) or document(store.run(run["id"]),
                                                               store.samples(run["id"]))
        except Exception as e:  # another engineer's analysis must not break advice
            notes.append({"experiment": name, "run_id": run["id"], "message": f"could not analyse: {e}"})
            continue
        answers = doc.get("answers") or []
        shown = [a for a in answers if a.get("verdict") in (fnd.DETECTED, fnd.MEASURED)]
        if not shown:
            verdicts = sorted({a.get("verdict") for a in answers})
            notes.append({"experiment": name, "run_id": run["id"], "message": (
                f"run {run['id']}: nothing detected ({len(answers)} answers: "
                f"{', '.join(map(str, verdicts)) or 'none'}); advice uses copy results only")})
        for a in shown:
            notes.append({"experiment": name, "run_id": run["id"], "finding": a.get("question"),
                          "message": f"{a.get('asks')} {a.get('because')}".strip(),
                          "verdict": a.get("verdict"), "value": a.get("value"),
                          "unit": a.get("unit"), "ci_low": a.get("ci_low"),
                          "ci_high": a.get("ci_high")})
    return notes


def build_advice(copy_doc, glibc, machine=None, replica_docs=None, earlier_docs=None):
    """The unchecked advice from a copy result document and the glibc
    diagnostics (memfx.lab.machine.glibc_tunables()).  Pure.  ``replica_docs``:
    each replica's points alone (replica_documents); ``earlier_docs``: the
    documents of this machine's earlier copy runs (earlier_copy_documents).
    An item the replicas and earlier runs do not give alike (beyond the
    band) or a tunable whose crossover is located no better than
    crossover_max_span gets ``not_advised``, the reason (hold)."""
    points = copy_doc.get("points") or []
    flags = _machine_flags(copy_doc.get("machine") or machine)
    out = {"best": {}, "gcc": {}, "glibc": {}, "warnings": []}
    curves = {}
    for op, fn in OPS.items():
        modes = modes_of(points, op)
        # the ranges are the copy analysis's (its answer in the document),
        # never computed a second way here
        out["best"][op] = {m: shown_ranges(copy_analysis.ranges_from_document(copy_doc, op, m),
                                           point_curves(points, op, m)) for m in modes}
        mode = modes[0] if modes else None
        curves[op] = point_curves(points, op, mode) if mode else {}
        g = gcc_ranges(curves[op], copy_analysis.ranges_from_document(copy_doc, op, mode, True),
                       op=op) if curves[op] else None
        if g is None:
            out["gcc"][fn] = {"string": None, "mode": mode,
                              "reason": f"no {op} points to compare in run {copy_doc.get('run_id')}"}
        else:
            # What the other timing modes would say, as evidence (the seed's
            # thread disputes whether back-to-back or serialised timing is right).
            other = {}
            for m in modes[1:]:
                alt = gcc_ranges(point_curves(points, op, m),
                                 copy_analysis.ranges_from_document(copy_doc, op, m, True), op=op)
                if alt:
                    other[m] = alt["string"]
            out["gcc"][fn] = {**g, "mode": mode, "op": op, "other_modes": other}
    thresholds = (glibc or {}).get("thresholds") or {}
    props = tunable_proposals(curves["copy"], curves["set"], thresholds, flags,
                              (glibc or {}).get("preferred") or {})
    out["glibc"] = {"available": bool((glibc or {}).get("available")),
                    "version": (glibc or {}).get("version"),
                    "reason": (glibc or {}).get("reason"),
                    "current": thresholds,
                    "mode": modes_of(points, "copy")[0] if modes_of(points, "copy") else None,
                    "tunables": props}
    out["flags"] = flags
    def advice_of(docs):
        made = []
        for d in docs or []:
            try:
                made.append(build_advice(d, glibc, machine))
            except Exception:    # one voter's partial data: the others still vote
                continue
        return made
    hold(out, copy_doc, curves, advice_of(replica_docs), advice_of(earlier_docs))
    out["earlier_runs"] = [d.get("run_id") for d in earlier_docs or []]
    return out


def hold(adv, copy_doc, curves, replicas, earlier=()):
    """Marks what does not hold (`not_advised`: why): a GCC string or
    tunable that the replicas, each analysed alone, and the machine's
    earlier runs (``earlier``: their pooled advice) do not give alike where
    it costs more than the band (gcc_stability, tunable_stability), and a
    tunable resting on a crossover located no better than
    crossover_max_span (crossover_check).  Replicas are minutes apart; the
    host can hold one state for longer, and advice that flips from one
    survey to the next is no advice (issue 39)."""
    voters = len(replicas) + len(earlier)
    for fn, g in adv["gcc"].items():
        g["not_advised"] = None
        if voters >= 2 and g.get("string"):
            g["stability"] = gcc_stability(g, [r["gcc"].get(fn) for r in replicas],
                                           curves[g["op"]],
                                           earlier=[r["gcc"].get(fn) for r in earlier])
            if g["stability"] and not g["stability"]["stable"]:
                g["not_advised"] = g["stability"]["reason"]

    def same_tunable(advice, name):
        return next((t for t in advice["glibc"]["tunables"] if t.get("name") == name), None)
    for p in adv["glibc"]["tunables"]:
        theirs = [same_tunable(r, p.get("name")) for r in replicas]
        before = [same_tunable(r, p.get("name")) for r in earlier]
        p["crossover_cis"], p["not_advised"] = crossover_check(p, copy_doc,
                                                              [t for t in theirs if t])
        if voters >= 2 and p.get("proposed") is not None:
            p["stability"] = tunable_stability(p, theirs, curves, earlier=before)
            if p["stability"] and not p["stability"]["stable"]:
                p["not_advised"] = p["not_advised"] or p["stability"]["reason"]
        elif voters >= 2:
            # the pooled curves keep the current value; a replica, analysed
            # alone, or an earlier run that would change it makes "keep" as
            # unstable as a change
            changes = [t["proposed"] for t in theirs + before
                       if t and t.get("proposed") is not None]
            if changes:
                p["not_advised"] = (
                    f"not advised: unstable: {len(changes)} of the "
                    f"{voters_text(len(theirs), len(before))}, each analysed alone, propose "
                    + " or ".join(format_size(v) for v in sorted(set(changes)))
                    + ", the pooled curves no change")


def libc_config(machine):
    """What libc's string functions did when a run measured: glibc's version
    and the thresholds in force (ld.so's diagnostics in the run's
    fingerprint, which GLIBC_TUNABLES changes).  libcall's cost follows it."""
    glibc = (machine or {}).get("glibc") or {}
    return {"version": glibc.get("version"),
            "thresholds": ((glibc.get("diagnostics") or {}).get("thresholds") or None)}


def earlier_copy_documents(store, copy_run, limit=None, documents=None):
    """The result documents of this machine's earlier complete copy runs
    (same machine id, preset and libc configuration, started before
    ``copy_run``), newest first, at most advice_history_runs: they vote on
    the advice as the replicas do.  A run measured under other glibc
    tunables does not vote (its libc took other paths: a change the user
    made, not a state of the host).  Their stored analyses are read
    (analysed and stored when missing); a run that cannot be analysed does
    not vote."""
    from ..analysis.documents import run_values_document
    limit = int(fnd.threshold("advice_history_runs")) if limit is None else limit
    mid, started = copy_run.get("machine_id"), copy_run.get("started") or ""
    out = []
    if not mid or limit <= 0:
        return out
    config = libc_config(copy_run.get("machine"))
    for r in store.runs(experiment="copy"):
        if len(out) >= limit:
            break
        if (r["id"] == copy_run["id"] or r.get("status") != "complete"
                or r.get("machine_id") != mid or r.get("preset") != copy_run.get("preset")
                or (r.get("started") or "") >= started):
            continue
        try:
            doc = (documents or {}).get(r["id"]) or run_values_document(store, store.run(r["id"]))
        except Exception:    # another analysis's failure must not break advice
            continue
        if libc_config(doc.get("machine")) == config:
            out.append(doc)
    return out


def replica_documents(run, samples, mode=None):
    """Each replica's points alone ({"run_id", "replica", "machine",
    "points"}, what build_advice reads; copy's analysis of them is the same
    function as of the pooled points), from the samples of one timing mode
    (the one the advice reads; all when None).  [] for one replica."""
    from ..analysis.results import REPLICA_CI, run_data
    if mode is not None:
        samples = [s for s in samples if (s.get("point") or {}).get("mode") == mode]
    ids = sorted({s.get("replica") or 0 for s in samples})
    if len(ids) < 2:
        return []
    return [{"run_id": run.get("id"), "replica": r, "machine": run.get("machine"),
             "points": run_data(run, [s for s in samples if (s.get("replica") or 0) == r],
                                ci_method=REPLICA_CI).points} for r in ids]


def advise(store, machine=None, check=True, run_missing=False, runner=None, glibc=None,
           rounds_gcc=9, rounds_glibc=7, progress=None, documents=None, control_max=None):
    """Full advice: gather the newest complete runs (running what is missing
    when allowed), derive the advice, check it (unless check=False), store it
    as the copy run's "advice" artifact, and return the document.
    ``documents``: result documents already made, by run id (the survey
    analyses each run once); ``control_max``: no glibc control size above
    this many bytes (libc_check_sizes)."""
    from ..analysis.results import document
    from ..lab.machine import glibc_tunables
    runs = copy_sources(store, run_missing, runner)
    copy_run = store.run(runs["copy"]["id"])
    samples = store.samples(copy_run["id"])
    copy_doc = (documents or {}).get(copy_run["id"]) or document(copy_run, samples)
    glibc = glibc_tunables() if glibc is None else glibc
    # each replica's advice too: what they do not give alike is not advised
    modes = modes_of(copy_doc.get("points") or [], "copy")
    replicas = replica_documents(copy_run, samples, modes[0] if modes else None)
    earlier = earlier_copy_documents(store, copy_run, documents=documents)
    adv = build_advice(copy_doc, glibc, machine, replicas, earlier)
    for item in [*adv["gcc"].values(), *adv["glibc"]["tunables"]]:
        item["run_id"] = copy_run["id"]          # the measurement each one rests on
    say = progress or (lambda msg: None)
    here = ((machine or {}).get("cpu") or {}).get("model_name")
    there = ((copy_doc.get("machine") or {}).get("cpu") or {}).get("model_name")
    if here and there and here != there:
        adv["warnings"].append(fnd.caution("other_machine", (
            "the copy run was measured on another CPU "
            f"({(copy_doc['machine'].get('cpu') or {}).get('model_name')}); checks run on this one"
        )).as_dict())
    # GCC: what does not hold is neither checked nor advised
    for item in [*adv["gcc"].values(), *adv["glibc"]["tunables"]]:
        if item.get("not_advised"):
            item.update(decision="keep", checked=False, check_reason=item["not_advised"])
    strings = {fn: g.get("string") for fn, g in adv["gcc"].items() if not g.get("not_advised")}
    if check and any(strings.values()):
        if not shutil.which("gcc"):
            for g in adv["gcc"].values():
                if not g.get("not_advised"):
                    g.update(checked=False, decision="unchecked", check_reason="gcc not installed")
        else:
            say("checking the GCC strategy strings (compile twice, run interleaved)")
            sizes = {fn: check_sizes(g.get("ranges")) for fn, g in adv["gcc"].items()}
            res = gcc_check(strings, sizes, rounds=rounds_gcc)
            for fn, g in adv["gcc"].items():
                if fn in res:
                    g.update(checked=True, check=res[fn], decision=res[fn]["decision"],
                             check_reason=res[fn]["reason"])
    else:
        for g in adv["gcc"].values():
            if not g.get("not_advised"):
                g.update(checked=False, decision="unchecked" if g.get("string") else "keep",
                         check_reason="--no-check" if g.get("string") else g.get("reason"))
    # glibc
    for prop in adv["glibc"]["tunables"]:
        if prop["proposed"] is None or prop.get("not_advised"):
            prop.update(decision="keep", checked=False)
            continue
        env = tunables_env(os.environ.get("GLIBC_TUNABLES"), prop["tunable"], prop["proposed"])
        eff = effective_thresholds(env) if adv["glibc"]["available"] else None
        if eff is not None:
            prop["effective"] = eff.get(prop["name"])
            prop["effective_all"] = eff
            if prop["effective"] != prop["proposed"]:
                prop.update(decision="keep", checked=False, reason=(
                    f"glibc does not accept {prop['proposed']} for {prop['tunable']} "
                    f"(it would use {prop['effective']})"))
                continue
        if not check:
            prop.update(decision="unchecked", checked=False)
            continue
        say(f"checking {prop['tunable']}={prop['proposed']} (libc in child processes, interleaved)")
        measured = sorted(point_sizes(copy_doc.get("points") or []))
        try:
            res = glibc_check(prop, measured, rounds=rounds_glibc, control_max=control_max)
        except MemfxError as e:
            prop.update(decision="unchecked", checked=False, reason=f"check failed: {e}")
            continue
        prop.update(checked=True, check=res, decision=res["decision"], check_reason=res["reason"])
    accepted = [f"{p['tunable']}={p['proposed']}" for p in adv["glibc"]["tunables"]
                if p.get("decision") == "advise"]
    adv["glibc"]["advised_env"] = ":".join(accepted) or None
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": ADVICE_KIND,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checked": bool(check),
        "sources": {name: ({"run_id": r["id"], "started": r.get("started"), "preset": r.get("preset")}
                           if r else None) for name, r in runs.items()},
        "earlier_runs": adv.get("earlier_runs") or [],
        "flags": adv["flags"],
        "best": adv["best"],
        "gcc": adv["gcc"],
        "glibc": adv["glibc"],
        "notes": _related_notes(store, runs, documents) + [{
            "experiment": "advise", "run_id": None,
            "message": "the checks place dst - src = 0 (mod 4096), outside the 4K-aliasing "
                       "band (1..63) that the aliasing experiment measures"}],
        "warnings": adv["warnings"],
        "prefetch": prefetch_advice(store, machine, check=check, progress=say),
    }
    doc = fnd.jsonable(doc)
    store.set_artifact(copy_run["id"], "advice", doc)
    return doc


def point_sizes(points):
    return {(p.get("params") or {}).get("size_bytes") for p in points
            if isinstance((p.get("params") or {}).get("size_bytes"), int)}


# ---- presentation ------------------------------------------------------------------------

def _size(n):
    """Sizes that are whole KiB/MiB in short form, any other exactly (4097
    must not read as "4 KiB")."""
    if n in (-1, None):
        return "∞"
    n = int(n)
    return format_size(n) if n < 1024 or n % 1024 == 0 else f"{n} B"


def render(doc, console):
    """Human-readable advice (rich)."""
    from rich.markup import escape
    from rich.table import Table
    src = doc["sources"]["copy"]
    flags = ", ".join(f"{k.upper()}={'yes' if v else 'no'}" for k, v in (doc.get("flags") or {}).items())
    _print(console, f"[bold]memfx advise[/bold] from copy run {src['run_id']} "
                  f"({src.get('preset') or '?'} preset, {src.get('started')})")
    if flags:
        _print(console, f"[dim]CPU flags that change the answer: {flags}[/dim]")
    for w in doc.get("warnings", []):
        _print(console, f"[yellow]warning:[/yellow] {escape(w['message'])}")

    for op, modes in doc["best"].items():
        if not modes:
            continue
        mode = next(iter(modes))
        t = Table(title=f"Best {op} strategy per size ({mode} mode)", title_justify="left")
        for c in ("sizes", "best", "ns/call at range start", "at range end", "tied throughout"):
            t.add_column(c)
        for r in modes[mode]:
            t.add_row(f"{_size(r['min_size'])} – {_size(r['max_size'])}", r["strategy"],
                      format_number(r["median_ns_first"]), format_number(r["median_ns_last"]),
                      ", ".join(r.get("tied") or []), style="" if not r.get("tied") else "dim")
        _print(console, t)

    for fn, g in doc["gcc"].items():
        if not g.get("string"):
            _print(console, f"GCC -m{fn}-strategy: {escape(g.get('reason') or 'no advice')}")
            continue
        t = Table(title=f"GCC -m{fn}-strategy= (proposed from {g.get('mode')} mode)", title_justify="left")
        for c in ("alg", "sizes", "stands for", "example size", "ns", "runner-up", "runner-up ns", "speedup"):
            t.add_column(c)
        for r in g["ranges"]:
            ex = r["example"]
            t.add_row(r["alg"], f"{_size(r['min_size'])} – {_size(r['max_size'])}",
                      ", ".join(r["strategies"]), _size(ex["size"]), format_number(ex["ns"]),
                      r["runner_up"] or "-", format_number(ex["runner_up_ns"]),
                      format_value(r["speedup_vs_runner_up"], "x"))
        _print(console, t)
        chk = g.get("check")
        if chk:
            t = Table(title=f"check: gcc -O2 with vs without the string ({chk['rounds']} interleaved "
                      f"runs each)", title_justify="left")
            for c in ("size", "default code", "advised code", "default ns", "advised ns", "gain [95% CI]"):
                t.add_column(c)
            for r in chk["per_size"]:
                gain = gain_text(r)
                style = "" if r.get("differs") else "dim"
                t.add_row(_size(r["size"]), r.get("default") or "?", r.get("advised") or "?",
                          format_number(r["current_ns"]), format_number(r["advised_ns"]), escape(gain), style=style)
            _print(console, t)
        for m, alt in (g.get("other_modes") or {}).items():
            _print(console, f"[dim]{m}-mode curves would give: {escape(alt)}[/dim]")
        if (g.get("stability") or {}).get("stable"):
            _print(console, f"[dim]replicas: {escape(g['stability']['reason'])}[/dim]")
        _verdict_line(console, g.get("decision"), f"-m{fn}-strategy={g['string']}",
                      g.get("check_reason"), "keep GCC's default")

    gl = doc["glibc"]
    _print(console)
    if not gl.get("available"):
        _print(console, f"[dim]glibc diagnostics unavailable: {escape(str(gl.get('reason')))}[/dim]")
    t = Table(title=f"glibc {gl.get('version') or '?'} tunables (from {gl.get('mode')} mode)",
              title_justify="left")
    # a tunable's name is what the user copies: never cut (issue 23)
    t.add_column("tunable", no_wrap=True, min_width=len("x86_non_temporal_threshold"))
    for c in ("current", "proposed", "rests on", "checked gain [95% CI]", "decision"):
        t.add_column(c)
    for p in gl["tunables"]:
        chk = p.get("check")
        if chk:
            o = chk["overall"]
            gain = (gain_text(o)
                    if o.get("ratio") is not None else MISSING)
        else:
            gain = "-"
        rests = p.get("reason") or ""
        ev = p.get("evidence") or []
        if ev:
            b = (p.get("below") or "below").split("_", 1)[-1]
            a = (p.get("above") or "above").split("_", 1)[-1]
            pick = ev if len(ev) <= 3 else [ev[0], ev[len(ev) // 2], ev[-1]]
            rests += "; " + ", ".join(f"{_size(e['size'])}: {b} {format_number(e['below_ns'])} vs {a} "
                                      f"{format_number(e['above_ns'])} ns" for e in pick)
        t.add_row(p["tunable"].split(".")[-1], _bytes(p["current"]), _bytes(p["proposed"]),
                  escape(rests), escape(gain), escape(_decision_text(p)))
    _print(console, t)
    for p in gl["tunables"]:
        if p.get("not_advised"):
            _print(console, f"{p['tunable'].split('.')[-1]}={p['proposed']}: "
                            f"{escape(p['not_advised'])}", soft_wrap=True)
        chk = p.get("check")
        if not chk:
            continue
        t = Table(title=f"check: libc via {chk['kernel']}, {p['tunable'].split('.')[-1]} "
                  f"{p['current']} → {p['proposed']}", title_justify="left")
        for c in ("size", "path changes", "current ns", "advised ns", "gain [95% CI]"):
            t.add_column(c)
        for r in chk["per_size"]:
            t.add_row(_size(r["size"]), "yes" if r["affected"] else "no (control)",
                      format_number(r["current_ns"]), format_number(r["advised_ns"]),
                      escape(gain_text(r)),
                      style="" if r["affected"] else "dim")
        _print(console, t)
    if gl.get("advised_env"):
        _print(console, f"[bold green]advise:[/bold green] GLIBC_TUNABLES={gl['advised_env']}",
               soft_wrap=True)
    elif any(p.get("decision") == "unchecked" for p in gl["tunables"]):
        env = ":".join(f"{p['tunable']}={p['proposed']}" for p in gl["tunables"]
                       if p.get("decision") == "unchecked")
        _print(console, f"[yellow]unchecked proposal:[/yellow] GLIBC_TUNABLES={env}",
               soft_wrap=True)
    else:
        _print(console, "[bold]keep glibc's defaults[/bold] (no tunable measured faster)")
    for n in doc.get("notes", []):
        value = n.get("value")
        value = f" = {format_value(value, n.get('unit'))}" if isinstance(value, (int, float)) else ""
        who = "note" if n.get("experiment") == "advise" else n.get("experiment")
        _print(console, f"[dim]{who}: {escape(str(n.get('message')))}{value}[/dim]")
    render_prefetch(doc, console)


def _decision_text(item):
    d = item.get("decision") or "keep"
    if item.get("not_advised"):
        return "keep (not advised)"
    why = item.get("check_reason") if item.get("checked") else None
    if d == "keep" and why:
        return f"keep ({why.split(':')[0].split(' (')[0]})"
    return d


def _bytes(n):
    return "-" if n is None else f"{n} ({_size(n)})"


def _verdict_line(console, decision, what, reason, keep_text):
    from rich.markup import escape
    if decision == "advise":
        _print(console, f"[bold green]advise:[/bold green] {escape(what)}  ({escape(reason or '')})",
               soft_wrap=True)
    elif decision == "unchecked":
        _print(console, f"[yellow]unchecked proposal:[/yellow] {escape(what)}  ({escape(reason or '')})",
               soft_wrap=True)
    else:
        _print(console, f"[bold]{keep_text}[/bold]: {escape(reason or '')}  (proposal was {escape(what)})",
               soft_wrap=True)

