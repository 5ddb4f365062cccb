//! The bundled models and hardware profiles load, validate and cite their sources.

use metp_sim::config::{list_names, load_hardware, load_model, DataKind};

#[test]
fn every_bundled_model_loads() {
    let names = list_names(DataKind::Model);
    for expected in [
        "korthikanti-22b",
        "gpt3-175b",
        "mt-nlg-530b",
        "korthikanti-1t",
        "gpt3-1.3b",
        "gpt3-2.7b",
        "gpt3-6.7b",
        "gpt3-13b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "missing model {expected}"
        );
    }
    for n in &names {
        let m = load_model(n).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert!(!m.source.trim().is_empty(), "{n} has no source");
    }
}

#[test]
fn every_bundled_profile_loads_and_cites_each_figure() {
    let names = list_names(DataKind::Hardware);
    for expected in [
        "dgx-a100-40gb",
        "dgx-a100-80gb",
        "a100-80gb-pcie",
        "dgx-h100",
        "hgx-h200",
        "mi300x-8",
        "mi325x-8",
        "b200-8",
        "gb200-nvl72",
        "a100-cluster-2to1",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "missing profile {expected}"
        );
    }
    for n in &names {
        let hw = load_hardware(n).unwrap_or_else(|e| panic!("{n}: {e}"));
        // 8-GPU nodes, one 72-GPU NVLink domain (GB200 NVL72) as a node, and its 64-GPU
        // segments (gb200-nvl72-seg64) as nodes.
        let want_gpus = match n.as_str() {
            "gb200-nvl72" => 72,
            "gb200-nvl72-seg64" => 64,
            _ => 8,
        };
        assert_eq!(hw.gpus_per_node, want_gpus, "{n}");
        let json = serde_json::to_value(&hw).unwrap();
        let mut figures = 0;
        check_sources(&json, n, &mut figures);
        // Every figure of the schema, each with its source: 4 GPU, 26 kernel model (host 3,
        // memory 2, GEMM 5, attention 2 × 8), 3 intra-node, 2 inter-node, 3 reserved, slowdown;
        // plus the optional FP8 peak and topology figures (a mesh's per-pair link, a spine's
        // oversubscription) and the kernel model's optional figures (power plateau, stream-K,
        // lone-block share, split-KV, per-head-dimension kernels) where the profile has them,
        // and the collective library's (protocols, NVLS, point-to-point rate).
        let want = 39
            + usize::from(hw.gpu.peak_fp8_flops_per_s.is_some())
            + usize::from(hw.intra_node.link_bytes_per_s_per_direction.is_some())
            + usize::from(hw.inter_node.spine.is_some())
            + (hw.kernels.figures().len() - 26)
            + hw.collective_library
                .as_ref()
                .map_or(0, |l| l.figures().len());
        assert!(
            figures == want,
            "{n}: {figures} figures, not the schema's {want}"
        );
        // Reserved bytes are explicit and below the device memory.
        assert!(hw.reserved_bytes() > 0 && hw.reserved_bytes() < hw.memory_bytes());
    }
}

/// Every object with a `value` has a non-empty `source`.
fn check_sources(v: &serde_json::Value, file: &str, figures: &mut usize) {
    if let Some(obj) = v.as_object() {
        if obj.contains_key("value") {
            *figures += 1;
            let src = obj.get("source").and_then(|s| s.as_str()).unwrap_or("");
            assert!(!src.trim().is_empty(), "{file}: figure without source: {v}");
        }
        for child in obj.values() {
            check_sources(child, file, figures);
        }
    }
    if let Some(list) = v.as_array() {
        for child in list {
            check_sources(child, file, figures);
        }
    }
}
