"""An exported Argos Translate package, through argostranslate itself: which sentence splitters work offline, and
how its translations of the test set compare with aiayn's CTranslate2 export (argostranslate's decoding settings).

    python -m benchmarks.e2e.argos_package --checkpoint RUN --data DATA --source-lang en --target-lang es [--n N]

argostranslate runs in fresh Pythons, each with its own home, data, config, cache and packages folders in a
temporary folder (the real ones are never touched), in the network this machine has. Part 1 installs the package
and translates one line under each ARGOS_CHUNK_TYPE, printing what happens. Part 2 translates the test lines one
by one, as a LibreTranslate server would, with ARGOS_CHUNK_TYPE=SPACY, in float32 (ARGOS_COMPUTE_TYPE=default) and
with argostranslate's default compute type "auto"; aiayn's CTranslate2 export translates the same lines with the
same settings, whole and sentence by sentence as the package's spaCy pipeline splits them. BLEU: sacreBLEU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from aiayn.decoding.ct2 import CT2Translator
from aiayn.decoding.search import SearchConfig
from aiayn.export.argos import ARGOS_DECODING, export_argos
from aiayn.export.ct2 import export_ct2
from aiayn.metrics import corpus_bleu
from aiayn.rundir import inference_checkpoint, load_for_inference
from benchmarks.timing import once, table

ARGOS = """
import json, sys, time
start = time.time()
import argostranslate.package, argostranslate.translate
argostranslate.package.install_from_path(sys.argv[1])
source, target = sys.argv[2:4]
languages = [lang.code for lang in argostranslate.translate.get_installed_languages()]
texts = json.loads(sys.stdin.read())
try:
    out = [argostranslate.translate.translate(t, source, target) for t in texts]
except Exception as error:
    out = f"{type(error).__name__}: {str(error)[:160]}"
print(json.dumps({"languages": languages, "translations": out, "seconds": time.time() - start}))
"""
CHUNK_TYPES = (None, "MINISBD", "STANZA", "NONE", "SPACY")


def argos(package: Path, texts: list[str], source: str, target: str, home: Path, **settings: str) -> tuple[dict, str]:
    """argostranslate in a fresh Python under `home`: (its JSON answer, or {} when it failed; its stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOS_", "XDG_"))}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"), "ARGOS_PACKAGES_DIR": str(home / "packages"), **settings}
    home.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", ARGOS, str(package), source, target], input=json.dumps(texts),
                          env=env, cwd=home, capture_output=True, text=True, timeout=3600)
    lines = done.stdout.strip().splitlines()
    return (json.loads(lines[-1]) if done.returncode == 0 and lines else {}), done.stderr


def splitters(package: Path, line: str, args, root: Path) -> None:
    rows = []
    for chunk in CHUNK_TYPES:
        settings = {"ARGOS_CHUNK_TYPE": chunk} if chunk else {}
        out, err = argos(package, [line], args.source_lang, args.target_lang, root / f"home-{chunk}", **settings)
        result = out.get("translations", "the Python failed")
        result = repr(result[0]) if isinstance(result, list) else result
        noted = [x.strip()[:160] for x in err.splitlines() if x.strip()][-2:]
        rows.append([chunk or "(unset)", ", ".join(out.get("languages", [])), result, f"{out.get('seconds', 0):.1f}",
                     " / ".join(noted)])
        print(f"ARGOS_CHUNK_TYPE={chunk or '(unset)'}: {result} | stderr: {noted}", flush=True)
    print("\n" + table(["ARGOS_CHUNK_TYPE", "installed languages", "translation of the first test line", "seconds",
                        "stderr (last lines)"], rows) + "\n")


def sentences_of(package_folder: Path, lines: list[str]) -> list[list[str]]:
    """Each line as argostranslate's SPACY splitter cuts it (the package's pipeline plus spaCy's sentencizer)."""
    import spacy

    nlp = spacy.load(package_folder / "spacy", exclude=["parser"])
    nlp.add_pipe("sentencizer")
    return [[s.text for s in nlp(line).sents] for line in lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="run directory or checkpoint file")
    ap.add_argument("--data", required=True, help="prepared-data directory with test.src.txt / test.tgt.txt")
    ap.add_argument("--source-lang", required=True)
    ap.add_argument("--target-lang", required=True)
    ap.add_argument("--n", type=int, default=0, help="first N test lines (default all)")
    args = ap.parse_args()

    data = Path(args.data)
    src = (data / "test.src.txt").read_text(encoding="utf-8").splitlines()
    ref = (data / "test.tgt.txt").read_text(encoding="utf-8").splitlines()
    if args.n:
        src, ref = src[: args.n], ref[: args.n]
    checkpoint = inference_checkpoint(Path(args.checkpoint))
    model, vocab, _ = load_for_inference(checkpoint)
    search = SearchConfig(beam=ARGOS_DECODING["beam_size"], lp="power", alpha=ARGOS_DECODING["length_penalty"],
                          max_len_a=0.0, max_len_b=ARGOS_DECODING["max_decoding_length"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        name = f"translate-{args.source_lang}_{args.target_lang}-1_0"
        package = export_argos(model, vocab, root / f"{name}.argosmodel", args.source_lang, args.target_lang)
        zipfile.ZipFile(package).extractall(root / "unzipped")
        print(f"== 1. argostranslate's sentence splitters ({checkpoint}, {package.name})\n", flush=True)
        splitters(package, src[0], args, root)

        print(f"== 2. {len(src)} test lines, one by one, ARGOS_CHUNK_TYPE=SPACY\n", flush=True)
        cut = sentences_of(root / "unzipped" / name, src)
        ct2 = {kind: CT2Translator(export_ct2(model, vocab, root / f"ct2-{kind}"), compute_type=kind, threads=1)
               for kind in ("default", "auto")}
        flat = [s for sents in cut for s in sents]
        runs = {}
        for kind in ("default", "auto"):
            out, err = argos(package, src, args.source_lang, args.target_lang, root / f"home-all-{kind}",
                             ARGOS_CHUNK_TYPE="SPACY", ARGOS_COMPUTE_TYPE=kind, ARGOS_INTRA_THREADS="1")
            assert out, err
            runs[f"argostranslate, compute {kind}"] = (out["translations"], out["seconds"])
            done, seconds = once(lambda c=ct2[kind]: c.translate(flat, search))
            it = iter(done)
            runs[f"aiayn CT2 export, compute {kind}, sentence by sentence"] = (
                [" ".join(next(it) for _ in sents) for sents in cut], seconds)
            runs[f"aiayn CT2 export, compute {kind}, whole lines"] = once(lambda c=ct2[kind]: c.translate(src,
                                                                                                         search))
        rows = []
        for label, (hyps, seconds) in runs.items():
            argos_hyps = runs[f"argostranslate, compute {'auto' if 'auto' in label else 'default'}"][0]
            differ = [h for h, a in zip(hyps, argos_hyps) if h != a]
            unk = sum("\u2047" in h for h in differ)  # " ⁇ ": a generated <unk>, which argostranslate replaces
            rows.append([label, f"{corpus_bleu(hyps, ref).score:.2f}", f"{len(src) - len(differ)}/{len(src)}",
                         str(unk), f"{seconds:.1f}"])
        print(f"lines the splitter cuts into several sentences: {sum(len(s) > 1 for s in cut)}/{len(src)}; "
              f"settings: {ARGOS_DECODING}; one thread each; argostranslate's seconds include its start\n")
        print(table(["translations", "BLEU", "lines as argostranslate's (same compute type)",
                     "of the others, with a generated <unk>", "seconds"], rows))


if __name__ == "__main__":
    main()
