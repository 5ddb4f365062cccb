"""The layout fields of a run file (runs/*.json), in the order run files write them: shared by
the scripts that write run files from published tables (write-nemo-*.py)."""


def layout_fields(model, hardware, gpus, tp, cp, pp, vp, dp, mbs, gbs, seq, gpus_per_node=8):
    """model … seq of a run file: the model, the profile, its nodes, the method and the layout."""
    return {
        "model": model,
        "hardware": hardware,
        "nodes": gpus // gpus_per_node,
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
