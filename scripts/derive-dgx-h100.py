#!/usr/bin/env python3
"""Re-derive dgx-h100's kernel model from hgx-h200's after a refit of the latter.

H100 SXM and H200 SXM share the GH100 compute die, clocks and 700 W board power; only the
memory differs. Every `kernels` figure of hardware-profiles/dgx-h100.json whose source starts
with "derived: the H200's value" takes hgx-h200's value at the same place, and its source
quotes hgx-h200's source. Figures with other sources (tile shapes, the H100's own HBM) are left
alone. Usage: python3 scripts/derive-dgx-h100.py  (rewrites dgx-h100.json in place; run
`cargo run --release -- validate` afterwards to see what moved).
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
H100 = ROOT / "hardware-profiles" / "dgx-h100.json"
H200 = ROOT / "hardware-profiles" / "hgx-h200.json"
PREFIX = "derived: the H200's value (hardware-profiles/hgx-h200.json, "
WHY = ("): H100 SXM has the same GH100 compute die and clocks (hardware.md §4, S2 note 4, S51) "
       "and the same 700 W board power; memory-bound terms are priced at this profile's own "
       "gpu.hbm_bytes_per_s")


def walk(a, b, path):
    if isinstance(a, dict) and "value" in a and "source" in a:
        if a["source"].startswith(PREFIX):
            if not (isinstance(b, dict) and "value" in b):
                raise SystemExit(f"{path}: hgx-h200 has no figure here")
            a["value"] = b["value"]
            a["source"] = PREFIX + b["source"] + WHY
        return
    if isinstance(a, dict):
        for k in a:
            walk(a[k], b.get(k) if isinstance(b, dict) else None, f"{path}.{k}")
    elif isinstance(a, list):
        for i, x in enumerate(a):
            walk(x, b[i] if isinstance(b, list) and i < len(b) else None, f"{path}[{i}]")


h100 = json.loads(H100.read_text())
h200 = json.loads(H200.read_text())
walk(h100["kernels"], h200["kernels"], "kernels")
H100.write_text(json.dumps(h100, indent=2, ensure_ascii=False) + "\n")
