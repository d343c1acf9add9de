"""The transformer model set shared by bench/export_transformers.py and bench/torch_transformer_peaks.py:
each model is built from a config object with random initialisation (no weights are ever downloaded) and
wrapped so that forward(x) takes one tensor (int64 token ids, or float32 images) and returns one
logits-like tensor.
"""
import dataclasses
from typing import Callable

import torch
from torch import nn

TEXT, VISION = "text", "vision"
ATTN_MODES = ("eager", "sdpa")


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    family: str  # TEXT: input (batch, seq) int64 ids; VISION: input (batch, 3, size, size) float32
    description: str
    build: Callable[..., nn.Module]  # build(attn, image_size) -> module with forward(x) -> logits
    vocab_size: int = 0  # TEXT only: ids are drawn from [0, vocab_size)
    max_seq: int = 0  # TEXT only: the longest sequence the position embeddings allow (0: no limit)


class TextLogits(nn.Module):
    """Calls a transformers model on input_ids with an all-ones attention mask (unpadded batches, as a
    tokenizer returns them; without a mask, transformers 5 traces a packed-sequence check through aten::diff,
    which the TorchScript exporter lacks) and no KV cache; returns the logits, or the last hidden state of an
    encoder without a head."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        kwargs = {"return_dict": True}
        if "use_cache" in self.model.config.to_dict():
            kwargs["use_cache"] = False
        mask = torch.ones_like(input_ids)
        out = self.model(input_ids=input_ids, attention_mask=mask, **kwargs)
        return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


class VisionLogits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images):
        return self.model(images)


def _hf(model_cls_name, config_cls_name, attn, **config):
    import transformers

    config = getattr(transformers, config_cls_name)(**config)
    try:
        config._attn_implementation = attn
    except AttributeError:  # transformers before 4.40: a read-only property, set by _from_config below
        pass
    model_cls = getattr(transformers, model_cls_name)
    if hasattr(model_cls, "_from_config"):
        try:
            model = model_cls._from_config(config, attn_implementation=attn)
        except TypeError:  # older transformers without the keyword
            model = model_cls._from_config(config)
    else:
        model = model_cls(config)
    got = getattr(model.config, "_attn_implementation", attn)
    if got != attn:
        raise RuntimeError(f"{model_cls_name}: asked for attn_implementation={attn}, transformers chose {got}")
    return TextLogits(model)


def _timm(arch, attn, image_size, **kwargs):
    import timm

    model = timm.create_model(arch, pretrained=False, img_size=image_size, **kwargs)
    found = 0
    for m in model.modules():
        if hasattr(m, "fused_attn"):
            m.fused_attn = attn == "sdpa"  # timm: fused_attn=True calls F.scaled_dot_product_attention
            found += 1
    if not found:
        raise RuntimeError(f"timm {arch}: no attention module with a fused_attn attribute")
    return VisionLogits(model)


def bert_small(attn="eager", image_size=None):
    return _hf("BertForMaskedLM", "BertConfig", attn, vocab_size=30522, hidden_size=256, num_hidden_layers=4,
               num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512,
               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def gpt2_small(attn="eager", image_size=None):
    return _hf("GPT2LMHeadModel", "GPT2Config", attn, vocab_size=50257, n_positions=1024, n_embd=256, n_layer=4,
               n_head=4, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)


def llama_gqa(attn="eager", image_size=None):
    return _hf("LlamaForCausalLM", "LlamaConfig", attn, vocab_size=32000, hidden_size=256, intermediate_size=688,
               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
               attention_dropout=0.1, tie_word_embeddings=False)


def qwen2_gqa(attn="eager", image_size=None):
    return _hf("Qwen2ForCausalLM", "Qwen2Config", attn, vocab_size=32000, hidden_size=256, intermediate_size=704,
               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
               attention_dropout=0.1, use_sliding_window=False, tie_word_embeddings=True)


def phi_small(attn="eager", image_size=None):
    return _hf("PhiForCausalLM", "PhiConfig", attn, vocab_size=32000, hidden_size=256, intermediate_size=1024,
               num_hidden_layers=4, num_attention_heads=4, partial_rotary_factor=0.5, max_position_embeddings=2048,
               resid_pdrop=0.1, embd_pdrop=0.1, attention_dropout=0.1)


def t5_encoder(attn="eager", image_size=None):
    return _hf("T5EncoderModel", "T5Config", attn, vocab_size=32128, d_model=256, d_kv=64, d_ff=1024, num_layers=4,
               num_heads=4, feed_forward_proj="gated-gelu", dropout_rate=0.1)


def deit_tiny(attn="eager", image_size=224):
    return _timm("deit_tiny_patch16_224", attn, image_size, drop_rate=0.1, drop_path_rate=0.1)


def swin_tiny(attn="eager", image_size=224):
    return _timm("swin_tiny_patch4_window7_224", attn, image_size, drop_rate=0.1, drop_path_rate=0.2)


# Held out: exported and measured only after the fusion work was done, never used to develop it (not in
# samples/transformers): how memplan does on transformers it has not seen.
def roberta_small(attn="eager", image_size=None):
    return _hf("RobertaForMaskedLM", "RobertaConfig", attn, vocab_size=50265, hidden_size=384, num_hidden_layers=4,
               num_attention_heads=6, intermediate_size=1536, max_position_embeddings=514,
               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def mistral_gqa(attn="eager", image_size=None):
    return _hf("MistralForCausalLM", "MistralConfig", attn, vocab_size=32000, hidden_size=256, intermediate_size=896,
               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
               attention_dropout=0.1, sliding_window=None, tie_word_embeddings=False)


def vit_small(attn="eager", image_size=224):
    return _timm("vit_small_patch16_224", attn, image_size, drop_rate=0.1, drop_path_rate=0.1)


# Held out in session 11 (families not developed against): an encoder with a shared-QKV-free DistilBERT block, a
# GPT-NeoX (Pythia) decoder with parallel residual and partial rotary, a BART encoder-decoder (cross-attention and a
# causal decoder), and a BEiT vision encoder (learned relative position bias per block, layer scale).
def distilbert_small(attn="eager", image_size=None):
    return _hf("DistilBertForMaskedLM", "DistilBertConfig", attn, vocab_size=30522, dim=384, n_layers=4, n_heads=6,
               hidden_dim=1536, max_position_embeddings=512, dropout=0.1, attention_dropout=0.1)


def gpt_neox_small(attn="eager", image_size=None):
    return _hf("GPTNeoXForCausalLM", "GPTNeoXConfig", attn, vocab_size=32000, hidden_size=256, num_hidden_layers=4,
               num_attention_heads=4, intermediate_size=1024, rotary_pct=0.25, max_position_embeddings=2048,
               use_parallel_residual=True, attention_dropout=0.1, hidden_dropout=0.1, tie_word_embeddings=False)


def bart_small(attn="eager", image_size=None):
    return _hf("BartForConditionalGeneration", "BartConfig", attn, vocab_size=32000, d_model=256, encoder_layers=3,
               decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
               decoder_ffn_dim=1024, max_position_embeddings=1024, dropout=0.1, attention_dropout=0.1)


def beit_small(attn="eager", image_size=224):
    return _timm("beit_base_patch16_224", attn, image_size, embed_dim=384, depth=8, num_heads=6, drop_rate=0.1,
                 drop_path_rate=0.1)


MODELS = {s.name: s for s in [
    Spec("bert_small", TEXT, "BERT encoder + MLM head: 4 layers, d256, 4 heads, ff1024, post-LayerNorm, GELU",
         bert_small, vocab_size=30522, max_seq=512),
    Spec("gpt2_small", TEXT, "GPT-2 causal decoder + LM head: 4 layers, d256, 4 heads, pre-LayerNorm, gelu_new",
         gpt2_small, vocab_size=50257, max_seq=1024),
    Spec("llama_gqa", TEXT, "Llama decoder: 4 layers, d256, 8 query / 2 KV heads (GQA), RMSNorm, RoPE, SwiGLU",
         llama_gqa, vocab_size=32000, max_seq=2048),
    Spec("qwen2_gqa", TEXT, "Qwen2 decoder: 4 layers, d256, 8 query / 2 KV heads, QKV bias, RMSNorm, SwiGLU, tied head",
         qwen2_gqa, vocab_size=32000, max_seq=2048),
    Spec("phi_small", TEXT, "Phi decoder: 4 layers, d256, 4 heads, partial RoPE, parallel attention+MLP, LayerNorm",
         phi_small, vocab_size=32000, max_seq=2048),
    Spec("t5_encoder", TEXT, "T5 v1.1 encoder: 4 layers, d256, 4 heads, relative position bias, RMSNorm, gated GELU",
         t5_encoder, vocab_size=32128, max_seq=0),
    Spec("deit_tiny", VISION, "timm deit_tiny_patch16_224: 12 layers, d192, 3 heads, drop_path 0.1, 1000 classes",
         deit_tiny),
    Spec("swin_tiny", VISION, "timm swin_tiny_patch4_window7_224: depths 2-2-6-2, d96, window 7, drop_path 0.2",
         swin_tiny),
    Spec("roberta_small", TEXT, "held out: RoBERTa encoder + MLM head: 4 layers, d384, 6 heads, ff1536",
         roberta_small, vocab_size=50265, max_seq=512),
    Spec("mistral_gqa", TEXT, "held out: Mistral decoder: 4 layers, d256, 8 query / 4 KV heads, RMSNorm, SwiGLU",
         mistral_gqa, vocab_size=32000, max_seq=2048),
    Spec("vit_small", VISION, "held out: timm vit_small_patch16_224: 12 layers, d384, 6 heads, drop_path 0.1",
         vit_small),
    Spec("distilbert_small", TEXT, "held out (s11): DistilBERT MLM: 4 layers, d384, 6 heads, ff1536",
         distilbert_small, vocab_size=30522, max_seq=512),
    Spec("gpt_neox_small", TEXT, "held out (s11): GPT-NeoX decoder: 4 layers, d256, parallel residual, rotary 25%",
         gpt_neox_small, vocab_size=32000, max_seq=2048),
    Spec("bart_small", TEXT, "held out (s11): BART encoder-decoder: 3+3 layers, d256, cross-attention",
         bart_small, vocab_size=32000, max_seq=1024),
    Spec("beit_small", VISION, "held out (s11): timm BEiT: 8 layers, d384, 6 heads, relative position bias",
         beit_small),
]}


def build(name, attn="eager", image_size=224, seed=0):
    """The model `name`, randomly initialised from `seed`, in training mode."""
    if attn not in ATTN_MODES:
        raise ValueError(f"attention mode {attn!r}: expected one of {ATTN_MODES}")
    torch.manual_seed(seed)
    model = MODELS[name].build(attn=attn, image_size=image_size)
    return model.train()


def make_input(spec, batch, seq=None, image_size=224, device="cpu", seed=0):
    """A random batch for `spec`: (batch, seq) int64 ids, or (batch, 3, image_size, image_size) float32."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    if spec.family == TEXT:
        if spec.max_seq and seq > spec.max_seq:
            raise ValueError(f"{spec.name}: seq {seq} is over its {spec.max_seq} positions")
        return torch.randint(0, spec.vocab_size, (batch, seq), generator=g, dtype=torch.int64).to(device)
    return torch.randn(batch, 3, image_size, image_size, generator=g).to(device)


def select(only):
    """The specs named in a comma-separated list (all when empty), in MODELS order."""
    if not only:
        return list(MODELS.values())
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    return [MODELS[n] for n in MODELS if n in names]
