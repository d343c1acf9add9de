"""The model zoo, chosen by rule from the libraries' own registries (no download, no hand-picked list).

- transformers: every architecture of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES and
  MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES whose config builds small: the same size overrides for all of them
  (hidden 256, 2 layers, 4 heads, 2 key/value heads, intermediate 512, vocab 8000, 4 experts), passed to the
  config's constructor under the architecture's own names (its attribute_map). Those whose config or model does
  not build that way are listed with the reason, not silently dropped.
- timm: one model per timm module (model family), the first of the module's names in sorted order that has a
  pretrained config with a 224x224 (or smaller) input.
- torchvision: one classification model per builder module, the first name in sorted order.
- RNNs: LSTM, GRU and Elman RNN language models (torch.nn's three recurrent layers), 2 layers.
Cases: "fp32" (forward+backward in fp32, no optimizer) and "bf16_adamw" (bf16 autocast, AdamW, cross-entropy).
LM inputs: batch 4, sequence 256, labels the inputs (the loss shifts nothing: cross-entropy over all tokens).
Vision inputs: batch 8 at the model's input size, 1000 classes (HF image models: their config's image size).
"""
import inspect
import sys

LM_BATCH, LM_SEQ, VOCAB = 4, 256, 8000
VISION_BATCH = 8
SMALL = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 512, "vocab_size": VOCAB, "max_position_embeddings": 512, "num_local_experts": 4,
         "num_experts": 4, "num_experts_per_tok": 2, "head_dim": 64, "moe_intermediate_size": 256,
         "shared_expert_intermediate_size": 256, "ffn_hidden_size": 512, "n_routed_experts": 4,
         "num_experts_per_token": 2, "decoder_sparse_step": 1, "first_k_dense_replace": 0}
SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
                  "mask_token_id", "unk_token_id", "decoder_start_token_id")
CASES = ("fp32", "bf16_adamw")


