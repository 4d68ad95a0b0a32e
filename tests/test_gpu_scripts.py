"""The GPU scripts in their CPU smoke mode: what a lent GPU runs must run in one go, so its parts are run here first
on tiny shapes (benchmarks/gpu/all.sh with SMOKE=1, benchmarks/gpu/decode.py --cpu)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_decode_benchmark_cpu_smoke(tmp_path):
    """decode.py --cpu: every engine decodes the same forced-length batches; aiayn eager and graphed give the same
    words (HF where transformers is installed), and every cell has its speed."""
    pytest.importorskip("transformers")
    out = tmp_path / "decode.jsonl"
    subprocess.run([sys.executable, "-m", "benchmarks.gpu.decode", "--cpu", "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=300)
    cells = [r for r in records(out) if r["what"] == "decode"]
    assert {(r["engine"], r["beam"], r["sents"]) for r in cells} == {
        (e, b, n) for e in ("aiayn", "aiayn graphed", "hf") for b in (1, 4) for n in (2, 4)}
    assert all("error" not in r and r["sent_s"] > 0 and r["out_tokens"] == 5 for r in cells)
    graphed = [r for r in cells if r["engine"] == "aiayn graphed"]
    assert all(r["same_as_aiayn"] == r["sents"] for r in graphed)


def test_gpu_sitting_script_cpu_smoke(tmp_path):
    """all.sh's train part with SMOKE=1 (aiayn's cells alone, tiny, on the CPU): each of its commands runs with the
    flags the lease gives it and writes its records (a flag one of them does not know would leave no record)."""
    pytest.importorskip("transformers")
    env = {**os.environ, "SMOKE": "1", "OUT": str(tmp_path), "PY": sys.executable, "TRAIN_STEPS": "1"}
    subprocess.run(["bash", "benchmarks/gpu/all.sh", "train"], cwd=REPO, env=env, check=True,
                   capture_output=True, text=True, timeout=600)
    train = [r for r in records(tmp_path / "gpu_train.jsonl") if r["what"] == "train"]
    calls = [r for r in records(tmp_path / "gpu_train.jsonl") if r["what"] == "device"]
    assert len(calls) == 5 and len(train) == 5 and all("error" not in r and r["impl"] == "aiayn" for r in train)
    assert all("tf32" in r for r in train)
    again = subprocess.run(["bash", "benchmarks/gpu/all.sh", "train"], cwd=REPO, env=env, check=True,
                           capture_output=True, text=True, timeout=600).stdout
    assert again.count("done earlier") == 5 and len(records(tmp_path / "gpu_train.jsonl")) == 2 * 5 + 5


def test_peers_tf32_is_for_fp32_only():
    """--tf32 with a 16-bit dtype is a one-line usage error, not a silent no-op."""
    r = subprocess.run([sys.executable, "-m", "benchmarks.gpu.peers", "--cpu", "--dtype", "bf16", "--tf32"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--tf32 is for --dtype fp32" in r.stderr and "Traceback" not in r.stderr


# Kernel names as torch.profiler reported them on an H200 and H100 (benchmarks/results/gpu-h200), with the operators
# that launched them, innermost first.
KERNELS = [
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNN", ["aten::mm", "AddmmBackward0"], "matrix products"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128>>",
     ["aten::_flash_attention_backward"], "attention"),
    ("triton_red_fused__log_softmax__log_softmax_backward_data__to_copy_add_0", ["CompiledFunctionBackward"],
     "softmax and loss"),
    ("triton_per_fused_add_native_dropout_native_layer_norm_3", [], "layer norm"),  # fused: the first kind named
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
     ["aten::copy_", "aten::_to_copy", "aten::to", "ToCopyBackward0"], "casts"),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t>>",
     ["aten::sum", "AddmmBackward0"], "matrix products"),  # the bias gradient of a linear layer
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
     ["aten::add"], "elementwise"),  # a residual add
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor>>",
     ["aten::mul", "aten::native_dropout_backward", "NativeDropoutBackward0"], "dropout"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
     ["aten::native_layer_norm"], "layer norm"),
    ("void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>",
     ["aten::_fused_adam_", "Optimizer.step#Adam.step"], "optimizer"),
    ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
     ["aten::index_select", "aten::embedding"], "other"),
    ("", ["autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0"], "attention"),
    ("", ["aten::random_", "aten::random_"], "dropout"),  # aiayn.fast.Dropout's mask on a CPU
]


@pytest.mark.parametrize("kernel,ops,kind", KERNELS, ids=[k[2] + "-" + str(i) for i, k in enumerate(KERNELS)])
def test_kind_of_a_kernel(kernel, ops, kind):
    from benchmarks.gpu.profile_step import kind_of

    assert kind_of(kernel, ops) == kind


def test_kinds_of_a_cpu_profile_add_up_to_its_total():
    """Every operator's own time lands in exactly one kind: the kinds add up to the profile's total, and a training
    step of the tiny model has time in each kind that runs on a CPU."""
    from torch.profiler import ProfilerActivity, profile

    from aiayn.config import ModelConfig
    from aiayn.model import Transformer
    from aiayn.training.losses import TrainingObjective
    from benchmarks.gpu.profile_step import KINDS, by_kind, timed_work
    from benchmarks.workloads import train_batch

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=64)).train()
    objective, opt = TrainingObjective(model), torch.optim.Adam(model.parameters())
    src, tgt_in, tgt_out, _, _ = train_batch(64, 64, lo=5, hi=9)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            objective(src, tgt_in, tgt_out)[0].backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    kinds = by_kind(timed_work(prof.events()), steps=2)
    assert list(kinds) == list(KINDS)
    total_ms = prof.key_averages().self_cpu_time_total / 1e3 / 2
    assert sum(c["ms"] for c in kinds.values()) == pytest.approx(total_ms, rel=1e-6)
    for kind in ("matrix products", "attention", "softmax and loss", "layer norm", "dropout", "optimizer"):
        assert kinds[kind]["ms"] > 0 and kinds[kind]["count"] > 0 and kinds[kind]["top"], kind


def test_timed_work_of_gpu_kernels_counts_each_kernel_once():
    """On a GPU each kernel is counted once, under the operator that launched it (profiler events built by hand:
    an aten::add launching one kernel inside NativeLayerNormBackward0, and a kernel no operator launched)."""
    from types import SimpleNamespace as E

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import Kernel

    from benchmarks.gpu.profile_step import by_kind, timed_work

    def kernel(name, start, end):
        return E(name=name, device_type=DeviceType.CUDA, time_range=E(start=start, end=end))

    outer = E(name="NativeLayerNormBackward0", device_type=DeviceType.CPU, cpu_parent=None, kernels=[])
    add = E(name="aten::add", device_type=DeviceType.CPU, cpu_parent=outer, kernels=[Kernel("elementwise_add", 0, 5.0)])
    events = [outer, add, kernel("elementwise_add", 10.0, 15.0), kernel("nvjet_sm90_tst_128x256", 20.0, 27.0)]
    work = timed_work(events)
    assert sorted(work) == [("elementwise_add", ["aten::add", "NativeLayerNormBackward0"], 5.0),
                            ("nvjet_sm90_tst_128x256", [], 7.0)]
    kinds = by_kind(work, steps=1)
    assert kinds["layer norm"]["ms"] == pytest.approx(0.005) and kinds["matrix products"]["ms"] == pytest.approx(0.007)


def test_profile_step_cpu_smoke(tmp_path):
    """profile_step.py --cpu: one cell, its record (every kind, a wall time) and its text (the table by kind, then
    torch.profiler's)."""
    subprocess.run([sys.executable, "-m", "benchmarks.gpu.profile_step", "--cpu", "--out", str(tmp_path)], cwd=REPO,
                   check=True, capture_output=True, text=True, timeout=300)
    (rec,) = records(tmp_path / "profile.jsonl")
    assert rec["layout"] == "packed" and not rec["compile"] and rec["wall_ms_per_step"] > 0
    assert rec["kinds"]["matrix products"]["ms"] > 0
    text = (tmp_path / "profile-tiny-packed-eager.txt").read_text()
    assert "| matrix products |" in text and "torch.profiler, 2 steps" in text


def test_startup_is_extrapolated_from_checkpoint_times(tmp_path):
    """HF's checkpoints at steps 200, 400, 600 written 30, 50 and 70 s after its process started: 10 steps/s, so
    step 0 came 10 s after the start."""
    from benchmarks.gpu.startup import report, startup_seconds

    assert startup_seconds([(70.0, 600), (30.0, 200), (50.0, 400)]) == pytest.approx(10.0)
    assert startup_seconds([(30.0, 200)]) is None
    start = 1_700_000_000.0
    (tmp_path / "hf.trained.json").write_text(json.dumps({"start": start, "end": start + 80}))
    for step, t in ((200, 30), (400, 50), (600, 70)):
        weights = tmp_path / "hf" / f"checkpoint-{step}" / "model.safetensors"
        weights.parent.mkdir(parents=True)
        weights.write_bytes(b"")
        os.utime(weights, (start + t, start + t))
    (row,) = report(tmp_path)
    assert row["system"] == "hf" and row["checkpoints"] == 3 and row["first_checkpoint_step"] == 200
    assert row["startup_s"] == pytest.approx(10.0) and row["steps_per_s"] == pytest.approx(10.0)


@pytest.mark.slow
def test_lease_script_keeps_to_its_deadline_and_resumes(copy_data, tmp_path):
    """lease.sh with SMOKE=1: a step whose estimate does not fit the time left is not started; the next call skips
    what is done (aiayn's time-to-BLEU training is not repeated) and does the rest; every call leaves all the results
    so far in $OUT/lease.tar.gz."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import tarfile

    inputs, state = tmp_path / "inputs", tmp_path / "state"
    inputs.mkdir()
    (inputs / "multi30k").symlink_to(copy_data)
    env = {**os.environ, "SMOKE": "1", "PY": sys.executable, "LEASE_STATE": str(state), "LEASE_INPUTS": str(inputs),
           "LEASE_STEPS": "profile ttb-aiayn ttb", "COST_TTB": "100000", "HF_HOME": str(tmp_path / "hf-home"),
           "OMP_NUM_THREADS": "1"}

    def call(out, **kw):
        r = subprocess.run(["bash", "benchmarks/gpu/lease.sh"], cwd=REPO, env={**env, "OUT": str(out), **kw},
                           capture_output=True, text=True, timeout=900)
        with tarfile.open(out / "lease.tar.gz") as tar:
            names = tar.getnames()
        return r.stdout, names

    first, names = call(tmp_path / "out1")
    assert "== ttb: not started" in first and "not done yet: ttb" in first, first
    assert "out/profile/profile.jsonl" in names and "out/ttb_results.jsonl" in names
    assert {r["system"] for r in records(state / "out" / "ttb_results.jsonl")} == {"aiayn"}
    trained = (state / "ttb" / "aiayn.trained.json").read_text()

    second, names = call(tmp_path / "out2", COST_TTB="0")
    assert "== profile: done in an earlier call" in second and "== ttb-aiayn: done in an earlier call" in second
    assert "every step done" in second, second
    assert (state / "ttb" / "aiayn.trained.json").read_text() == trained  # aiayn was not trained again
    assert {r["system"] for r in records(state / "out" / "ttb_results.jsonl")} == {"aiayn", "hf"}
    assert {r["system"] for r in records(state / "out" / "ttb_startup.jsonl")} == {"aiayn", "hf"}
    assert "out/ttb_startup.jsonl" in names and "out/significance-hf.txt" in names


def test_gpu_userpath_part_cpu_smoke(copy_data, tmp_path):
    """all.sh's userpath part with SMOKE=1 on a tiny run: `aiayn translate` with the fixed-shape and the eager search,
    fp32 and bf16, and HF generate on the exported model, each a whole process timed, and a BLEU line for each; the
    two searches give the same file."""
    pytest.importorskip("transformers")
    import shutil

    from helpers import save_run, tiny_model

    from aiayn.data import Vocab

    qs = tmp_path / "qs"
    vocab_model = copy_data / "vocab.model"
    save_run(tiny_model(len(Vocab.load(vocab_model)), eos_bias=4.0), vocab_model, qs / "run")
    (qs / "data").mkdir()
    for name in ("test.src.txt", "test.tgt.txt"):
        lines = (copy_data / name).read_text().splitlines()[:6]
        (qs / "data" / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "PY": sys.executable, "QS_DIR": str(qs)}
    subprocess.run(["bash", "benchmarks/gpu/all.sh", "userpath"], cwd=REPO, env=env, check=True, capture_output=True,
                   text=True, timeout=600)
    report = (out / "userpath.txt").read_text()
    assert "failed" not in report, report
    for label in ("aiayn translate --precision fp32 --search-impl fixed", "aiayn translate --precision bf16 "
                  "--search-impl eager", "HF generate fp32", "HF generate bf16"):
        assert f"{label}: " in report and " s, " in report.split(f"{label}: ")[1].splitlines()[0]
    assert report.count("BLEU userpath-") == 6
    fixed, eager = (out / f"userpath-aiayn-fp32-{impl}.hyp" for impl in ("fixed", "eager"))
    assert fixed.read_text() == eager.read_text() and len(fixed.read_text().splitlines()) == 6
    shutil.rmtree(qs)



def test_gpu_distill_part_cpu_smoke(copy_data, tmp_path):
    """all.sh's distill part with SMOKE=1 on a tiny run and the copy task's prepared data: `aiayn distill` runs every
    stage with the flags the lease gives it (its recipe comes back), then the teacher (beam 4) and the student
    (greedy) translate the test set as whole processes, each with its BLEU line."""
    from helpers import save_run, tiny_model

    from aiayn.data import Vocab

    qs = tmp_path / "qs"
    save_run(tiny_model(len(Vocab.load(copy_data / "vocab.model")), eos_bias=4.0), copy_data / "vocab.model",
             qs / "run")
    out = tmp_path / "out"
    env = {**os.environ, "SMOKE": "1", "OUT": str(out), "PY": sys.executable, "QS_DIR": str(qs),
           "DISTILL_DATA": str(copy_data), "DISTILL_OUT": str(tmp_path / "student"), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "benchmarks/gpu/all.sh", "distill"], cwd=REPO, env=env, check=True, capture_output=True,
                   text=True, timeout=600)
    recipe = json.loads((out / "distill-recipe.json").read_text())
    assert set(recipe["stages"]) >= {"teacher", "data", "student", "int8"}, recipe.get("stages")
    report = (out / "distill.txt").read_text()
    assert "failed" not in report, report
    for who, beam in (("teacher", 4), ("student", 1)):
        assert f"aiayn translate {who} --beam {beam}: " in report and f"BLEU distill-{who}: " in report
        assert len((out / f"distill-{who}.hyp").read_text().splitlines()) == 40

def test_realtext_benchmark_smoke(copy_data, tmp_path):
    """benchmarks/e2e/realtext.py end to end on a tiny run and 4 lines, one round, one and two threads: every cell
    (aiayn translate, in process with both stopping rules, CTranslate2 direct, at two threads also with inter_threads,
    aiayn --engine ct2) runs and the tables have their rows; a second call resumes (runs nothing again)."""
    pytest.importorskip("ctranslate2")
    from helpers import save_run, tiny_model

    from aiayn.data import Vocab

    run = save_run(tiny_model(len(Vocab.load(copy_data / "vocab.model")), eos_bias=4.0), copy_data / "vocab.model",
                   tmp_path / "run")
    for name in ("src", "ref"):
        lines = (copy_data / f"test.{'src' if name == 'src' else 'tgt'}.txt").read_text().splitlines()[:4]
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "benchmarks.e2e.realtext", "--run", str(run), "--src", str(tmp_path / "src.txt"),
           "--ref", str(tmp_path / "ref.txt"), "--threads", "1", "2", "--precisions", "fp32", "--rounds", "1",
           "--engine-ct2", "--out", str(tmp_path / "out")]
    first = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=300).stdout
    cells = records(tmp_path / "out" / "cells.jsonl")
    systems = {"aiayn", "aiayn (in)", "aiayn (in), paper's rule", "ct2", "aiayn --engine ct2"}
    assert {c["system"] for c in cells if c["threads"] == 1} == systems
    assert {c["system"] for c in cells if c["threads"] == 2} == systems | {"ct2, inter"}
    assert all(c["wall_s"] > 0 and c["peak_mb"] > 0 for c in cells)
    row = next(line for line in first.splitlines() if line.startswith("| 1 | fp32 | float32 |"))
    assert "4 / 4" in row  # aiayn's lines against its own fp32 output
    inter = first[first.index("CTranslate2 with inter_threads"):]
    assert inter.count("| 2 | fp32 | float32 |") == 1 and "| 1 |" not in inter
    again = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    assert len(records(tmp_path / "out" / "cells.jsonl")) == len(cells) and "round 0" not in again.stderr
