#!/usr/bin/env python3
"""Generate N golden SFT rows for models/tiny-chat, deterministically, for the SFT scale benchmark
(scripts/sft-scale.sh).

    PY=~/.cache/chatgate/venv-transformers-serve/bin/python     # transformers 5
    $PY scripts/gen_sft_rows.py OUT.jsonl [--rows 100000] [--seed 13] [--corrupt-every 0]

Each line has the fixture's format (models/tiny-chat/sft.jsonl) plus an "id" (optional in
`[sft] golden`, see suites/example.toml):
    {"id": "sft-000001", "messages": [...], "input_ids": [...], "assistant_mask": [...]}

The conversations follow the fixture's style and vocabulary (arithmetic, counting, parity,
animals, colours, capitals, opposites, greetings; an optional system prompt; 1-4 user/assistant
turns), drawn from a seeded random.Random, so the same arguments give the same bytes. The ids and
the mask are transformers' own:
    tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
tiny-chat's template has {% generation %} blocks, so the mask is real (checked below, as
scripts/capture_sft_golden.py does). All 100k conversations are rendered by transformers (no
repetition of a smaller set): it takes ~15-25 s on one core, because identical conversations
(single-turn ones recur) are rendered once and memoized — the cache key is the conversation
itself, so the rows are exactly what transformers returns for them.

--corrupt-every K (K > 0) corrupts every K-th row (row numbers K, 2K, 3K, ...; 1-based), so that
both tools must report exactly those rows as mismatching. The kinds alternate:
  odd multiples (K, 3K, ...):  an extra leading <|endoftext|> (id 0, config.json's bos_token_id) —
                               a pipeline that added a BOS the template does not render;
  even multiples (2K, 4K, ...): one id inside the first message's content replaced by another
                               ordinary (non-special) id — a silent tokenizer drift.
The mask keeps its length (a 0 is prepended with the extra id), so the row stays well-formed.
The number of corrupted rows is printed on stderr and written to OUT.jsonl.meta.json.
"""
import argparse
import json
import random
import re
import sys
import time

MODEL_DIR_DEFAULT = __file__.rsplit("/scripts/", 1)[0] + "/models/tiny-chat"

# The characters the fixture's sft.jsonl uses; every generated text is checked against them.
FIXTURE_CHARS = set(" !+,-.0123456789?ABCDEFGHIJKLMNOPRSTVWYabcdefghijklmnopqrstuvwyz")

SYSTEMS = ["You are a helpful assistant.", "You are a tiny test model. Answer briefly."]
NAMES = ["Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack", "Kate",
         "Leo", "Mia", "Nick", "Olivia", "Paul", "Rose", "Sam", "Tina", "Victor"]
WORDS = ["cookie", "tiger", "castle", "orange", "river", "wagon", "apple", "garden", "pencil",
         "window", "rabbit", "candle", "forest", "bottle", "planet", "spoon", "rocket", "mirror"]
SOUNDS = {"cat": "meow", "dog": "woof", "cow": "moo", "duck": "quack", "sheep": "baa", "pig": "oink",
          "horse": "neigh", "lion": "roar", "owl": "hoot", "frog": "ribbit", "bee": "buzz",
          "mouse": "squeak"}
LEGS = {"ant": 6, "bee": 6, "bird": 2, "cat": 4, "chicken": 2, "cow": 4, "dog": 4, "duck": 2,
        "horse": 4, "spider": 8}
COLORS = {"a banana": "yellow", "a carrot": "orange", "a crow": "black", "a leaf": "green",
          "a lemon": "yellow", "a strawberry": "red", "a tomato": "red", "chocolate": "brown",
          "coal": "black", "grass": "green", "milk": "white", "snow": "white", "the sea": "blue",
          "the sky": "blue", "the sun": "yellow"}
CAPITALS = {"Austria": "Vienna", "Canada": "Ottawa", "China": "Beijing", "Egypt": "Cairo",
            "France": "Paris", "Germany": "Berlin", "Greece": "Athens", "Italy": "Rome",
            "Japan": "Tokyo", "Kenya": "Nairobi", "Norway": "Oslo", "Peru": "Lima",
            "Poland": "Warsaw", "Portugal": "Lisbon", "Russia": "Moscow", "Spain": "Madrid"}
OPPOSITES = {"big": "small", "closed": "open", "cold": "hot", "dark": "light", "day": "night",
             "down": "up", "dry": "wet", "early": "late", "empty": "full", "fast": "slow",
             "happy": "sad", "hard": "soft", "new": "old", "quiet": "loud", "right": "left",
             "short": "tall"}
OPPOSITES.update({v: k for k, v in list(OPPOSITES.items())})
SMALL_TALK = [("Hello!", "Hello! How can I help you?"), ("Hi!", "Hello! How can I help you?"),
              ("Hey!", "Hello! How can I help you?"), ("Good morning!", "Good morning! How can I help you?"),
              ("Goodbye!", "Goodbye! Have a nice day."), ("How are you?", "I am fine, thank you!"),
              ("Thank you!", "You are welcome!"), ("Thanks!", "You are welcome!"),
              ("What is your name?", "I am a tiny test model."), ("Who are you?", "I am a tiny test model.")]


def cap(s):
    return s[0].upper() + s[1:]


