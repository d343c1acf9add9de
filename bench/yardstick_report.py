#!/usr/bin/env python3
"""Turns bench/pytorch_yardstick.py's JSON into the side-by-side tables kept in bench/results/."""
import json
import sys

MiB = 2**20


def main(path):
    r = json.load(open(path))
    tf32 = "TF32 allowed" if r.get("tf32") else "float32 without TF32, like memplan's CUDA backend"
    print(f"# PyTorch yardstick beside memplan, one run on {r['device']} (torch {r['torch']}, {tf32}), {r['date']}\n")
    bw = r["bandwidth"]
    print(f"pinned host->device {bw['host_to_device_bytes_per_s']/1e9:.1f} GB/s, device->host "
          f"{bw['device_to_host_bytes_per_s']/1e9:.1f} GB/s, device copy {bw['device_copy_bytes_per_s']/1e9:.0f} GB/s "
          f"(read+write), fp32 matmul {bw['fp32_flops']/1e12:.1f} TFLOP/s, tf32 {bw['tf32_flops']/1e12:.0f} TFLOP/s\n")
    print("## Inference at batch 32 (seq 128): activation memory beyond weights and input\n")
    print("| model | PyTorch peak over weights+input (MiB) | memplan arena (MiB) | memplan lower bound, no aliasing (MiB) | memplan / PyTorch |")
    print("|---|---:|---:|---:|---:|")
    for i in r["inference"]:
        m = r["memplan_inference"][i["model"]]
        pt = i["peak_over_weights_and_input_bytes"]
        print(f"| {i['model']} | {pt/MiB:.1f} | {m['arena_bytes']/MiB:.1f} | {m['lower_bound_bytes']/MiB:.1f} | {m['arena_bytes']/pt:.3f} |")
    print("\n## Training step (forward + backward, no optimizer), total device memory\n")
    print("| model | batch | PyTorch measured peak (MiB) | memplan eager prediction, PyTorch order (MiB) | error | memplan planned peak, none (MiB) | planned / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for t in r["training"]:
        if t["segments"]:
            continue
        m = r["memplan_training"][t["model"]]["none"]
        pred = m["eager_peak_bytes"]
        print(f"| {t['model']} | {t['batch']} | {t['peak_bytes']/MiB:.1f} | {pred/MiB:.1f} | {100*(pred-t['peak_bytes'])/t['peak_bytes']:+.1f}% "
              f"| {m['peak_bytes']/MiB:.1f} | {m['peak_bytes']/t['peak_bytes']:.3f} |")
    print("\n## At the memory PyTorch reaches with checkpoint_sequential in sqrt(N) segments\n")
    print("| model | segments | PyTorch peak (MiB) | PyTorch step s (plain -> checkpointed) | PyTorch real-time overhead | memplan strategy | memplan peak (MiB) | recompute FLOPs / step | recompute / one forward | estimated step overhead |")
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|")
    for t in r["training"]:
        if not t["segments"]:
            continue
        plain = next(x for x in r["training"] if x["model"] == t["model"] and not x["segments"])
        over = t["step_seconds_median"] / plain["step_seconds_median"] - 1
        e = r["memplan_training"][t["model"]]
        none = e["none"]
        for strat in ("optimal", "auto", "budget"):
            m = e.get(strat, {})
            if "error" in m:
                print(f"| {t['model']} | {t['segments']} | {t['peak_bytes']/MiB:.1f} | {plain['step_seconds_median']:.4f} -> {t['step_seconds_median']:.4f} | {100*over:.0f}% | {strat} | infeasible: {m['error'].split(':')[-1].strip()[:120]} | | | |")
                continue
            fwd = m.get("forward_flops") or 1
            est = m["estimated_step_seconds"] / none["estimated_step_seconds"] - 1
            print(f"| {t['model']} | {t['segments']} | {t['peak_bytes']/MiB:.1f} | {plain['step_seconds_median']:.4f} -> {t['step_seconds_median']:.4f} | {100*over:.0f}% "
                  f"| {strat} | {m['peak_bytes']/MiB:.1f} | {m['recompute_overhead']:.3f} | {m['recompute_flops']/fwd:.3f} | {100*est:.1f}% |")
    gpu = r.get("memplan_gpu")
    if not gpu:
        return
    print("\n## memplan's plans run on the same GPU (bench_cuda train, float32 without TF32, median of 10 steps)\n")
    print("| model | budget (MiB) | strategy | planned peak (MiB) | device memory measured (MiB) | step s | real-time overhead vs memplan none | PyTorch eager step s | PyTorch checkpoint overhead |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for t in r["training"]:
        if not t["segments"] or t["model"] not in gpu:
            continue
        plain = next(x for x in r["training"] if x["model"] == t["model"] and not x["segments"])
        over = t["step_seconds_median"] / plain["step_seconds_median"] - 1
        g = gpu[t["model"]]
        if "error" in g:
            print(f"| {t['model']} | | failed: {g['error'].splitlines()[-1][:160]} | | | | | | |")
            continue
        for strat, row in g["strategies"].items():
            print(f"| {t['model']} | {g['budget_bytes']/MiB:.1f} | {strat} | {row['planned_peak_bytes']/MiB:.1f} | "
                  f"{(row['peak_device_bytes'])/MiB:.1f} | {row['step_seconds']:.4f} | {100*row['step_overhead_vs_none']:+.1f}% | "
                  f"{plain['step_seconds_median']:.4f} | {100*over:+.0f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
