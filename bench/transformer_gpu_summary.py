#!/usr/bin/env python3
"""The table of bench/transformer_gpu.sh's run: memplan fused/unfused device peak and step time beside PyTorch's
max_allocated and step time (SDPA and eager attention), then FusedAttention vs SDPA and the fused chain.
Usage: bench/transformer_gpu_summary.py OUTDIR (prints the table; reads the files transformer_gpu.sh wrote)."""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1]
    mib = 1 << 20
    torch = load(os.path.join(out, "torch_peaks.json")) or {"models": {}}
    print("model       fused MiB     ms no-fuse MiB     ms PT sdpa MiB     ms PT eager ms  mem/PT  time/PT")
    for name, pt in torch["models"].items():
        row = {}
        for f in (1, 0):
            j = load(os.path.join(out, f"memplan_{name}_fuse{f}.json"))
            s = (j or {}).get("strategies", {}).get("none", {})
            row[f] = (s.get("peak_device_bytes", 0) / mib, s.get("step_seconds", 0) * 1e3) if s else (float("nan"),) * 2
        sd, ea = pt.get("sdpa", {}), pt.get("eager", {})
        pm, pt_ms = sd.get("max_allocated_bytes", 0) / mib, sd.get("step_ms", float("nan"))
        print(f"{name:<11} {row[1][0]:9.1f} {row[1][1]:6.2f} {row[0][0]:11.1f} {row[0][1]:6.2f} {pm:11.1f} {pt_ms:6.2f}"
              f" {ea.get('step_ms', float('nan')):11.2f} {row[1][0] / pm if pm else float('nan'):7.2f}"
              f" {row[1][1] / pt_ms if pt_ms else float('nan'):8.2f}")
    ours, theirs = load(os.path.join(out, "memplan_attention.json")), load(os.path.join(out, "torch_sdpa.json"))
    if ours and theirs:
        print("\nFusedAttention (bench_attention) vs torch SDPA (bench/torch_sdpa_bench.py), fp32:")
        for a, b in zip(ours["results"], theirs["results"]):
            print(f"  B={a['b']} H={a['h']} S={a['s']} D={a['d']} causal={a['causal']}: fwd {a['forward_ms']:.3f} vs "
                  f"{b['forward_ms']:.3f} ms; fwd+bwd {a['forward_backward_ms']:.3f} vs {b['forward_backward_ms']:.3f} ms")
    chain, tchain = load(os.path.join(out, "memplan_fused_chain.json")), load(os.path.join(out, "torch_fused_chain.json"))
    if chain and tchain:
        print("\n8-op elementwise chain, 256 MiB fp32, fraction of copy bandwidth:")
        for k in ("arithmetic_chain", "transcendental_chain"):
            m, t = chain.get(k, {}), tchain.get(k, {})
            print(f"  {k}: memplan fused {m.get('fused_bandwidth_fraction', float('nan')):.3f}; torch.compile "
                  f"{t.get('compiled_bandwidth_fraction', float('nan')):.3f}; torch eager {t.get('eager_bandwidth_fraction', float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
