"""CTranslate2 as its own users call it, for benchmarks/e2e/realtext.py: SentencePiece pieces in, one
`translate_batch` call over the whole file, text out. torch is not imported (this file imports nothing of aiayn's).

    python benchmarks/e2e/ct2_direct.py CT2_DIR SRC OUT THREADS COMPUTE_TYPE [BEAM ALPHA BATCH PATIENCE [INTER]]

THREADS are CTranslate2's intra_threads (inter_threads 1, its default); with INTER, INTER batches run at once
(inter_threads), each on THREADS // INTER threads: what CTranslate2's documentation advises for throughput.

Prints one JSON line: the seconds spent loading and in translate_batch (in process), and the sentences.
"""

import json
import sys
import time

import ctranslate2
import sentencepiece as spm


def main() -> None:
    folder, src, out, threads, compute_type = sys.argv[1:6]
    beam, alpha, batch, patience = 4, 0.6, 64, 1.0  # CTranslate2's own default patience: 1
    if len(sys.argv) > 6:
        beam, alpha, batch, patience = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
    inter = int(sys.argv[10]) if len(sys.argv) > 10 else 1
    start = time.perf_counter()
    sp = spm.SentencePieceProcessor(model_file=f"{folder}/vocab.model")
    translator = ctranslate2.Translator(folder, device="cpu", compute_type=compute_type,
                                        intra_threads=max(1, int(threads) // inter), inter_threads=inter)
    with open(src, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    pieces = [sp.encode(line, out_type=str) for line in lines]
    loaded, cpu = time.perf_counter(), time.process_time()
    results = translator.translate_batch(pieces, beam_size=beam, length_penalty=alpha, max_batch_size=batch,
                                         max_decoding_length=256, patience=patience)
    texts = [sp.decode(r.hypotheses[0]) for r in results]
    done, cpu = time.perf_counter(), time.process_time() - cpu
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in texts)
    print(json.dumps({"load_s": loaded - start, "translate_s": done - loaded, "translate_cpu_s": cpu,
                      "sentences": len(lines)}))


if __name__ == "__main__":
    main()
