#!/usr/bin/env python3
"""Writes hardware-profiles/grand-teton-h100-roce.json: Meta's Llama 3 405B training cluster
(Grattafiori et al. 2024, "The Llama 3 Herd of Models", §3.3.1), derived from dgx-h100.json.

The GPU, kernel model, NVLink and reserved memory are dgx-h100's (Grand Teton joins 8
H100-SXM5-80GB of 700 W through NVLink/NVSwitch like an HGX H100); the fabric is the paper's:
one 400 Gb/s RoCE NIC per GPU, a top-of-rack switch per rack of two servers (node wiring),
non-blocking within a 3,072-GPU pod. The 1:7 oversubscribed aggregation layer between pods is
not modelled: the tool's two-tier spine would put it between every two servers' racks, and
Llama 3 places its model-parallel groups inside a pod (§3.3.1, topology-aware scheduling).
Run it again whenever dgx-h100.json changes (scripts/derive-dgx-h100.py):

    python3 scripts/derive-grand-teton.py
"""
from derived_profile import quoted, start, write

base, d = start("dgx-h100", "grand-teton-h100-roce")
d["description"] = (
    "Meta's Llama 3 405B training cluster (Grattafiori et al. 2024 §3.3.1): Grand Teton servers of "
    "8x H100-SXM5-80GB (700 W) on NVLink/NVSwitch, one 400 Gb/s RoCE NIC per GPU, a ToR switch per "
    "rack of two servers; non-blocking within a 3,072-GPU pod (the 1:7 aggregation layer between pods "
    "is not modelled); GPU, kernel model and NVLink are dgx-h100's (scripts/derive-grand-teton.py)"
)
# The clock spread is a property of the GPU and its power limit as the DGX Cloud fleet ran them;
# Meta's own fleet's is not published: taken as dgx-h100's, and said so.
gemm = dict(base["kernels"]["gemm"])
if "fleet_clock_spread" in gemm:
    gemm["fleet_clock_spread"] = quoted(
        gemm["fleet_clock_spread"],
        "dgx-h100's (the same H100-SXM5-80GB at 700 W; the spread of Meta's own fleet is not "
        "published, and the Llama 3 paper's 1-2% diurnal throughput swing with temperature, §3.3.4, "
        "shows its GPUs ran at their power and thermal limits too)",
    )
    d["kernels"] = dict(base["kernels"], gemm=gemm)
intra = dict(base["intra_node"])
intra["bytes_per_s_per_direction"] = quoted(
    intra["bytes_per_s_per_direction"],
    "Grand Teton joins its 8 H100-SXM5 with NVLink through NVSwitch like a DGX/HGX H100 "
    "(Grattafiori et al. 2024 §3.3.1: 'Within a server, the eight GPUs are connected via NVLink'); "
    "the figure is dgx-h100's",
)
d["intra_node"] = intra
d["inter_node"] = {
    "kind": "roce",
    "nics_per_node": 8,
    "bytes_per_s_per_nic": {
        "value": 47.5e9,
        "source": (
            "400 Gb/s RoCE per GPU (Grattafiori et al. 2024, 'The Llama 3 Herd of Models', §3.3.1: "
            "'Both RoCE and Infiniband clusters leverage 400 Gbps interconnects between GPUs'); 47.5 GB/s "
            "effective per NIC from S60 (NVIDIA/nccl issue #1368: 8xH100 with 4x400 Gb/s RoCE, ring "
            "all-reduce bus bandwidth 190 GB/s = 4 x 47.5) (../shared/research/hardware.md §5), the same "
            "as NDR InfiniBand's 46-49 GB/s (S49, S50). Meta's E-ECMP load balancing over 16 flows per GPU "
            "pair (§3.3.1) is taken to reach it."
        ),
    },
    "latency_s": {
        "value": 1.4e-05,
        "source": (
            "S13 NCCL tuning.cc hwLat NET Ring Simple 14.0 us per step (../shared/research/hardware.md "
            "§5, §7.3): NCCL's network latency model does not distinguish RoCE from InfiniBand; assumption."
        ),
    },
    "wiring": "node",
}
write(d)
