"""The rule: predict, from a model directory's files alone, the tokenizer.json that
transformers 5.23 `AutoTokenizer.from_pretrained(dir)` actually runs.

Pure Python + json; only `tokenizers` is needed to *use* the result.  Mirrors:
  transformers/models/auto/tokenization_auto.py  AutoTokenizer.from_pretrained L745-1010
  transformers/tokenization_utils_tokenizers.py  convert_to_native_format L104-198, __init__ L368-527
  transformers/tokenization_utils_base.py        _from_pretrained L1781-1972, _get_prepend_scheme L3750
  transformers/models/{llama,gemma,qwen2,gpt2}/tokenization_*.py  (class __init__ rebuilds)
"""
import copy
import json
import os

# tokenization_auto.py L390-432 (v5.23.0)
MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS = {
    "arctic", "chatlm", "ernie4_5", "ernie4_5_moe", "fuyu", "h2ovl_chat", "hyperclovax", "hyperclovax_vlm",
    "hyperclovax_vision_v2", "internlm2", "internlm3", "iquestcoder", "jamba", "llava", "llava_next", "minicpm3",
    "minicpmv", "minimax_m2", "modernbert", "modernbert-decoder", "molmo", "molmo2", "nemotron", "nvfp4", "opencua",
    "openvla", "paddleocr_vl", "phi3", "phi3_v", "phimoe", "qwen2", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text",
    "qwen4_exp", "step3_vl", "vipllava", "cohere_asr", "camembertv2-base", "siglip2", "smolvlm",
}

# transformers 5.23 TokenizersBackend subclasses with their own __init__: they rebuild the backend (L117)
REBUILDING_CLASSES = frozenset({
    'AlbertTokenizer', 'BartTokenizer', 'BarthezTokenizer', 'BertTokenizer', 'BigBirdTokenizer',
    'BlenderbotTokenizer', 'CLIPTokenizer', 'CamembertTokenizer', 'CodeLlamaTokenizer', 'CohereTokenizer',
    'DPRQuestionEncoderTokenizer', 'DebertaTokenizer', 'DebertaV2Tokenizer', 'EsmcTokenizer', 'FunnelTokenizer',
    'GPT2Tokenizer', 'GPTNeoXTokenizer', 'GemmaTokenizer', 'HerbertTokenizer', 'LEDTokenizer', 'LasrTokenizer',
    'LayoutLMv2Tokenizer', 'LayoutLMv3Tokenizer', 'LayoutXLMTokenizer', 'LlamaTokenizer', 'LukeTokenizer',
    'LxmertTokenizer', 'MBart50Tokenizer', 'MBartTokenizer', 'MPNetTokenizer', 'MarkupLMTokenizer',
    'MobileBertTokenizer', 'MvpTokenizer', 'NllbTokenizer', 'NougatTokenizer', 'OpenAIGPTTokenizer',
    'PegasusTokenizer', 'Qwen2Tokenizer', 'Qwen2TokenizerFast', 'Qwen3_5Tokenizer', 'ReformerTokenizer',
    'RemBertTokenizer', 'RoFormerTokenizer', 'RobertaTokenizer', 'SeamlessM4TTokenizer', 'Siglip2Tokenizer',
    'SplinterTokenizer', 'T5Tokenizer', 'UdopTokenizer', 'VideoPrismTokenizer', 'WhisperTokenizer',
    'XGLMTokenizer', 'XLMRobertaTokenizer', 'XLNetTokenizer',
})
# pure-Python (PythonBackend) tokenizers: tokenizer.json is not used at all
PYTHON_BACKEND_CLASSES = frozenset({
    'BertJapaneseTokenizer', 'BertweetTokenizer', 'BioGptTokenizer', 'BlenderbotSmallTokenizer',
    'ByT5Tokenizer', 'CTRLTokenizer', 'CanineTokenizer', 'ClvpTokenizer', 'CpmAntTokenizer', 'DiaTokenizer',
    'EsmTokenizer', 'FSMTTokenizer', 'FlaubertTokenizer', 'GPTNeoXJapaneseTokenizer', 'MgpstrTokenizer',
    'MyT5Tokenizer', 'PerceiverTokenizer', 'PhobertTokenizer', 'ProphetNetTokenizer', 'RagTokenizer',
    'RoCBertTokenizer', 'TapasTokenizer', 'VitsTokenizer', 'Wav2Vec2CTCTokenizer',
    'Wav2Vec2PhonemeCTCTokenizer', 'XLMTokenizer',
})
# subclasses without their own __init__ load tokenizer.json as-is (L117)
NO_INIT_CLASSES = frozenset(['FNetTokenizer', 'ParakeetTokenizer'])
# need sentencepiece (not TokenizersBackend subclasses)
SENTENCEPIECE_CLASSES = frozenset(['BartphoTokenizer', 'CpmTokenizer', 'PLBartTokenizer'])

