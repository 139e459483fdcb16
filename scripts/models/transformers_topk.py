"""Greedy continuations with their top-5 logprobs from transformers' own modeling code (what
`transformers serve` runs; it returns no logprobs), in float32, as JSON in the shape of an
OpenAI /v1/completions choice: [{"text", "prompt_tokens", "logprobs": {"tokens",
"top_logprobs"}}]. The prompt is tokenized as the tokenizer does by default (its BOS added).
Decoding goes on past the end-of-sequence token; the text leaves special tokens out, as a
server's does (each token's own text keeps them, as in a server's logprobs).

usage: transformers_topk.py MODEL_DIR '[["prompt", max_tokens], ...]'"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

model_dir, prompts = sys.argv[1], json.loads(sys.argv[2])
torch.set_num_threads(2)
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
out = []
for text, n in prompts:
    ids = tok(text, return_tensors="pt").input_ids
    prompt_tokens = int(ids.shape[1])
    tokens, tops, chosen = [], [], []
    with torch.no_grad():
        for _ in range(n):
            logp = torch.log_softmax(model(ids).logits[0, -1].float(), -1)
            top = torch.topk(logp, 5)
            nxt = int(top.indices[0])
            tokens.append(tok.decode([nxt]))
            tops.append({tok.decode([int(i)]): float(v) for v, i in zip(top.values, top.indices)})
            ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
            chosen.append(nxt)
    out.append({
        "text": tok.decode(chosen, skip_special_tokens=True),
        "prompt_tokens": prompt_tokens,
        "logprobs": {"tokens": tokens, "top_logprobs": tops},
    })
print(json.dumps(out))
