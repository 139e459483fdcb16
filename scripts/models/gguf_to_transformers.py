"""A GGUF as a transformers checkpoint: transformers' own GGUF loader dequantizes it
(`from_pretrained(gguf_file=...)`), and the model, its config and its tokenizer are written as
a Hugging Face folder with bf16 safetensors. transformers refuses `save_pretrained` on a model
it loaded from a GGUF, so the state dict is written with safetensors directly (the tied output
head left out, as transformers writes it).

usage: gguf_to_transformers.py FILE.gguf OUT_DIR   (run with the transformers venv's python,
gguf-py importable)"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

src, out = sys.argv[1], sys.argv[2]
folder, name = os.path.dirname(os.path.abspath(src)), os.path.basename(src)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
tied = model.config.tie_word_embeddings
state = {
    k: v.contiguous()
    for k, v in model.state_dict().items()
    if not (tied and k == "lm_head.weight")
}
os.makedirs(out, exist_ok=True)
save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
config = model.config.to_dict()
config.pop("quantization_config", None)
config["architectures"] = [type(model).__name__]
config["_name_or_path"] = name
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)
print(f"{out}: {type(model).__name__}, {len(state)} tensors", file=sys.stderr)
