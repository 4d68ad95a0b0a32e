"""HF transformers' generate on a folder written by `aiayn export --to hf`, as its users run it: a file of sentences in,
beam 4, |Y|^0.6 (length_penalty 0.6), batches of 64 sentences, text out. For all.sh's userpath part, beside
`aiayn translate` as a whole process.

    python benchmarks/gpu/hf_generate.py HF_DIR SRC OUT [--precision fp32|bf16] [--device cuda] [--batch-size 64]

Prints one JSON line: seconds loading and in generate (in process), sentences. The exported generation_config.json
carries the rest of the search (max_length 256, suppressed PAD and BOS, at least one word, no early stop).
"""

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    from transformers import MarianMTModel, MarianTokenizer

    start = time.perf_counter()
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = MarianMTModel.from_pretrained(args.folder, dtype=dtype).to(args.device).eval()
    tokenizer = MarianTokenizer.from_pretrained(args.folder)
    with open(args.src, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    loaded = time.perf_counter()
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))  # batches of similar lengths, as aiayn's
    texts = [""] * len(lines)
    with torch.inference_mode():
        for at in range(0, len(order), args.batch_size):
            idx = order[at: at + args.batch_size]
            batch = tokenizer([lines[i] for i in idx], return_tensors="pt", padding=True).to(args.device)
            ys = model.generate(**batch, num_beams=4, length_penalty=0.6)
            for i, text in zip(idx, tokenizer.batch_decode(ys, skip_special_tokens=True)):
                texts[i] = text
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    done = time.perf_counter()
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in texts)
    print(json.dumps({"load_s": loaded - start, "translate_s": done - loaded, "sentences": len(lines)}))


if __name__ == "__main__":
    main()
