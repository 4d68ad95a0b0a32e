"""HF transformers as a time-to-BLEU peer: MarianMTModel trained by HF's own Seq2SeqTrainer on aiayn's prepared pairs
(the same token ids, the same shared vocabulary), then averaged and decoded with HF's `generate`.
benchmarks/peers/time_to_bleu.py runs it as the system `hf`; alone:

    python -m benchmarks.peers.hf_seq2seq train --data data-bin/multi30k --out runs/ttb/hf --minutes 3 \
        --save-every 150 --recipe '{"enc_layers": 3, ...}'          # time_to_bleu.recipe()'s fields
    python -m benchmarks.peers.hf_seq2seq decode --data data-bin/multi30k --input test.src.txt --output test.hyp \
        runs/ttb/hf/checkpoint-150 runs/ttb/hf/checkpoint-300       # the checkpoints averaged

The recipe maps onto the Trainer's documented options: the model's shape, dropout and tied embeddings
(`share_encoder_decoder_embeddings`); `label_smoothing_factor`; Adam's betas and epsilon with no weight decay and no
gradient clipping (`max_grad_norm=0`); `lr_scheduler_type="inverse_sqrt"` (linear warm-up, then 1/sqrt(step), as
the Noam schedule) peaking at the recipe's peak; bf16 mixed precision on a GPU that has it (`bf16=True`), fp32
elsewhere. The Trainer batches by sentences, not tokens: --max-tokens / the mean target length sentences a batch,
grouped by length (its option for less padding). A callback stops training after --minutes with a checkpoint;
checkpoints are saved every --save-every updates (`save_only_model`). Decoding: beam 4 and length penalty 0.6 in
HF's sense (score / length^0.6), at most source length + 50 new tokens, 64 sentences a batch, longest first.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data import Vocab, load_split


def marian(recipe: dict, vocab_size: int):
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(
        vocab_size=vocab_size, d_model=recipe["d_model"], encoder_layers=recipe["enc_layers"],
        decoder_layers=recipe["dec_layers"], encoder_attention_heads=recipe["heads"],
        decoder_attention_heads=recipe["heads"], encoder_ffn_dim=recipe["d_ff"], decoder_ffn_dim=recipe["d_ff"],
        dropout=recipe["dropout"], attention_dropout=0.0, activation_dropout=0.0, activation_function="relu",
        max_position_embeddings=1024, scale_embedding=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        bos_token_id=BOS_ID, decoder_start_token_id=BOS_ID, forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True))


class Pairs(torch.utils.data.Dataset):
    """aiayn's prepared split as the Trainer's examples: source and target ids, each ending in EOS."""

    def __init__(self, data: Path, split: str):
        self.split = load_split(data, split)

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> dict:
        src, tgt = self.split[i]
        return {"input_ids": [int(t) for t in src] + [EOS_ID], "labels": [int(t) for t in tgt] + [EOS_ID]}


def collate(examples: list[dict]) -> dict:
    """Right-padded, as DataCollatorForSeq2Seq makes them: inputs with PAD and an attention mask, labels with -100
    (what the loss ignores), and the decoder's inputs (the labels shifted right behind the start token), which the
    Trainer needs when it smooths labels itself."""
    n = max(len(e["input_ids"]) for e in examples)
    m = max(len(e["labels"]) for e in examples)
    ids = torch.tensor([e["input_ids"] + [PAD_ID] * (n - len(e["input_ids"])) for e in examples])
    labels = torch.tensor([e["labels"] + [-100] * (m - len(e["labels"])) for e in examples])
    dec = torch.cat([torch.full((len(examples), 1), BOS_ID), labels[:, :-1].clamp(min=PAD_ID)], 1)
    return {"input_ids": ids, "attention_mask": ids.ne(PAD_ID).long(), "labels": labels, "decoder_input_ids": dec}


def train(args, started: float) -> None:
    """Train until --minutes after `started` (the harness times every system from its process's start)."""
    import inspect

    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    recipe = json.loads(args.recipe)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    vocab = Vocab.load(args.data / "vocab.model")
    train_set = Pairs(args.data, "train")
    mean_tgt = sum(len(train_set.split[i][1]) + 1 for i in range(len(train_set))) / len(train_set)
    sentences = max(1, round(recipe["max_tokens"] / mean_tgt))
    cuda = torch.cuda.is_available() and args.device != "cpu"
    options = inspect.signature(Seq2SeqTrainingArguments.__init__).parameters
    grouping = ({"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in options
                else {"group_by_length": True})
    targs = Seq2SeqTrainingArguments(
        output_dir=str(args.out), max_steps=10**8, per_device_train_batch_size=sentences,
        learning_rate=recipe["peak_lr"], lr_scheduler_type="inverse_sqrt", warmup_steps=recipe["warmup"],
        adam_beta1=recipe["adam_betas_pair"][0], adam_beta2=recipe["adam_betas_pair"][1],
        adam_epsilon=recipe["adam_eps"], weight_decay=0.0, max_grad_norm=0.0,
        label_smoothing_factor=recipe["label_smoothing"], bf16=cuda and torch.cuda.is_bf16_supported(),
        save_strategy="steps", save_steps=args.save_every, save_only_model=True, logging_steps=50, seed=1,
        report_to="none", dataloader_num_workers=0, disable_tqdm=True, use_cpu=not cuda, **grouping)

    class StopAfter(TrainerCallback):
        def on_step_end(self, _args, state, control, **_kw):
            if time.time() - started >= args.minutes * 60:
                control.should_save = control.should_training_stop = True
            return control

    torch.manual_seed(1)
    model = marian(recipe, len(vocab))
    print(f"hf: MarianMTModel {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {sentences} "
          f"sentences a batch (~{recipe['max_tokens']} target tokens), {'cuda bf16' if targs.bf16 else 'fp32'}",
          flush=True)
    Seq2SeqTrainer(model=model, args=targs, train_dataset=train_set, data_collator=collate,
                   callbacks=[StopAfter()]).train()


def average(checkpoints: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    total: dict[str, torch.Tensor] = {}
    for c in checkpoints:
        for k, v in load_file(str(c / "model.safetensors")).items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(checkpoints)).float() for k, v in total.items()}


def decode(args) -> None:
    from transformers import MarianMTModel

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    device = torch.device("cuda" if torch.cuda.is_available() and args.device != "cpu" else "cpu")
    model = MarianMTModel.from_pretrained(str(args.checkpoints[-1]))
    missing, unexpected = model.load_state_dict(average(args.checkpoints), strict=False)
    if unexpected or any("embed" not in k and "lm_head" not in k for k in missing):
        raise SystemExit(f"checkpoint mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.to(device).eval()
    vocab = Vocab.load(args.data / "vocab.model")
    lines = args.input.read_text(encoding="utf-8").splitlines()
    ids = [vocab.encode(line) + [EOS_ID] for line in lines]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out: list[str] = [""] * len(ids)
    with torch.inference_mode():
        for b in range(0, len(order), args.batch):
            chunk = order[b: b + args.batch]
            batch = collate([{"input_ids": ids[i], "labels": [EOS_ID]} for i in chunk])  # (labels unused)
            src = batch["input_ids"].to(device)
            gen = model.generate(input_ids=src, attention_mask=batch["attention_mask"].to(device),
                                 num_beams=args.beam, length_penalty=args.lenpen, max_new_tokens=src.shape[1] + 50,
                                 early_stopping=True)
            for i, row in zip(chunk, gen.tolist()):
                out[i] = vocab.decode([t for t in row if t not in (PAD_ID, BOS_ID, EOS_ID)])
    args.output.write_text("".join(line + "\n" for line in out), encoding="utf-8")


def main() -> None:
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--minutes", type=float, required=True)
    t.add_argument("--save-every", type=int, required=True)
    t.add_argument("--recipe", required=True, help="time_to_bleu.recipe()'s fields as JSON")
    t.add_argument("--device", default="auto", help="auto (a GPU where there is one) or cpu")
    d = sub.add_parser("decode")
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--input", type=Path, required=True)
    d.add_argument("--output", type=Path, required=True)
    d.add_argument("--beam", type=int, default=4)
    d.add_argument("--lenpen", type=float, default=0.6)
    d.add_argument("--batch", type=int, default=64)
    d.add_argument("--device", default="auto")
    d.add_argument("checkpoints", type=Path, nargs="+")
    args = ap.parse_args()
    train(args, started) if args.what == "train" else decode(args)


if __name__ == "__main__":
    main()
