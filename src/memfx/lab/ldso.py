"""glibc as the machine has it: the dynamic loader (found from an ELF's
PT_INTERP or the usual paths) and what `ld.so --list-diagnostics` says
(its tunables, their ranges and defaults).  Read by the fingerprint and by
advise and tune; machine.py re-exports the public names."""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

from memfx.lab.cpuid import _bit
from memfx.lab.sysfs import _path

# --------------------------------------------------------------------------
# glibc: ld.so --list-diagnostics

def _unquote(s):
    """Undo ld.so's quoting: \\\\, \\" and \\ooo (octal) escapes."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if re.fullmatch(r"[0-7]{3}", s[i + 1:i + 4] or ""):
                out.append(chr(int(s[i + 1:i + 4], 8)))
                i += 4
                continue
            out.append(nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _diag_value(raw):
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        return _unquote(raw[1:-1])
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", raw):
        return int(raw, 16)
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    return raw


def parse_ld_diagnostics(text):
    """Parse `ld.so --list-diagnostics` output (glibc >= 2.33).

    Returns {"version", "release", "thresholds", "preferred", "cache",
    "isa_level", "glibc_tunables_env", "tunables_set"}.  thresholds holds every
    scalar x86.cpu_features.*threshold* as an int (rep_movsb_threshold,
    rep_stosb_threshold, rep_movsb_stop_threshold, non_temporal_threshold...).
    Lines of any other shape are ignored; garbage gives empty results."""
    out = {
        "version": None, "release": None,
        "thresholds": {}, "preferred": {}, "cache": {},
        "isa_level": None, "glibc_tunables_env": None, "tunables_set": {},
    }
    if not isinstance(text, str):
        text = (text or b"").decode("utf-8", "replace") if isinstance(text, bytes) else ""
    prefix = "x86.cpu_features."
    for line in text.splitlines():
        m = re.match(r"\s*([A-Za-z_][\w.\[\]]*)=(.*)$", line)
        if not m:
            continue
        key, value = m.group(1), _diag_value(m.group(2))
        if key == "version.version" and isinstance(value, str):
            out["version"] = value
        elif key == "version.release" and isinstance(value, str):
            out["release"] = value
        elif re.fullmatch(r"env\[[^\]]*\]", key) and isinstance(value, str) \
                and value.startswith("GLIBC_TUNABLES="):
            out["glibc_tunables_env"] = value[len("GLIBC_TUNABLES="):]
        elif key.startswith(prefix) and isinstance(value, int):
            name = key[len(prefix):]
            if name.startswith("preferred.") and re.fullmatch(r"\w+", name[10:]):
                out["preferred"][name[10:]] = bool(value)
            elif not re.fullmatch(r"\w+", name):
                continue                      # arrays (features[..]) etc.
            elif "threshold" in name:
                out["thresholds"][name] = value
            elif "cache" in name:
                # (long int) -1 means "unknown" (e.g. no L4)
                out["cache"][name] = None if value in (2**64 - 1, 2**32 - 1) else value
            elif name == "isa_1":
                level = None
                for bit, lvl in ((0, "x86-64"), (1, "x86-64-v2"), (2, "x86-64-v3"), (3, "x86-64-v4")):
                    if not _bit(value, bit):
                        break
                    level = lvl
                out["isa_level"] = level
    env = out["glibc_tunables_env"]
    if env:
        for item in env.split(":"):
            if "=" in item:
                k, v = item.split("=", 1)
                if k:
                    out["tunables_set"][k] = v
    return out


def _elf_interp(path):
    """PT_INTERP of an ELF file (the dynamic loader it asks for), or None."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return None
            cls, data = ident[4], ident[5]
            end = "<" if data == 1 else ">"
            if cls == 2:
                phoff, = struct.unpack_from(end + "Q", ident, 0x20)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x36)
            elif cls == 1:
                phoff, = struct.unpack_from(end + "I", ident, 0x1C)
                phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x2A)
            else:
                return None
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                ph = f.read(phentsize)
                if len(ph) < phentsize:
                    return None
                if struct.unpack_from(end + "I", ph, 0)[0] != 3:   # PT_INTERP
                    continue
                if cls == 2:
                    off, = struct.unpack_from(end + "Q", ph, 8)
                    size, = struct.unpack_from(end + "Q", ph, 0x20)
                else:
                    off, = struct.unpack_from(end + "I", ph, 4)
                    size, = struct.unpack_from(end + "I", ph, 0x10)
                f.seek(off)
                s = f.read(min(size, 4096)).split(b"\0", 1)[0].decode("utf-8", "replace")
                return s or None
    except (OSError, struct.error):
        return None
    return None


_LD_CANDIDATES = (
    "lib64/ld-linux-x86-64.so.2",
    "lib/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "lib/ld-linux-aarch64.so.1",
    "lib64/ld-linux-aarch64.so.1",
    "lib/ld-linux.so.2",
)


def find_ld_so(sysroot="/"):
    """The dynamic loader: PT_INTERP of this Python (only for sysroot "/"),
    else a well-known path under sysroot.  None if nothing executable."""
    cands = []
    if os.path.abspath(sysroot) == "/" and sys.executable:
        interp = _elf_interp(os.path.realpath(sys.executable))
        if interp:
            cands.append(interp)
    cands += [_path(sysroot, c) for c in _LD_CANDIDATES]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def glibc_tunables(ld_so=None, sysroot="/", timeout=5.0):
    """Run `ld.so --list-diagnostics` and parse it (see parse_ld_diagnostics).

    The loader sees only GLIBC_TUNABLES from our environment (if set), so the
    thresholds are those this process would get.  Any failure gives
    {"available": False, "reason": ..., "ld_so": path-or-None}."""
    path = ld_so or find_ld_so(sysroot)
    if path is None:
        return {"available": False, "ld_so": None,
                "reason": f"no dynamic loader (ld.so) found under {sysroot}"}
    env = {}
    if "GLIBC_TUNABLES" in os.environ:
        env["GLIBC_TUNABLES"] = os.environ["GLIBC_TUNABLES"]
    try:
        proc = subprocess.run([path, "--list-diagnostics"], capture_output=True,
                              timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"available": False, "ld_so": path,
                "reason": f"{path} --list-diagnostics timed out after {timeout:g} s"}
    except OSError as e:
        return {"available": False, "ld_so": path,
                "reason": f"cannot run {path}: {e.strerror or e}"}
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return {"available": False, "ld_so": path,
                "reason": (f"{path} --list-diagnostics exited with status {proc.returncode} "
                           f"(needs glibc >= 2.33)" + (f": {err[0]}" if err else ""))}
    parsed = parse_ld_diagnostics(proc.stdout.decode("utf-8", "replace"))
    if parsed["version"] is None:
        return {"available": False, "ld_so": path,
                "reason": f"{path} --list-diagnostics gave no version line (not glibc >= 2.33?)"}
    out = {"available": True, "ld_so": path, "reason": None}
    out.update(parsed)
    return out
