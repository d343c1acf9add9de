# Prints the caching allocator's events (alloc/free, MiB) of F.cross_entropy forward+backward on LM-head logits, fp32 and
# bf16 autocast (what planner/pytorch/eager_model.cpp models for cross-entropy). GPU only: python3 bench/torch_ce_probe.py
import torch, torch.nn.functional as F
torch.backends.cuda.matmul.allow_tf32 = False
N, H, V = 2048, 768, 50257
for amp in (False, True):
    torch.manual_seed(0)
    h = torch.randn(N, H, device="cuda", requires_grad=True)
    W = torch.randn(V, H, device="cuda", requires_grad=True)
    t = torch.randint(0, V, (N,), device="cuda")
    for it in range(2):
        torch.cuda.synchronize()
        if it == 1:
            torch.cuda.memory._record_memory_history(max_entries=100000)
        base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(h @ W.t(), t)
        loss.backward()
        h.grad = None; W.grad = None
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = [e for tr in snap["device_traces"] for e in tr if e["action"] in ("alloc", "free_requested")]
    print(f"amp={amp} logits fp32 MiB={N*V*4/2**20:.1f} peak over base MiB={peak/2**20:.1f}")
    live = 0
    for e in ev:
        mib = e["size"] / 2**20
        live += mib if e["action"] == "alloc" else -mib
        if mib > 1:
            fr = [f["name"] for f in e.get("frames", [])[:12] if "torch" in f.get("filename", "") or "at::" in f["name"]][:3]
            print(f"  {e['action']:>14} {mib:8.1f}  live {live:8.1f}  {' | '.join(n[:60] for n in fr)}")
