"""The layout fields of a run file (runs/*.json), in the order run files write them: shared by
the scripts that write run files from published tables (write-nemo-*.py)."""


def layout_fields(model, hardware, gpus, tp, cp, pp, vp, dp, mbs, gbs, seq, gpus_per_node=8):
    """model … seq of a run file: the model, the profile, its nodes (a run on part of one node,
    as NeMo's long-sequence tables have, is on one), the method and the layout."""
    return {
        "model": model,
        "hardware": hardware,
        "nodes": -(-gpus // gpus_per_node),
        "method": "tp-sp",
        "p": tp,
        "cp": cp,
        "pp": pp,
        "interleave": vp,
        "dp": dp,
        "micro_batch": mbs,
        "global_batch": gbs,
        "seq": seq,
    }


def output_dir(default, script):
    """The folder a writer writes into: `default` (runs/), or DIR from `--out DIR`; a usage line
    naming `script` otherwise."""
    import pathlib
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--out":
        return pathlib.Path(sys.argv[2]).resolve()
    if len(sys.argv) != 1:
        sys.exit(f"usage: {script} [--out DIR]")
    return default


def write_json(path, obj):
    """`obj` as a run file or model file writes it: indented, UTF-8, one final newline."""
    import json

    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_runs(default, script, files):
    """Writes `files` — (file stem, run file) pairs — into `default` or `--out DIR` (output_dir),
    and says how many."""
    out = output_dir(default, script)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for slug, f in files:
        write_json(out / f"{slug}.json", f)
        n += 1
    print(f"wrote {n} run files to {out}")
