"""Decoding on one GPU, in one run: aiayn (eager, and graphed: aiayn.decoding.static_search's fixed-shape step replayed
as a CUDA graph) beside HF `generate` and CTranslate2, greedy and beam 4, batches of 64 and 512 sentences.

    python -m benchmarks.gpu.decode --checkpoint RUN --data DATA --out decode.jsonl     # a trained model, real text
    python -m benchmarks.gpu.decode --preset base --out decode.jsonl                     # random `base`, forced length
    python -m benchmarks.gpu.decode --cpu --out /tmp/decode.jsonl                         # smoke mode (the test suite)
    python -m benchmarks.gpu.decode --report decode.jsonl                                 # the table of a run's records

Two workloads:
- A trained model (--checkpoint, e.g. the quickstart's run) on the first N sentences of DATA/test.src.txt: every
  engine gets the same source ids in one batch of N and searches the same way (beam, alpha 0.6 with the |Y|^alpha
  penalty all of them have, at most --max-len words, EOS and the model's own stopping), in --dtype (bf16: aiayn's
  bf16 weights, HF's model cast to bf16, CTranslate2's compute_type bfloat16). The record counts the lines each
  engine outputs identically to aiayn eager (the same translations check).
- A random `base` (--preset) forced to --n-tokens words per sentence (EOS banned before), so every engine does the
  same work (as benchmarks/gpu/peers.py's decoding cells); CTranslate2 is left out there (a random model's export
  needs a vocabulary of the preset's size).
Each cell: sentences/s (median of --reps timed calls after one warm-up; the warm-up includes graph capture), peak
GPU memory allocated through torch (not CTranslate2's own allocator: its cells give the device's used memory after
the cell, from NVML, instead). One record per cell as soon as it is measured; a cell that fails is reported and the
rest still run. CTranslate2's PyPI wheels load CUDA 12's cuBLAS at run time: where the machine has another CUDA, its
cells say so in their error.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.decoding.search import SearchConfig, beam_search, greedy_search

ENGINES = ("aiayn", "aiayn graphed", "hf", "ct2")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pad(sources: list[list[int]], device: torch.device) -> torch.Tensor:
    x = torch.full((len(sources), max(map(len, sources))), PAD_ID, dtype=torch.long)
    for row, s in enumerate(sources):
        x[row, : len(s)] = torch.tensor(s)
    return x.to(device)


def aiayn_engine(model, search: SearchConfig, graphed: bool) -> Callable[[torch.Tensor], list[list[int]]]:
    """src (N, S) -> the best hypothesis's word ids per sentence, by aiayn's search (eager) or aiayn.graphed's."""
    if graphed:  # one decoder: its first call (the warm-up) captures the graph, the timed calls replay it
        from aiayn.decoding.static_search import StaticDecoder

        static = StaticDecoder(model, max_len=search.max_len_b)
        return lambda src: [h[0].tokens for h in static.search(src, search)]
    decode = greedy_search if search.beam == 1 else beam_search
    return lambda src: [h[0].tokens for h in decode(model, src, search)]


def hf_engine(model, search: SearchConfig, dtype: torch.dtype, device: torch.device, forced: int | None):
    """HF MarianMTModel (aiayn.export.hf.to_marian: the same function) and its `generate`, searched as `search`."""
    import transformers

    from aiayn.export.hf import to_marian

    transformers.logging.set_verbosity_error()  # not a warning a cell for max_new_tokens overriding max_length
    hf = to_marian(copy.deepcopy(model).float().cpu()).to(device=device, dtype=dtype)
    limit = forced or search.max_len_b  # words; + 1 for the EOS that HF forces at its max_new_tokens, as aiayn does
    kw = dict(num_beams=search.beam, do_sample=False, length_penalty=search.alpha, max_new_tokens=limit + 1,
              min_new_tokens=forced or max(search.min_len, 1), num_return_sequences=1)

    def run(src):
        ys = hf.generate(input_ids=src, attention_mask=src.ne(PAD_ID), **kw).tolist()
        return [[t for t in y[1:] if t not in (EOS_ID, PAD_ID, BOS_ID)] for y in ys]
    return run