def _hf_entries():
    from transformers.models.auto import modeling_auto as ma

    out = []
    for task, mapping in (("causal_lm", ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
                          ("masked_lm", ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES),
                          ("image_classification", ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)):
        for model_type in sorted(mapping):
            cls = mapping[model_type]
            if isinstance(cls, (tuple, list)):
                cls = cls[0]
            out.append({"id": f"hf/{task}/{model_type}", "source": "transformers", "task": task,
                        "model_type": model_type, "class": cls})
    return out


def _timm_entries():
    import timm

    out = []
    for module in sorted(timm.list_modules()):
        for name in sorted(timm.list_models(module=module)):
            try:
                cfg = timm.models.get_pretrained_cfg(name)
            except Exception:  # noqa: BLE001 - a name without a config is skipped by the rule
                cfg = None
            size = getattr(cfg, "input_size", None) if cfg is not None else None
            if size and len(size) == 3 and max(size[1:]) <= 224:
                out.append({"id": f"timm/{name}", "source": "timm", "task": "image_classification", "name": name,
                            "input_size": list(size)})
                break
    return out


def _torchvision_entries():
    import torchvision

    out, seen = [], set()
    for name in sorted(torchvision.models.list_models(module=torchvision.models)):
        fn = torchvision.models.get_model_builder(name)
        module = fn.__module__
        if module in seen:
            continue
        seen.add(module)
        size = 299 if "inception" in module else 224
        out.append({"id": f"torchvision/{name}", "source": "torchvision", "task": "image_classification",
                    "name": name, "input_size": [3, size, size]})
    return out


def _rnn_entries():
    return [{"id": f"rnn/{kind.lower()}_lm", "source": "torch.nn", "task": "causal_lm", "name": kind}
            for kind in ("LSTM", "GRU", "RNN")]


def list_zoo():
    """Every zoo entry (a dict with at least id, source, task), from the registries; nothing is built."""
    return _hf_entries() + _timm_entries() + _torchvision_entries() + _rnn_entries()


MAX_PARAMS = 300_000_000


def _small_kwargs(cfg_cls):
    amap = getattr(cfg_cls, "attribute_map", {}) or {}
    params = inspect.signature(cfg_cls.__init__).parameters
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    kw = {}
    for name, value in SMALL.items():
        target = amap.get(name, name)
        if target in params or (takes_kwargs and name in amap):
            kw[target] = value
        elif name in params:
            kw[name] = value
    return kw


def _small_config(entry):
    import transformers

    cfg_cls = transformers.CONFIG_MAPPING[entry["model_type"]]
    probe = cfg_cls()
    kw = _small_kwargs(cfg_cls)
    # composite configs (a text and a vision config inside): each sub-config made small the same way
    for key, sub in vars(probe).items():
        if isinstance(sub, transformers.PretrainedConfig):
            kw[key] = type(sub)(**_small_kwargs(type(sub))).to_dict()
    cfg = cfg_cls(**kw)
    for tok in SPECIAL_TOKENS:
        v = getattr(cfg, tok, None)
        if isinstance(v, int) and v >= VOCAB:
            setattr(cfg, tok, 1)
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    return cfg


def _fallback_config(entry):
    """The second rule, for a config that refuses the small overrides: its defaults with 2 layers."""
    import transformers

    cfg_cls = transformers.CONFIG_MAPPING[entry["model_type"]]
    amap = getattr(cfg_cls, "attribute_map", {}) or {}
    params = inspect.signature(cfg_cls.__init__).parameters
    key = amap.get("num_hidden_layers", "num_hidden_layers")
    cfg = cfg_cls(**({key: 2} if key in params or "num_hidden_layers" in amap else {}))
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    return cfg


def _small_config_consistent(entry):
    """The small config made consistent where the model's code needs it: as many key/value heads as attention
    heads (multi-head latent attention builds its keys per query head, and transformers' SDPA path would repeat
    them again), and one expert group for routers that pick groups of experts first (the default group count
    does not divide the small config's experts)."""
    cfg = _small_config(entry)
    changed = False
    heads, kv = getattr(cfg, "num_attention_heads", None), getattr(cfg, "num_key_value_heads", None)
    if isinstance(heads, int) and isinstance(kv, int) and heads != kv:
        cfg.num_key_value_heads = heads
        changed = True
    for key in ("n_group", "topk_group"):
        if isinstance(getattr(cfg, key, None), int) and getattr(cfg, key) > 1:
            setattr(cfg, key, 1)
            changed = True
    if not changed:
        raise ValueError("nothing to make consistent")
    return cfg


def _runs(model, entry, cfg):
    """Whether `model` runs one small forward at `cfg` (no grad, eval mode, the random state left as it was): a
    config the model's own code cannot run is not the zoo's."""
    import torch

    was = model.training
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            model.eval()
            if entry["task"] == "image_classification":
                size = getattr(cfg, "image_size", 224)
                size = size if isinstance(size, int) else size[0]
                model(torch.randn(1, getattr(cfg, "num_channels", 3), size, size))
            else:
                model(torch.randint(2, 16, (1, 8)))
        return True
    except Exception:  # noqa: BLE001 - any failure of the model's own forward
        return False
    finally:
        model.train(was)


def _hf_model(entry):
    """The model at the first config rule that builds (size-checked) and runs a small forward: the small config,
    the small config made consistent (_small_config_consistent), the fallback config. When none runs, the first
    that built (its capture then reports the model's own error)."""
    import transformers

    cls = getattr(transformers, entry["class"])
    errors, built = [], None
    for make_cfg in (_small_config, _small_config_consistent, _fallback_config):
        try:
            cfg = make_cfg(entry)
            if entry["task"] == "image_classification":
                cfg.num_labels = 1000
            _check_size(lambda: cls(cfg))
            model = cls(cfg)
        except Exception as e:  # noqa: BLE001 - the next rule is tried, and the first error reported
            errors.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            continue
        if _runs(model, entry, cfg):
            return model, cfg
        built = built or (model, cfg)
    if built is not None:
        return built
    raise ValueError(errors[0])


class LanguageModelRNN:
    """Embedding, a 2-layer recurrent layer of torch.nn, a linear head over the vocabulary."""

    @staticmethod
    def build(kind):
        import torch

        class RnnLM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(VOCAB, 256)
                self.rnn = getattr(torch.nn, kind)(256, 512, num_layers=2, batch_first=True)
                self.head = torch.nn.Linear(512, VOCAB)

            def forward(self, x):
                return self.head(self.rnn(self.embed(x))[0])

        return RnnLM()


def _check_size(make):
    """Builds the model on the meta device first: a model that is not small at the small config is refused."""
    import torch

    with torch.device("meta"):
        m = make()
    n = sum(p.numel() for p in m.parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"{n / 1e6:.0f}M parameters at the small config (limit {MAX_PARAMS / 1e6:.0f}M)")


def build(entry):
    """(model, inputs, targets, loss_fn) for an entry, the model on the CPU in training mode."""
    import torch

    src = entry["source"]
    if src == "transformers":
        import transformers

        model, cfg = _hf_model(entry)
        task = entry["task"]
        if task == "image_classification":
            size = getattr(cfg, "image_size", 224)
            size = size if isinstance(size, int) else size[0]
            ch = getattr(cfg, "num_channels", 3)
            x = torch.randn(VISION_BATCH, ch, size, size)
            y = torch.randint(0, 1000, (VISION_BATCH,))
            return model.train(), (x,), (y,), _logits_ce
        vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else VOCAB
        x = torch.randint(2, min(vocab, VOCAB), (LM_BATCH, LM_SEQ))
        return model.train(), (x,), (x,), _logits_ce
    if src == "timm":
        import timm

        _check_size(lambda: timm.create_model(entry["name"], pretrained=False))
        model = timm.create_model(entry["name"], pretrained=False)
        c, h, w = entry["input_size"]
        return (model.train(), (torch.randn(VISION_BATCH, c, h, w),),
                (torch.randint(0, model.num_classes, (VISION_BATCH,)),), _logits_ce)
    if src == "torchvision":
        import torchvision

        kw = {"aux_logits": False, "init_weights": False} if "inception" in entry["name"] or "googlenet" in entry["name"] else {}
        model = torchvision.models.get_model(entry["name"], weights=None, **kw)
        c, h, w = entry["input_size"]
        return (model.train(), (torch.randn(VISION_BATCH, c, h, w),), (torch.randint(0, 1000, (VISION_BATCH,)),),
                _logits_ce)
    if src == "torch.nn":
        x = torch.randint(0, VOCAB, (LM_BATCH, LM_SEQ))
        return LanguageModelRNN.build(entry["name"]).train(), (x,), (x,), _logits_ce
    raise ValueError(f"unknown zoo source {src!r}")


def _logits_ce(out, y):
    import torch.nn.functional as F

    logits = out if hasattr(out, "shape") else (out.logits if hasattr(out, "logits") else out[0])
    if logits.dim() > 2:
        logits = logits.flatten(0, -2)
        y = y.flatten()
    return F.cross_entropy(logits, y)


def cuda_case(entry, case):
    """A zoo case set up on the GPU as bench/zoo_truth.py measures it (TF32 off, seed 0): the model moved to the
    device, its trained parameters, inputs, targets, loss, the case's optimizer (or None) and an autocast factory
    (or None)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model, inputs, targets, loss_fn = build(entry)
    model = model.cuda()
    trained = [p for p in model.parameters() if p.requires_grad]
    opt_fn, ac_dtype = case_args(case)
    opt = opt_fn(trained) if opt_fn else None
    autocast = (lambda: torch.autocast("cuda", dtype=ac_dtype)) if ac_dtype else None
    return model, trained, inputs, targets, loss_fn, opt, autocast


def case_args(case):
    """(optimizer factory or None, autocast dtype or None) of a case."""
    import torch

    if case == "fp32":
        return None, None
    if case == "bf16_adamw":
        return (lambda ps: torch.optim.AdamW(ps, lr=1e-4)), torch.bfloat16
    raise ValueError(case)


def main(script, run_one, doc):
    """The command line of a zoo runner: every entry (or --ids FILE's) in its own process, --jobs at a time;
    run_one(entry, cases) -> rows, written as JSON lines to --out. A crash, a hang past --timeout or an
    out-of-memory costs that entry alone, recorded as an error row."""
    import argparse
    import json
    import os
    import subprocess
    import time
    from concurrent.futures import ThreadPoolExecutor, as_completed

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="-")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ids", help="a file of entry ids, one a line")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--resume", action="store_true",
                    help="append to --out, skipping entries whose id it already holds (a cut-off run goes on)")
    a = ap.parse_args()
    cases = a.cases.split(",")
    if a.one:
        for r in run_one(json.loads(a.one), cases):
            print("RESULT " + json.dumps(r), flush=True)
        return
    entries = list_zoo()
    if a.ids:
        want = {line.strip() for line in open(a.ids) if line.strip()}
        entries = [e for e in entries if e["id"] in want]
    done = set()
    if a.resume and a.out != "-" and os.path.exists(a.out):
        done = {json.loads(line)["id"] for line in open(a.out) if line.strip()}
        entries = [e for e in entries if e["id"] not in done]

    def work(entry):
        try:
            p = subprocess.run([sys.executable, script, "--one", json.dumps(entry), "--cases", a.cases],
                               capture_output=True, text=True, timeout=a.timeout)
            rows = [json.loads(line[7:]) for line in p.stdout.splitlines() if line.startswith("RESULT ")]
            if not rows:
                tail = (p.stderr or "").strip().splitlines()[-1:] or ["no output"]
                rows = [{"id": entry["id"], "case": c, "ok": False,
                         "error": f"process exit {p.returncode}: {tail[0][:300]}"} for c in cases]
        except subprocess.TimeoutExpired:
            rows = [{"id": entry["id"], "case": c, "ok": False, "error": f"timeout {a.timeout}s"} for c in cases]
        return rows

    t0 = time.time()
    out = sys.stdout if a.out == "-" else open(a.out, "a" if a.resume else "w")
    with ThreadPoolExecutor(a.jobs) as ex:  # rows written as entries finish: a run cut off keeps what finished
        for fut in as_completed([ex.submit(work, e) for e in entries]):
            for r in fut.result():
                out.write(json.dumps(r) + "\n")
            out.flush()
    print(f"{len(entries)} entries in {time.time() - t0:.0f} s ({len(done)} already in {a.out})", file=sys.stderr)


if __name__ == "__main__":
    zoo = list_zoo()
    for e in zoo:
        print(e["id"])
    print(len(zoo), "entries", file=sys.stderr)
