"""Peak RSS of one harness-shaped decoding process (base, 64 sentences, 30 forced tokens, 1 thread), code from REPO."""
import sys, resource, os
repo = sys.argv[1]
sys.path.insert(0, "/work/shared/bench/peers"); sys.path.insert(0, repo)
import torch, common; torch.set_num_threads(1)
cfg = common.get_config("base")
kind, beam = sys.argv[2], int(sys.argv[3])
mod = {"fp32": "aiayn_adapter", "int8": "aiayn_int8"}[kind]
Adapter = common.load_adapter(f"{repo}/benchmarks/peers/{mod}.py")
a = Adapter(cfg); m = a.build(); m.eval()
src = a.prepare_src(common.make_src_batch(cfg.vocab, 64))
with torch.inference_mode():
    for i in range(3):
        a.generate(m, src, beam, 30, 0.6)
import aiayn
print(f"{'new' if repo == '/work/main' else 'old'} {kind} beam {beam}: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:,.0f} MB ({aiayn.__file__})")