# Classes whose rebuild this rule implements.
REBUILDERS = {}


def _load(path):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _strip_fast(name):
    return name[:-4] if name and name.endswith("Fast") else name


def resolve_class(model_dir, mapping=None):
    """Class AutoTokenizer picks. `mapping` = TOKENIZER_MAPPING_NAMES (model_type -> class name);
    pass transformers' own dict when available, else the small built-in subset below is used."""
    if mapping is None:
        mapping = {"mistral": "TokenizersBackend", "mixtral": "TokenizersBackend", "phi3": "TokenizersBackend",
                   "qwen2": "Qwen2Tokenizer", "gemma": "GemmaTokenizer", "gemma2": "GemmaTokenizer",
                   "gemma3": "GemmaTokenizer", "gpt2": "GPT2Tokenizer"}  # "llama": absent
    tc = _load(os.path.join(model_dir, "tokenizer_config.json")) or {}
    cfg = _load(os.path.join(model_dir, "config.json")) or {}
    model_type = cfg.get("model_type") or ""
    auto_map = tc.get("auto_map")
    if isinstance(auto_map, dict):
        auto_map = auto_map.get("AutoTokenizer")
    if auto_map is not None:
        return "REMOTE_CODE"
    hub = tc.get("tokenizer_class") or cfg.get("tokenizer_class")
    mapped = mapping.get(model_type)
    tj_path = os.path.join(model_dir, "tokenizer.json")
    # L844-860: declared LlamaTokenizer but tokenizer.json is byte-level -> as-is
    if (hub and _strip_fast(hub) == "LlamaTokenizer"
            and _strip_fast(mapped or "") != "MistralCommonBackend"
            and model_type not in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
            and os.path.isfile(tj_path) and '"ByteLevel"' in open(tj_path, encoding="utf-8").read()):
        return "TokenizersBackend"
    # L865-909: model_type's registered class disagrees with the declared class
    if hub and model_type and mapped and _strip_fast(mapped) != _strip_fast(hub):
        reg = _strip_fast(mapped)
        if reg not in ("TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast", "MistralCommonBackend"):
            name = reg if model_type in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS else _strip_fast(hub)
            if name not in ("TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast"):
                return name
        # (MistralCommonBackend only if mistral-common is installed AND tekken.json exists)
        return "TokenizersBackend"
    # L972-984: declared class in tokenizer_config.json
    if tc.get("tokenizer_class"):
        name = _strip_fast(tc["tokenizer_class"])
        if name in REBUILDING_CLASSES or name in SENTENCEPIECE_CLASSES or name in PYTHON_BACKEND_CLASSES:
            return name
        return "TokenizersBackend"  # PreTrainedTokenizer(Fast), PythonBackend, no-__init__ and unknown names
    if cfg.get("tokenizer_class"):
        return _strip_fast(cfg["tokenizer_class"])
    # L1004+: TOKENIZER_MAPPING by config type, default TokenizersBackend
    return _strip_fast(mapped) if mapped else "TokenizersBackend"


