#!/usr/bin/env python3
"""Captures the allocation sequence of PyTorch training steps on the CPU (the profiler's allocation events) for
bench_torch_replay, which replays it through memplan's planned allocator on a host stand-in for the device.

The loop is bench/torch_allocator.py's: step; out = model(x); loss; opt.zero_grad(set_to_none=True); backward;
Adam step; del out, x, y. The CPU runs the same autograd graph as the GPU, so the sequence has the GPU run's
shape (gradients carried into the next step, freed by its zero_grad), not its exact kernels' workspaces.

usage: torch_alloc_capture.py --out CAPTURE.json [--model gpt2|resnet18|resnet50] [--layers 2] [--batch 2] [--seq 256]
                              [--image 224] [--steps 6]
(--layers and --seq apply to gpt2, --image to the torchvision CNNs, trained with cross-entropy on 1000 classes)
then:  build/bench_torch_replay CAPTURE.json 1 2
"""
import argparse
import json

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "resnet18", "resnet50"])
    ap.add_argument("--image", type=int, default=224)
    a = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.manual_seed(0)
    if a.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_positions=a.seq, n_layer=a.layers, attn_implementation="sdpa")
        model = GPT2LMHeadModel(cfg)

        def batch():
            return (torch.randint(0, cfg.vocab_size, (a.batch, a.seq)), torch.randint(0, cfg.vocab_size, (a.batch, a.seq)))

        def forward(x):
            return model(input_ids=x, use_cache=False).logits
        name = f"gpt2 layers={a.layers} batch={a.batch} seq={a.seq}"
    else:
        import torchvision
        model = getattr(torchvision.models, a.model)(num_classes=1000)
        model.train()

        def batch():
            return (torch.randn(a.batch, 3, a.image, a.image), torch.randint(0, 1000, (a.batch,)))

        def forward(x):
            return model(x)
        name = f"{a.model} batch={a.batch} image={a.image}"
    opt = torch.optim.Adam(model.parameters(), 1e-4)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for s in range(a.steps):
            with record_function(f"memplan_step_{s}"):
                x, y = batch()
                out = forward(x)
                loss = torch.nn.functional.cross_entropy(out.view(-1, out.shape[-1]), y.view(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del out, x, y, loss
    events, steps = [], []

    def walk(node):
        if str(node.tag).endswith("Allocation"):
            f = node.extra_fields
            events.append((node.start_time_ns, int(f.ptr), int(f.alloc_size)))
        if node.name.startswith("memplan_step_"):
            steps.append((node.start_time_ns, node.end_time_ns))
        for c in node.children:
            walk(c)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort()
    steps.sort()
    with open(a.out, "w") as f:
        json.dump({"model": name, "events": events, "steps": steps}, f)
    print(f"{len(events)} allocation events over {len(steps)} steps -> {a.out}")


if __name__ == "__main__":
    main()
