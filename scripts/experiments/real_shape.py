#!/usr/bin/env python3
"""Random weights at a real model's exact shape, with its real tokenizer files: what the
fingerprint's cost is measured on (docs/checkpoint-at-scale.md; Qwen2.5-0.5B, Llama-3.2-1B
and Llama-3.2-3B, the shapes of tests/corpus/configs and the hub configs). Not
committed (GBs); regenerate:

  ~/.cache/chatgate/venv-transformers-serve/bin/python scripts/experiments/real_shape.py \
      --shape qwen2.5-0.5b --seed 0 --out /tmp/qwen-shape

Needs torch and safetensors (the transformers serve venv has both). The same seed gives the
same bytes; another seed is "another checkpoint of the same shape". Weights are bf16, as the
real checkpoints ship, drawn N(0, 0.02) (norms 1).
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "tests", "corpus", "models")

# The real configs' shape fields (hub config.json of each model).
SHAPES = {
    "qwen2.5-0.5b": dict(
        files="Qwen2.5-0.5B-Instruct",
        config=dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896,
                    intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                    num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                    bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16"),
        bias=True,
    ),
    "llama-3.2-1b": dict(
        files="Llama-3.2-3B-Instruct",  # the 1B and 3B share tokenizer and template files
        config=dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                    intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=64, vocab_size=128256,
                    max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                    tie_word_embeddings=True, bos_token_id=128000,
                    eos_token_id=[128001, 128008, 128009], torch_dtype="bfloat16"),
        bias=False,
    ),
    "llama-3.2-3b": dict(
        files="Llama-3.2-3B-Instruct",
        config=dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=3072,
                    intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                    num_key_value_heads=8, head_dim=128, vocab_size=128256,
                    max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                    tie_word_embeddings=True, bos_token_id=128000,
                    eos_token_id=[128001, 128008, 128009], torch_dtype="bfloat16"),
        bias=False,
    ),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    spec = SHAPES[a.shape]
    c = spec["config"]
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(os.path.join(CORPUS, spec["files"])):
        if f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(CORPUS, spec["files"], f), a.out)
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(c, fh, indent=2)
    g = torch.Generator().manual_seed(a.seed)
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    t = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": torch.ones(h, dtype=torch.bfloat16)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.q_proj.weight"] = w(q, h)
        t[f"{p}.self_attn.k_proj.weight"] = w(kv, h)
        t[f"{p}.self_attn.v_proj.weight"] = w(kv, h)
        t[f"{p}.self_attn.o_proj.weight"] = w(h, q)
        if spec["bias"]:
            t[f"{p}.self_attn.q_proj.bias"] = w(q)
            t[f"{p}.self_attn.k_proj.bias"] = w(kv)
            t[f"{p}.self_attn.v_proj.bias"] = w(kv)
        t[f"{p}.mlp.gate_proj.weight"] = w(inter, h)
        t[f"{p}.mlp.up_proj.weight"] = w(inter, h)
        t[f"{p}.mlp.down_proj.weight"] = w(h, inter)
        t[f"{p}.input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        t[f"{p}.post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    save_file(t, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    n = sum(x.numel() for x in t.values())
    print(f"{a.out}: {a.shape}, seed {a.seed}, {n} parameters")


if __name__ == "__main__":
    main()