CLASS_DEFAULT_SPECIALS = {  # keyword defaults of each class __init__ (used when the key is absent)
    "LlamaTokenizer": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
    "GemmaTokenizer": {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                       "mask_token": "<mask>"},
    "Qwen2Tokenizer": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    "GPT2Tokenizer": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
}
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def _tok(v, special=True):
    """str or AddedToken-dict -> added-token dict (python AddedToken(str, special=True) defaults)."""
    if isinstance(v, dict):
        d = {"content": v["content"], "single_word": v.get("single_word", False), "lstrip": v.get("lstrip", False),
             "rstrip": v.get("rstrip", False), "normalized": v.get("normalized", not special), "special": special}
        return d
    return {"content": v, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": special}


def _special_tokens(model_dir, tc, cls):
    """(named+model-specific special tokens, extra special tokens) in transformers' order
    (tokenization_utils_base.py L1840-1865 _from_pretrained, L1012-1050 and L1097 __init__)."""
    src = dict(tc)
    if "added_tokens_decoder" not in tc:  # legacy special_tokens_map.json is read only then (L1891-1914)
        for k, v in (_load(os.path.join(model_dir, "special_tokens_map.json")) or {}).items():
            src[k] = v
    if "additional_special_tokens" in src and not src.get("extra_special_tokens"):
        src["extra_special_tokens"] = src.pop("additional_special_tokens")
    defaults = CLASS_DEFAULT_SPECIALS.get(cls, {})
    named = []
    for k in NAMED:
        v = src[k] if k in src else defaults.get(k)
        if v:
            named.append(v)
    for k, v in src.items():  # model-specific `*_token` keys with string values (e.g. image_token)
        if k not in NAMED and k.endswith("_token") and isinstance(v, str):
            named.append(v)
    extra = src.get("extra_special_tokens") or []
    if isinstance(extra, dict):
        named.extend(extra.values())
        extra = []
    return named, list(extra)


def _added_tokens(model_dir, tj, tc, cls, rebuilt):
    """Final added-token list, in load order, as the backend ends up with it
    (tokenization_utils_tokenizers.py L448-505; Qwen2Tokenizer L98).  Adding a token whose content is already
    present overwrites its flags in place (tokenizers AddedVocabulary::add_tokens, verified)."""
    toks = [] if rebuilt else [{"content": t["content"], **{f: t[f] for f in FLAGS}} for t in tj.get("added_tokens", [])]

    def add(t):
        for x in toks:
            if x["content"] == t["content"]:
                x.update(t)
                return
        toks.append(dict(t))

    if "added_tokens_decoder" in tc:
        src = sorted(((int(i), v) for i, v in tc["added_tokens_decoder"].items()), key=lambda x: x[0])
    else:
        src = sorted(((t["id"], t) for t in tj.get("added_tokens", [])), key=lambda x: x[0])
    named, extra = _special_tokens(model_dir, tc, cls)
    named_contents = {v["content"] if isinstance(v, dict) else v for v in named}
    for _, v in src:  # a token whose content is a named special token is forced special=True (L500-501)
        add({"content": v["content"], **{f: v[f] for f in FLAGS},
             **({"special": True} if v["content"] in named_contents else {})})
    have = {t["content"] for t in toks}
    for v in named + extra:  # missing named/extra special tokens are appended, special=True
        t = _tok(v)
        if t["content"] not in have:
            have.add(t["content"])
            toks.append(t)
    if cls == "Qwen2Tokenizer":  # self.add_tokens([AddedToken(t, special=True) for t in self.all_special_tokens])
        for v in named + extra:
            add(_tok(v["content"] if isinstance(v, dict) else v))
    return toks


def _vocab_merges(tj):
    m = tj["model"]
    vocab = m.get("vocab")
    if isinstance(vocab, list):  # Unigram [piece, score] list -> {piece: index} (L179-192)
        vocab = {(t[0] if isinstance(t, list) else t): i for i, t in enumerate(vocab)}
    # merges are taken whenever the JSON model has them (the target classes all use BPE), even if the
    # JSON model has no "type" field (old gpt2-style files) (L194-197)
    merges = m.get("merges")
    merges = list(merges or [])  # keep the file's format ("a b" strings or [a, b] pairs)
    return vocab, merges


def _bpe(vocab, merges, **kw):
    d = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False}
    d.update(kw)
    d["vocab"] = vocab
    d["merges"] = merges
    return d


