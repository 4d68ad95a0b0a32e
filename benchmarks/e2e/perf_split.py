"""Where a decoding's CPU time goes, by kind of work, from Linux perf samples: aiayn's engine beside CTranslate2 on the
same file, so that what one spends and the other does not shows (GEMMs, the vocabulary's softmax and top-k, copies,
the Python interpreter, allocation, the kernel).

    taskset -c 0 perf record -q -D 3000 -F 2000 -o aiayn.perf -- python -m benchmarks.e2e.realtext inprocess \
        --run RUN --src SRC --output /tmp/out.txt --precision fp32
    taskset -c 0 perf record -q -D 300 -F 2000 -o ct2.perf -- python benchmarks/e2e/ct2_direct.py CT2_DIR SRC \
        /tmp/out.txt 1 float32 4 0.6 64 1
    python -m benchmarks.e2e.perf_split aiayn.perf ct2.perf

-D skips the import and the load (the samples are of the translate call, mostly). Each file's samples are split by
the first kind in KINDS whose pattern matches the sample's library or symbol; the table gives the share of each
file's samples and, at -F 2000, its seconds (samples / 2000).
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter

KINDS = (  # (kind, pattern on "library symbol"); the first that matches wins
    ("matrix products (MKL, oneDNN, fbgemm, JIT-compiled kernels; attention's)",
     r"mkl_blas|sgemm|gemv|dnnl|fbgemm|brgemm|\[JIT\]|gemm|bmm|flash_attention"),
    ("softmax and log-softmax (exp)", r"softmax|Sleef|expf"),
    ("top-k", r"topk|TopK|introselect|adjust_heap|nth_element"),
    ("Python interpreter and torch's Python bindings", r"libpython|libtorch_python"),
    ("memory copies", r"memmove|memcpy|index_select|index_copy|Gather|Concat|transpose|copy_kernel"),
    ("allocation", r"malloc|_int_free|free|consolidate|unlink_chunk|Allocator"),
    ("operating system (page faults, scheduling)", r"\[kernel"),
    ("elementwise ops and reductions", r"VectorizedLoop|loop_2d|basic_loop|binary_kernel|[Rr]educ|Moments|LayerNorm|"
                                       r"ctranslate2::cpu::(add|mul|max|layer_norm)|ctranslate2::primitives"),
    ("torch's operator dispatch and tensor bookkeeping", r"c10::|OperatorEntry|Dispatcher|libc10|TensorImpl|"
                                                        r"TensorIterator|at::native::empty|at::detail|at::_ops|"
                                                        r"as_strided|at::native::view|autograd|__tls_get_addr"),
)


def samples(path: str) -> Counter:
    """Samples of each (library, symbol) in a perf.data file."""
    report = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "dso,symbol", "-g", "none",
                             "--stdio", "-F", "sample,dso,symbol"], capture_output=True, text=True, check=True).stdout
    counts: Counter = Counter()
    for line in report.splitlines():
        match = re.match(r"\s*(\d+)\s+(\S+)\s+(.*)$", line)
        if match and not line.lstrip().startswith("#"):
            counts[f"{match.group(2)} {match.group(3).strip()}"] += int(match.group(1))
    return counts


def split(counts: Counter) -> Counter:
    kinds: Counter = Counter()
    for where, n in counts.items():
        kinds[next((kind for kind, pattern in KINDS if re.search(pattern, where)), "other compute")] += n
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="perf.data files (perf record -F 2000)")
    ap.add_argument("--frequency", type=int, default=2000, help="perf record's -F (samples per second)")
    args = ap.parse_args()
    splits = {path: split(samples(path)) for path in args.files}
    order = [kind for kind, _ in KINDS] + ["other compute"]
    print("| kind | " + " | ".join(f"{path}: share, s" for path in args.files) + " |")
    print("|---|" + "---|" * len(args.files))
    for kind in order:
        cells = [f"{100 * s[kind] / sum(s.values()):.1f} %, {s[kind] / args.frequency:.2f}" for s in splits.values()]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("| all samples | " + " | ".join(f"{sum(s.values()) / args.frequency:.2f} s" for s in splits.values()) + " |")


if __name__ == "__main__":
    main()
