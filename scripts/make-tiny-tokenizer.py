#!/usr/bin/env python3
"""Derives a small byte-level BPE tokenizer from the real Qwen3 tokenizer.json: the first N ids of
its vocabulary (ids are in merge order, the 256 byte symbols first), the merges whose parts and
result all survive, and the same added tokens renumbered after N. The result is a valid HF
tokenizer.json that encodes like Qwen3 restricted to its first N merges, for tiny test models.

usage: make-tiny-tokenizer.py SRC/tokenizer.json OUT_DIR [N]"""
import json
import os
import sys


def main():
    src, out_dir = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < n}
    if len(vocab) != n:
        sys.exit(f"expected ids 0..{n - 1} in the source vocabulary, found {len(vocab)}")
    merges = []
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append([a, b])
    model["vocab"], model["merges"] = vocab, merges
    for k, added in enumerate(tok["added_tokens"]):
        added["id"] = n + k
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg_src = os.path.join(os.path.dirname(src), "tokenizer_config.json")
    if os.path.exists(cfg_src):
        with open(cfg_src, encoding="utf-8") as f:
            cfg = json.load(f)
        remap = {a["content"]: a["id"] for a in tok["added_tokens"]}
        cfg["added_tokens_decoder"] = {str(remap[v["content"]]): v for v in cfg.get("added_tokens_decoder", {}).values()
                                       if v["content"] in remap}
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(f"{out_dir}: {n} BPE ids, {len(merges)} merges, {len(tok['added_tokens'])} added tokens "
          f"(vocabulary {n + len(tok['added_tokens'])})")


if __name__ == "__main__":
    main()