def ct2_engine(model, vocab, search: SearchConfig, dtype: str, device: torch.device, folder: Path):
    """CTranslate2 on aiayn's export (aiayn.export.ct2), ids in and out (its own tokens are aiayn's pieces)."""
    import ctranslate2

    from aiayn.export.ct2 import export_ct2

    export_ct2(copy.deepcopy(model).float().cpu(), vocab, folder)
    translator = ctranslate2.Translator(str(folder), device=device.type, compute_type=dtype)
    specials = [[vocab.piece(PAD_ID)], [vocab.piece(BOS_ID)]]

    def run(src):
        batch = [[vocab.piece(t) for t in row if t not in (PAD_ID, EOS_ID)] for row in src.tolist()]
        out = translator.translate_batch(batch, beam_size=search.beam, length_penalty=search.alpha,
                                         max_decoding_length=search.max_len_b, min_decoding_length=search.min_len,
                                         max_input_length=0, suppress_sequences=specials, max_batch_size=0)
        return [[vocab.sp.piece_to_id(p) for p in r.hypotheses[0]] for r in out]
    return run


def gpu_used_gb() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used / 1e9
    except Exception:  # noqa: BLE001 (no NVML: no number)
        return None


def time_cell(run, src: torch.Tensor, reps: int, device: torch.device) -> tuple[float, list[list[int]], dict]:
    """Median seconds of one call over `reps` timed calls after a warm-up; the last call's output; memory."""
    with torch.inference_mode():
        out = run(src)
        sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = run(src)
            sync(device)
            times.append(time.perf_counter() - t0)
    mem = {}
    if device.type == "cuda":
        mem = {"peak_torch_gb": torch.cuda.max_memory_allocated(device) / 1e9, "device_used_gb": gpu_used_gb()}
    return statistics.median(times), out, mem


