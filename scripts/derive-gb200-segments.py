#!/usr/bin/env python3
"""Writes hardware-profiles/gb200-nvl72-seg64.json: GB200 NVL72 racks used as NVLink segments of
16 compute trays (64 GPUs), derived from gb200-nvl72.json.

A GB200 NVL72 rack holds 18 compute trays of 4 GPUs in one NVLink domain. NVIDIA's own launcher
for its GB200 benchmarks places a job in segments of whole trays inside one domain: llmb-run sets
SBATCH_SEGMENT_SIZE to the greatest divisor of the job's node count that fits the 18-tray
domain, which is 16 trays for any power-of-two count (NVIDIA/dgxc-benchmarking, tag v26.02,
cli/llmb-run/src/llmb_run/job_launcher.py, _compute_segment_size; CHANGELOG 1.10.2). A
power-of-two layout therefore sees NVLink domains of 64 GPUs, and its tensor-, context- and
data-parallel groups of up to 64 consecutive ranks never straddle two racks, as they do when
ranks fill racks of 72 in order (gb200-nvl72 with --nodes N). Everything but the GPUs and NICs
per node is gb200-nvl72's. Run it again whenever gb200-nvl72.json changes:

    python3 scripts/derive-gb200-segments.py
"""
from derived_profile import start, write

base, d = start("gb200-nvl72", "gb200-nvl72-seg64")
d["description"] = (
    "GB200 NVL72 racks used as NVLink segments of 16 compute trays, 64 GPUs, as NVIDIA's llmb-run "
    "places power-of-two GB200 jobs (SBATCH_SEGMENT_SIZE 16; dgxc-benchmarking v26.02): one node here "
    "is one segment, --nodes N joins N segments over one 400 Gb/s NIC per GPU; everything else is "
    "gb200-nvl72's (scripts/derive-gb200-segments.py)"
)
d["gpus_per_node"] = 64
inter = dict(base["inter_node"])
inter["nics_per_node"] = 64
d["inter_node"] = inter
write(d)