def _llama(tj, tc):
    # models/llama/tokenization_llama.py L92-143 ; tokenization_utils_base.py L3750-3757
    aps = tc.get("add_prefix_space")
    aps = True if aps is None else aps
    legacy = tc.get("legacy", False)
    scheme = ("always" if legacy else "first") if aps else "never"
    vocab, merges = _vocab_merges(tj)
    dec = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
           {"type": "ByteFallback"}, {"type": "Fuse"}]
    if aps:
        dec.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return dict(
        normalizer=None,
        pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": False},
        decoder={"type": "Sequence", "decoders": dec},
        model=_bpe(vocab, merges, fuse_unk=True, byte_fallback=True),
    )


def _gemma(tj, tc):
    # models/gemma/tokenization_gemma.py L59-106
    vocab, merges = _vocab_merges(tj)
    unk = tc.get("unk_token", "<unk>")
    unk = unk["content"] if isinstance(unk, dict) else unk
    return dict(
        normalizer={"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
        decoder={"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                  {"type": "ByteFallback"}, {"type": "Fuse"}]},
        model=_bpe(vocab, merges, fuse_unk=True, byte_fallback=True, unk_token=str(unk)),
    )


QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def _qwen2(tj, tc):
    # models/qwen2/tokenization_qwen2.py L41-98
    aps = tc.get("add_prefix_space")
    aps = False if aps is None else aps
    vocab, merges = _vocab_merges(tj)
    return dict(
        normalizer={"type": "NFC"},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": True, "use_regex": False}]},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        model=_bpe(vocab, merges, continuing_subword_prefix="", end_of_word_suffix=""),
    )


def _gpt2(tj, tc):
    # models/gpt2/tokenization_gpt2.py L94-121
    aps = tc.get("add_prefix_space", False)
    vocab, merges = _vocab_merges(tj)
    return dict(
        normalizer=None,
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": True, "use_regex": True},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        model=_bpe(vocab, merges, continuing_subword_prefix="", end_of_word_suffix=""),
    )


REBUILDERS.update(LlamaTokenizer=_llama, GemmaTokenizer=_gemma, Qwen2Tokenizer=_qwen2, GPT2Tokenizer=_gpt2)


def transformers_tokenizer_json(model_dir, cls=None):
    """Return (class_name, mode, tokenizer_json_dict) where mode is 'as-is' or 'rebuilt'."""
    cls = cls or resolve_class(model_dir)
    tj = _load(os.path.join(model_dir, "tokenizer.json"))
    tc = _load(os.path.join(model_dir, "tokenizer_config.json")) or {}
    out = copy.deepcopy(tj)
    if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        mode = "as-is"
    elif cls in REBUILDERS:
        mode = "rebuilt"
        out.update(REBUILDERS[cls](tj, tc))  # post_processor, padding, truncation kept from tokenizer.json
    else:
        raise NotImplementedError(f"rebuild rule for {cls} not implemented")
    if out.get("post_processor") is None:
        # update_post_processor() (tokenization_utils_tokenizers.py L628-651) with add_bos/eos_token = False
        # (both popped from tokenizer_config when tokenizer.json exists, tokenization_utils_base.py L1807-1809)
        out["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                 "special_tokens": {}}
    out["added_tokens"] = _assign_ids(_added_tokens(model_dir, tj, tc, cls, mode == "rebuilt"), out["model"]["vocab"])
    return cls, mode, out


def _assign_ids(toks, vocab):
    """Ids exactly as tokenizers' AddedVocabulary::add_tokens gives them when loading the JSON in order
    (the `id` field of added_tokens is NOT honoured by the loader: verified, see notes)."""
    if isinstance(vocab, list):
        vocab = {(t[0] if isinstance(t, list) else t): i for i, t in enumerate(vocab)}
    size = len(vocab)
    used = []
    for t in toks:
        if t["content"] in vocab:
            t["id"] = vocab[t["content"]]
        else:
            m = max(used) if used else None
            t["id"] = size if m is None or (m < size and size != 0) else m + 1
        used.append(t["id"])
    return toks