def cells(args, model, vocab, sources: list[list[int]], search_for, device, workload: str, emit) -> None:
    """Every (beam, sentences, engine) cell of one workload; aiayn eager first in each (the reference output)."""
    from aiayn.decoding.inference import decoding_copy
    from aiayn.runtime import attention_without_shape_plans

    attention_without_shape_plans(device)  # as inference.load does: decoding meets a new shape at every step
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    engines = [e for e in args.engines.split(",") if e]
    ours = decoding_copy(copy.deepcopy(model).to(device), "fp32" if args.dtype == "fp16" else args.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        for beam in (int(b) for b in args.beams.split(",")):
            search = search_for(beam)
            for n in (int(s) for s in args.sents.split(",")):
                src = pad(sources[:n], device)
                reference = None
                for engine in engines:
                    rec = {"what": "decode", "workload": workload, "engine": engine, "dtype": args.dtype,
                           "beam": beam, "sents": src.size(0)}
                    try:
                        if engine == "ct2" and vocab is None:
                            continue
                        run = (aiayn_engine(ours, search, engine == "aiayn graphed") if engine.startswith("aiayn")
                               else hf_engine(model, search, dtype, device, args.forced) if engine == "hf"
                               else ct2_engine(model, vocab, search, CT2_TYPES[args.dtype], device,
                                               Path(tmp) / f"ct2-{beam}-{n}"))
                        dt, out, mem = time_cell(run, src, args.reps, device)
                        reference = out if engine == "aiayn" else reference
                        rec.update(batch_s=dt, sent_s=src.size(0) / dt, **mem,
                                   out_tokens=sum(map(len, out)) / len(out))
                        if reference is not None:
                            rec["same_as_aiayn"] = sum(a == b for a, b in zip(out, reference))
                    except Exception as e:  # noqa: BLE001 (one failing cell does not stop the others)
                        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    emit(rec)


CT2_TYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def report(recs: list[dict]) -> str:
    """A markdown table of decoding records: sentences/s, the ratio to HF generate in the same cell, memory, lines
    equal to aiayn eager's."""
    cells = [r for r in recs if r.get("what") == "decode"]
    hf = {(r["workload"], r["beam"], r["sents"]): r.get("sent_s") for r in cells if r["engine"] == "hf"}
    rows = ["| workload | search | sentences | engine | sentences/s | vs HF generate | peak GPU memory (torch) "
            "| lines equal to aiayn eager |", "|---|---|---|---|---|---|---|---|"]
    for r in cells:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        if "error" in r:
            rows.append(f"| {r['workload']} | {search} | {r['sents']} | {r['engine']} | {r['error'][:70]} | | | |")
            continue
        base = hf.get((r["workload"], r["beam"], r["sents"]))
        ratio = f"{r['sent_s'] / base:.2f}x" if base else ""
        mem = f"{r['peak_torch_gb']:.2f} GB" if r.get("peak_torch_gb") is not None else ""
        rows.append(f"| {r['workload']} | {search} | {r['sents']} | {r['engine']} | {r['sent_s']:,.0f} | {ratio} | "
                    f"{mem} | {r.get('same_as_aiayn', '')} of {r['sents']} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="a trained run (or checkpoint file): its real test sentences")
    ap.add_argument("--data", help="the prepared-data folder holding test.src.txt (with --checkpoint)")
    ap.add_argument("--preset", help="a random model of this preset, forced to --n-tokens words")
    ap.add_argument("--cpu", action="store_true", help="smoke mode: CPU, fp32, a tiny random model, 2 and 4 sentences")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma separated, of {', '.join(ENGINES)}")
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--sents", default="64,512", help="sentences per batch, comma separated")
    ap.add_argument("--max-len", type=int, default=200, help="at most this many words (trained model)")
    ap.add_argument("--n-tokens", type=int, default=30, help="forced output length (--preset)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per cell")
    ap.add_argument("--out", help="append JSON lines here")
    ap.add_argument("--report", help="print the table of this file's records and exit")
    args = ap.parse_args()
    if args.report:
        print(report([json.loads(line) for line in Path(args.report).read_text().splitlines()]))
        return
    if args.cpu:
        args.device, args.dtype, args.preset, args.sents, args.n_tokens, args.reps = "cpu", "fp32", "tiny", "2,4", 5, 1
    if not (args.checkpoint or args.preset):
        ap.error("give --checkpoint (with --data) or --preset (or --cpu)")
    device = torch.device(args.device)

    def emit(rec: dict) -> None:
        print(json.dumps(rec), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    emit({"what": "device", "name": name, "torch": torch.__version__})
    if args.checkpoint:
        from aiayn.decoding.lines import encode_sources
        from aiayn.rundir import load_for_inference

        model, vocab, _ = load_for_inference(Path(args.checkpoint))
        lines = (Path(args.data) / "test.src.txt").read_text(encoding="utf-8").splitlines()
        sources = [s for s in encode_sources(vocab, lines, model.cfg.max_positions) if s]
        args.forced = None
        cells(args, model, vocab, sources, lambda beam: SearchConfig(beam=beam, alpha=0.6, lp="power", max_len_a=0.0,
                                                                     max_len_b=args.max_len), device, "trained", emit)
    if args.preset:
        from aiayn.config import ModelConfig
        from aiayn.model import Transformer
        from benchmarks.workloads import train_batch

        torch.manual_seed(0)
        cfg = ModelConfig.preset(args.preset)
        model = Transformer(cfg).eval()
        n = max(int(s) for s in args.sents.split(","))
        src = train_batch(cfg.vocab_size, n * 27, "cpu", seed=1, lo=23, hi=27)[0][:n]
        sources = [[t for t in row if t != PAD_ID] for row in src.tolist()]
        args.forced = args.n_tokens
        cells(args, model, None, sources, lambda beam: SearchConfig(beam=beam, alpha=0.6, lp="power", max_len_a=0.0,
                                                                    max_len_b=args.n_tokens, min_len=args.n_tokens),
              device, f"{args.preset} forced {args.n_tokens}", emit)


if __name__ == "__main__":
    main()