def turn(rng):
    """One (user, assistant) pair in the fixture's style."""
    kind = rng.choices(
        ["add", "sub", "count", "countdown", "parity", "next", "word", "hi", "bye", "sound",
         "says", "legs", "color", "capital", "opposite", "talk"],
        weights=[20, 12, 4, 3, 6, 6, 8, 5, 5, 3, 3, 3, 4, 4, 6, 3])[0]
    if kind == "add":
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return f"What is {a}+{b}?", f"{a}+{b} is {a + b}."
    if kind == "sub":
        a = rng.randint(0, 99); b = rng.randint(0, a)
        return f"What is {a}-{b}?", f"{a}-{b} is {a - b}."
    if kind == "count":
        a = rng.randint(1, 5); b = rng.randint(a + 1, a + 9)
        return f"Count from {a} to {b}.", ", ".join(map(str, range(a, b + 1))) + "."
    if kind == "countdown":
        b = rng.randint(0, 5); a = rng.randint(b + 1, b + 9)
        return f"Count down from {a} to {b}.", ", ".join(map(str, range(a, b - 1, -1))) + "."
    if kind == "parity":
        n = rng.randint(0, 999)
        return f"Is {n} even or odd?", f"{n} is {'even' if n % 2 == 0 else 'odd'}."
    if kind == "next":
        n = rng.randint(0, 999)
        return f"What comes after {n}?", f"{n + 1} comes after {n}."
    if kind == "word":
        w = rng.choice(WORDS)
        return f"Repeat the word {w}.", f"{w}."
    if kind in ("hi", "bye"):
        p = rng.choice(NAMES)
        return f"Say {kind} to {p}.", f"{cap(kind)}, {p}!"
    if kind == "sound":
        a, s = rng.choice(sorted(SOUNDS.items()))
        return f"What animal says {s}?", f"A {a} says {s}."
    if kind == "says":
        a, s = rng.choice(sorted(SOUNDS.items()))
        return f"What does a {a} say?", f"A {a} says {s}."
    if kind == "legs":
        a, n = rng.choice(sorted(LEGS.items()))
        return f"How many legs does a {a} have?", f"A {a} has {n} legs."
    if kind == "color":
        t, c = rng.choice(sorted(COLORS.items()))
        return f"What color is {t}?", f"{cap(t)} is {c}."
    if kind == "capital":
        c, city = rng.choice(sorted(CAPITALS.items()))
        return f"What is the capital of {c}?", f"The capital of {c} is {city}."
    if kind == "opposite":
        w, o = rng.choice(sorted(OPPOSITES.items()))
        return f"What is the opposite of {w}?", f"The opposite of {w} is {o}."
    return rng.choice(SMALL_TALK)


def conversation(rng):
    messages = []
    if rng.random() < 0.25:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    for _ in range(rng.choices([1, 2, 3, 4], weights=[55, 25, 12, 8])[0]):
        u, a = turn(rng)
        messages.append({"role": "user", "content": u})
        messages.append({"role": "assistant", "content": a})
    for m in messages:
        bad = set(m["content"]) - FIXTURE_CHARS
        assert not bad, f"characters outside the fixture's vocabulary: {bad!r} in {m['content']!r}"
    return messages


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--model", default=MODEL_DIR_DEFAULT)
    ap.add_argument("--corrupt-every", type=int, default=0, metavar="K",
                    help="corrupt rows K, 2K, 3K, ... (1-based); 0: none")
    args = ap.parse_args()

    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    if re.search(r"\{%-?\s*generation\s*-?%\}", tok.chat_template or "") is None:
        sys.exit("the chat template has no {% generation %} block: this generator expects tiny-chat's")
    specials = set(tok.all_special_ids) | {0, 1, 2}
    ordinary = [i for i in range(len(tok)) if i not in specials]

    rng = random.Random(args.seed)
    cache = {}
    corrupted = []
    t0 = time.perf_counter()
    rendered = 0
    with open(args.out, "w") as out:
        for n in range(1, args.rows + 1):
            messages = conversation(rng)
            key = json.dumps(messages)
            hit = cache.get(key)
            if hit is None:
                enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True)
                hit = (list(enc["input_ids"]), list(enc["assistant_masks"]))
                assert len(hit[0]) == len(hit[1]) and any(hit[1]), "no assistant tokens masked"
                cache[key] = hit
                rendered += 1
            ids, mask = list(hit[0]), list(hit[1])
            if args.corrupt_every and n % args.corrupt_every == 0:
                if (n // args.corrupt_every) % 2 == 1:
                    ids, mask = [0] + ids, [0] + mask  # an extra BOS the template never renders
                else:
                    # The first content token: right after "<|im_start|>ROLE\n" of message 0.
                    at = len(tok.encode("<|im_start|>" + messages[0]["role"] + "\n", add_special_tokens=False))
                    old = ids[at]
                    ids[at] = ordinary[(ordinary.index(old) + 1) % len(ordinary)] if old in ordinary else ordinary[0]
                corrupted.append(n)
            out.write(json.dumps({"id": f"sft-{n:06d}", "messages": messages, "input_ids": ids,
                                  "assistant_mask": mask}, separators=(",", ":")) + "\n")
    dt = time.perf_counter() - t0
    meta = {"rows": args.rows, "seed": args.seed, "unique_conversations": len(cache),
            "rendered_by_transformers": rendered, "corrupt_every": args.corrupt_every,
            "corrupted_rows": len(corrupted), "first_corrupted": corrupted[:4],
            "transformers": transformers.__version__, "seconds": round(dt, 2)}
    with open(args.out + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta), file=sys.stderr)


if __name__ == "__main__":
    main()
