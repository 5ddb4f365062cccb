#!/usr/bin/env python3
"""Writes hardware-profiles/a100-jean-zay-opa.json: the A100 partition of IDRIS's Jean Zay on
which BLOOM-176B was trained (BigScience 2022, arXiv 2211.05100, §3.4.1; the training's
bigscience-workshop/bigscience train/tr11-176B-ml/README.md), derived from dgx-a100-80gb.json.

The GPU, kernel model, NVLink figures and reserved memory are dgx-a100-80gb's: the nodes hold 8
A100-SXM4-80GB joined by NVLink ("4 NVLink GPU-to-GPU interconnects per node", §3.4.1); read as
HGX A100 NVLink, whether through NVSwitch or, on a four-GPU board, four NVLinks between every
pair, a tensor-parallel group of up to four GPUs reaches each peer over NVLink at full rate. The
fabric is what differs: four Omni-Path 100 Gb/s links per node (§3.4.1 and the training README:
"4 OmniPath links", "Inter-node connect: Omni-Path Architecture (OPA)", "NCCL-communications
network: a fully dedicated subnet"), two GPUs per link, against eight 200 Gb/s HDR NICs on a DGX
A100. Not modelled: the "enhanced 8D hypercube" global topology (§3.4.1) is taken as
non-blocking between the 48 nodes of the run; the profile format has no Omni-Path kind, so the
fabric is labelled with the nearest, `ib-hdr` (a label: the cost model reads the NIC count,
bandwidth, latency and wiring, not the kind). Run it again whenever dgx-a100-80gb.json changes:

    python3 scripts/derive-jean-zay.py
"""
from derived_profile import quoted, start, write

base, d = start("dgx-a100-80gb", "a100-jean-zay-opa")
d["description"] = (
    "IDRIS Jean Zay's A100 partition, where BLOOM-176B was trained (BigScience 2022 §3.4.1): nodes of "
    "8x A100-SXM4-80GB on NVLink, 4x Omni-Path 100 Gb/s per node (two GPUs per link; the 8D hypercube "
    "taken as non-blocking; 'ib-hdr' is only the format's nearest fabric label); GPU, kernel model and "
    "NVLink are dgx-a100-80gb's (scripts/derive-jean-zay.py)"
)
intra = dict(base["intra_node"])
intra["bytes_per_s_per_direction"] = quoted(
    intra["bytes_per_s_per_direction"],
    "Jean Zay's A100 nodes join their 8 A100-SXM4-80GB with NVLink (BigScience 2022, arXiv 2211.05100, "
    "§3.4.1: '4 NVLink GPU-to-GPU interconnects per node'; bigscience train/tr11-176B-ml/README.md: "
    "'8 GPUs per node Using NVLink 4 inter-gpu connects'); the figure is dgx-a100-80gb's",
)
d["intra_node"] = intra
d["inter_node"] = {
    "kind": "ib-hdr",
    "nics_per_node": 4,
    "bytes_per_s_per_nic": {
        "value": 12.0e9,
        "source": (
            "Omni-Path 100 Gb/s, four links per node (BigScience 2022, arXiv 2211.05100, §3.4.1: '4 Omni-Path "
            "100 Gbps links per node, arranged in an enhanced 8D hypercube global topology, for inter-node "
            "communications'; bigscience train/tr11-176B-ml/README.md: '4 OmniPath links', 'Inter-node "
            "connect: Omni-Path Architecture (OPA)'): 12.5 GB/s line rate per link, 12.0 GB/s effective taken "
            "at the same fraction of line rate as dgx-a100-80gb's HDR figure (24 of 25 GB/s). Assumption: no "
            "NCCL measurement over Omni-Path was found. The kind 'ib-hdr' is the profile format's nearest "
            "label (it has no Omni-Path kind); the cost model does not read it."
        ),
    },
    "latency_s": {
        "value": base["inter_node"]["latency_s"]["value"],
        "source": (
            "dgx-a100-80gb's: " + base["inter_node"]["latency_s"]["source"]
            + " NCCL's network latency model does not distinguish Omni-Path from InfiniBand; assumption."
        ),
    },
    "wiring": "node",
}
write(d)
