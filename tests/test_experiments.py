"""The paper's tables as commands (aiayn.experiments). Table 3: the scaled presets, Spearman's rho by hand, and a
tiny run of three rows end to end (skipping finished rows, resuming an interrupted one in a `--jobs` subprocess,
merging folders, calibrating --minutes). Table 2: the cost arithmetic against the paper and torch's FLOP counter.
Table 1: its layers against independent implementations, its FLOPs against the closed forms, its path lengths and
graph depths against what can be worked out by hand."""

import json
import math
import shutil

import pytest
import torch

from aiayn.cli import main
from aiayn.config import ModelConfig
from aiayn.errors import DataError, UsageError
from aiayn.experiments import table1
from aiayn.experiments.paper import TABLE2_COST, TABLE2_HOURS, TABLE3
from aiayn.experiments.table3 import report, rows, runner
from aiayn.experiments.table3.plan import finished, make_plan, trained_steps
from aiayn.experiments.table3.report import load_results, spearman
from aiayn.experiments.table3.score import train_row
from aiayn.model import Transformer, count_parameters

# --- the rows ----------------------------------------------------------------------------------------------


def test_rows_are_table3_in_the_paper_order():
    assert len(rows.ROWS) == 20 and set(rows.ROWS) == set(TABLE3)
    assert rows.paper_row("C5") == {"group": "(C)", "params_M": 168, "ppl": 4.66, "bleu": 26.0, "steps": "100K"}
    assert rows.paper_row("big")["steps"] == "300K"
    assert rows.parse_rows("D1, base,A1") == ["base", "A1", "D1"]  # the paper's order whatever the order given
    with pytest.raises(UsageError, match="unknown row"):
        rows.parse_rows("base,Z9")


def test_scaled_preset_divides_the_widths_and_keeps_the_rest():
    base = rows.scaled_preset("base", 4)
    assert (base.d_model, base.d_ff, base.d_k, base.d_v, base.n_heads, base.n_enc_layers) == (128, 512, 16, 16, 8, 6)
    a1 = rows.scaled_preset("A1", 4)  # h = 1, d_k = d_v = 512 in the paper
    assert (a1.n_heads, a1.d_k, a1.d_v) == (1, 128, 128)
    big = rows.scaled_preset("big", 4)
    assert (big.d_model, big.d_ff, big.n_heads, big.d_k, big.dropout) == (256, 1024, 16, 16, 0.3)
    assert rows.scaled_preset("C3", 8).n_dec_layers == 8
    assert rows.scaled_preset("D4", 4).label_smoothing == 0.2
    assert rows.scaled_preset("E", 4).positional == "learned"
    assert rows.scaled_preset("A4", 32).d_k == 1  # 16 / 32 rounds to 0: every width stays >= 1
    assert rows.scaled_preset("C4", 1) == ModelConfig.preset("C4")
    with pytest.raises(UsageError):
        rows.scaled_preset("base", 0)


# --- Spearman by hand --------------------------------------------------------------------------------------


def test_average_ranks_share_ties():
    assert report.average_ranks([10, 30, 20]) == [1, 3, 2]
    # the two 1s take ranks 1 and 2 -> 1.5 each; 3, 4, 5 follow
    assert report.average_ranks([3, 1, 4, 1, 5]) == [3, 1.5, 4, 1.5, 5]
    assert report.average_ranks([7, 7, 7]) == [2, 2, 2]


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # no ties: rho = 1 - 6 * sum d^2 / (n (n^2 - 1)); ranks of y are 2, 1, 4, 3 -> d^2 sum 4 -> 1 - 24/60 = 0.6
    assert spearman([1, 2, 3, 4], [5, 1, 9, 7]) == pytest.approx(0.6)
    # ties: x ranks 1.5, 1.5, 3, 4 against 1, 2, 3, 4: Pearson of those ranks, worked out by hand:
    # x - mean = -1, -1, 0.5, 1.5; y - mean = -1.5, -0.5, 0.5, 1.5; sxy = 1.5 + 0.5 + 0.25 + 2.25 = 4.5
    # sxx = 1 + 1 + 0.25 + 2.25 = 4.5; syy = 5 -> rho = 4.5 / sqrt(4.5 * 5) = 0.9487
    assert spearman([2, 2, 5, 9], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))  # a constant side has no ranking
    scipy_stats = pytest.importorskip("scipy.stats")  # an independent implementation, where installed
    x, y = [4.92, 5.29, 5.0, 4.91, 5.01, 5.16], [3.1, 3.3, 3.3, 3.0, 3.2, 3.25]
    assert spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic)


def test_steps_for_budget():
    # 4 rows of 1/8, 1/8, 1/8, 1/4 s/step: 5/8 s per step of all rows
    assert runner.steps_for_budget([0.125, 0.125, 0.125, 0.25], 10, 1) == 960  # 600 s / 0.625
    assert runner.steps_for_budget([0.125, 0.125, 0.125, 0.25], 10, 2) == 1920  # 600 s / 0.3125
    # on 4 slots the slowest row alone sets the pace: 600 s / 0.25
    assert runner.steps_for_budget([0.125, 0.125, 0.125, 0.25], 10, 4) == 2400
    assert runner.steps_for_budget([0.125, 0.125, 0.125, 0.25], 1, 1) == 90  # 96, rounded down to tens


# --- a tiny run of three rows end to end -------------------------------------------------------------------

TINY = {"max_tokens": 256, "warmup": 20, "lr_factor": 2.0, "save_every_minutes": 0.0, "save_every_steps": 10,
        "log_every": 5}
ROWS3 = ["base", "C1", "D3"]


@pytest.fixture(scope="module")
def tiny_table(copy_data, tmp_path_factory):
    """Three rows at scale 1/32 (d_model 16), 20 steps each, one after the other in this process."""
    out = tmp_path_factory.mktemp("table3") / "out"
    lines = []
    summary = runner.train_variations(copy_data, out, ROWS3, scale=32, steps=20, jobs=1, device="cpu", threads=1,
                                    train=TINY, say=lines.append)
    return out, summary, lines


def test_tiny_run_scores_every_row(tiny_table, copy_data):
    out, summary, lines = tiny_table
    assert summary["rows"] == ROWS3 and summary["steps"] == 20 and summary["scale"] == 32
    for name in ROWS3:
        r = json.loads((out / name / "result.json").read_text())
        assert r["steps"] == 20 and r["row"] == name
        cfg = rows.scaled_preset(name, 32).replace(vocab_size=120)  # the fixture's vocabulary
        assert r["model"] == cfg.to_dict()
        assert r["params"] == count_parameters(Transformer(cfg))
        # perplexity = exp(NLL per token); 20 steps already beat the uniform guess (PPL = the vocabulary, 120)
        assert r["dev_ppl"] == pytest.approx(math.exp(r["dev_nll_per_token"]))
        assert 1.0 < r["dev_ppl"] < 120
        assert 0.0 <= r["dev_bleu"] <= 100.0 and "tok:13a" in r["bleu_signature"]
        assert r["train_minutes"] > 0 and r["concurrent_jobs"] == 1
        # the dev curve saved while training (every 10 steps); its end is the scored checkpoint
        assert [p["step"] for p in r["dev_curve"]] == [10, 20]
        assert r["dev_curve"][-1]["dev_ppl"] == pytest.approx(r["dev_ppl"], rel=1e-5)
        assert r["data_sha256"] == json.loads((copy_data / "meta.json").read_text())["content_sha256"]
        assert r["machine"]["cpu"] and r["machine"]["torch"] == torch.__version__ and r["machine"]["gpu"] is None
        hyps = (out / name / "dev.hyp").read_text().splitlines()
        assert len(hyps) == len((copy_data / "valid.src.txt").read_text().splitlines())
        run = out / name / "run"
        assert not (run / "checkpoints").exists(), "checkpoints are deleted once the row is scored"
        assert (run / "log.jsonl").is_file()
    # the rows differ as the presets say: C1 has 2+2 layers instead of 6+6, D3 the same size as base
    params = {n: json.loads((out / n / "result.json").read_text())["params"] for n in ROWS3}
    assert params["C1"] < params["base"] == params["D3"]
    assert any(line.startswith("C1: step 20") for line in lines)


def test_tiny_run_writes_table_plot_and_rho(tiny_table):
    out, summary, _ = tiny_table
    text = (out / "table3.md").read_text()
    assert "| (C) | C1 | 2 |" in text  # the paper's layout: group, row, the paper's N where it differs from base
    assert "| 4.92 | 25.8 | 65M |" in text  # the paper's PPL, BLEU and params beside ours
    assert "| - | - | - | - |" in text  # rows not trained are listed, empty
    results = load_results(out)
    ours = [results[n]["dev_ppl"] for n in ROWS3]
    assert summary["spearman_ppl"] == pytest.approx(spearman([4.92, 6.11, 4.67], ours))
    assert f"dev PPL rho = {summary['spearman_ppl']:.3f}" in text
    assert (out / "table3.png").stat().st_size > 1000
    # how settled the ranking is: from the curves' point nearest 3/4 of the run (step 10 of 20) to the end
    settled = summary["settling"]
    assert settled["from_step"] == 10
    for n in ROWS3:
        assert settled["change"][n] == pytest.approx(results[n]["dev_ppl"] / results[n]["dev_curve"][0]["dev_ppl"] - 1)
    assert settled["rank_rho"] == pytest.approx(spearman([results[n]["dev_curve"][0]["dev_ppl"] for n in ROWS3], ours))
    assert "Over the last quarter (dev PPL at step 10 -> the end)" in text
    assert (out / "table3_curves.png").stat().st_size > 1000
    assert json.loads((out / "summary.json").read_text())["missing"] == [n for n in rows.ROWS if n not in ROWS3]


def test_finished_rows_are_skipped_and_options_must_match(tiny_table, copy_data):
    out, _, _ = tiny_table
    before = {n: (out / n / "result.json").stat().st_mtime_ns for n in ROWS3}
    lines = []
    runner.train_variations(None, out, ROWS3, jobs=1, device="cpu", threads=1, say=lines.append)  # options from plan
    assert {n: (out / n / "result.json").stat().st_mtime_ns for n in ROWS3} == before
    assert not any(": step" in line for line in lines)
    with pytest.raises(UsageError, match="steps 40"):
        runner.train_variations(copy_data, out, ROWS3, scale=32, steps=40, say=lines.append)
    with pytest.raises(UsageError, match="warmup"):
        runner.train_variations(copy_data, out, ROWS3, train={"warmup": 10}, say=lines.append)


def test_interrupted_row_resumes_in_a_subprocess_to_the_same_result_and_folders_merge(tiny_table, copy_data, tmp_path):
    out, _, _ = tiny_table
    other = tmp_path / "other"
    plan = make_plan(other, copy_data, 32, 20, None, TINY)
    assert train_row(other, plan, "C1", 10, "cpu", threads=1) is None  # stopped at step 10: not scored
    assert trained_steps(other, "C1") == 10 and not finished(other, "C1")
    # finished by a subprocess (--jobs > 1), which resumes the run where this process left it
    runner.train_variations(None, other, ["C1"], jobs=2, device="cpu", threads=1, say=lambda s: None)
    assert "step 20: saved" in (other / "C1" / "worker.log").read_text()
    steps = [json.loads(line)["step"] for line in (other / "C1" / "run" / "log.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == [5, 10, 15, 20]  # continued from step 10, not restarted
    resumed = json.loads((other / "C1" / "result.json").read_text())
    straight = json.loads((out / "C1" / "result.json").read_text())
    assert resumed["train_calls"] == 2
    assert resumed["dev_ppl"] == pytest.approx(straight["dev_ppl"], rel=1e-6)  # the trainer resumes exactly
    assert resumed["dev_bleu"] == pytest.approx(straight["dev_bleu"])

    # rows trained in two places merge by copying their folders
    merged = tmp_path / "merged"
    for src, name in ((out, "base"), (out, "D3"), (other, "C1")):
        shutil.copytree(src / name, merged / name)
    summary = report.report(merged, plot=False)
    assert summary["rows"] == ROWS3


def test_report_refuses_rows_trained_differently(tiny_table, tmp_path):
    out, _, _ = tiny_table
    mixed = tmp_path / "mixed"
    shutil.copytree(out / "base", mixed / "base")
    shutil.copytree(out / "C1", mixed / "C1")
    r = json.loads((mixed / "C1" / "result.json").read_text())
    (mixed / "C1" / "result.json").write_text(json.dumps({**r, "steps": 21}))
    with pytest.raises(ValueError, match="trained alike"):
        report.report(mixed, plot=False)


def test_cli_report(tiny_table, capsys):
    out, summary, _ = tiny_table
    assert main(["variations", "--out", str(out), "--report"]) == 0
    printed = capsys.readouterr().out
    assert f"dev PPL rho = {summary['spearman_ppl']:.3f}" in printed
    assert printed.rstrip().endswith(f"wrote {out}/table3.md and {out / 'table3.png'}")
    assert (out / "table3.png").is_file()


def test_cli_report_says_when_there_is_no_plot(tiny_table, capsys, monkeypatch):
    import aiayn.experiments.table3.report as report_module

    def no_matplotlib(*args, **kwargs):
        raise ImportError("No module named 'matplotlib'")
    monkeypatch.setattr(report_module, "plot_ppl", no_matplotlib)
    out, _, _ = tiny_table
    assert main(["variations", "--out", str(out), "--report"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("(no plot: matplotlib is not installed)")


def test_seconds_per_step_reads_the_second_half_of_the_newest_call(tmp_path):
    lines = [{"kind": "train", "step": 5, "elapsed_s": 1.0}, {"kind": "train", "step": 10, "elapsed_s": 2.0},
             {"kind": "valid", "step": 10, "loss": 3.0},
             {"kind": "train", "step": 15, "elapsed_s": 0.5}, {"kind": "train", "step": 20, "elapsed_s": 1.5},
             {"kind": "train", "step": 25, "elapsed_s": 2.5}, {"kind": "train", "step": 30, "elapsed_s": 3.5},
             {"kind": "train", "step": 35, "elapsed_s": 0.4}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    # the third call logged one line only: the second (elapsed restarts) from step 15 = 30 // 2 on counts,
    # (3.5 - 0.5) s / (30 - 15) steps
    assert runner.seconds_per_step(tmp_path) == pytest.approx(0.2)


def test_minutes_calibrates_then_trains_every_row_the_same_steps(copy_data, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "CALIBRATION_STEPS", 10)
    seen = {}

    def budget(step_seconds, minutes, jobs):  # the measured speed varies; the step count is checked above
        seen.update(step_seconds=step_seconds, minutes=minutes, jobs=jobs)
        return 20

    monkeypatch.setattr(runner, "steps_for_budget", budget)
    out = tmp_path / "out"
    summary = runner.train_variations(copy_data, out, ["C1", "D3"], scale=32, minutes=1.5, device="cpu", threads=1,
                                    train=TINY, dev_sentences=7, say=lambda s: None)
    assert seen["minutes"] == 1.5 and len(seen["step_seconds"]) == 2 and min(seen["step_seconds"]) > 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["steps"] == 20 and plan["minutes"] == 1.5 and plan["dev_sentences"] == 7
    assert "sacreBLEU (beam 4, alpha 0.6) of the first 7 dev sentences" in summary["text"]
    for name in ("C1", "D3"):
        assert json.loads((out / name / "result.json").read_text())["steps"] == 20
        assert len((out / name / "dev.hyp").read_text().splitlines()) == 7  # BLEU on the first 7 of 40 only
        steps = [json.loads(line)["step"] for line in (out / name / "run" / "log.jsonl").read_text().splitlines()
                 if json.loads(line)["kind"] == "train"]
        assert steps == [5, 10, 15, 20]  # the calibration's 10 steps were kept


# --- Table 2's cost arithmetic -----------------------------------------------------------------------------


def test_paper_cost_reproduces_table2():
    from aiayn.experiments.table2 import paper_cost

    # 12 h x 8 P100 x 9.5 TFLOPS = 3.3e18 (base); 3.5 days = 2.3e19 (big), as Table 2 prints them
    assert f"{paper_cost(TABLE2_HOURS['base'], 8, 9.5):.1e}" == f"{TABLE2_COST['base']:.1e}"
    assert f"{paper_cost(TABLE2_HOURS['big'], 8, 9.5):.1e}" == f"{TABLE2_COST['big']:.1e}"


def test_forward_flops_match_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    from aiayn.experiments.table2 import forward_flops

    # d_k != d_v and h * d_k != d_model: every width enters differently. (It also keeps attention on two matmuls,
    # which the counter sees; it counts torch's fused CPU attention kernel as 0.)
    cfg = ModelConfig.preset("tiny", vocab_size=60, d_model=64, d_ff=96, n_heads=4, d_k=8, d_v=12)
    model = Transformer(cfg).eval()
    src, tgt = torch.randint(4, 60, (1, 7)), torch.randint(4, 60, (1, 5))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(src, tgt)
    assert counter.get_total_flops() == forward_flops(cfg, 7, 5)


def test_run_cost_from_a_log(tmp_path, capsys):
    from aiayn.experiments.table2 import training_cost, training_flops_per_token

    cfg = ModelConfig.preset("base")
    (tmp_path / "config.json").write_text(json.dumps({"model": cfg.to_dict(), "train": {}, "data": "x",
                                                      "data_sha256": "", "vocab_sha256": ""}))
    speeds = [999.0, 50_000.0, 50_000.0, 60_000.0]  # the first line (warming up) is left out: median 50,000
    (tmp_path / "log.jsonl").write_text("".join(json.dumps({"kind": "train", "step": 10 * i, "tokens_per_s": s}) + "\n"
                                                for i, s in enumerate(speeds, 1)))
    c = training_cost(tmp_path, gpus=1, tflops=100.0, steps=1000, tokens_per_step=25_000)
    assert c["hours"] == pytest.approx(1000 * 25_000 / 50_000 / 3600)  # 500 s
    assert c["paper_way_flops"] == pytest.approx(500 * 1 * 100e12)
    assert c["model_flops"] == pytest.approx(1000 * 25_000 * training_flops_per_token(cfg))
    assert main(["table2", str(tmp_path), "--gpus", "1", "--tflops", "100", "--steps", "1000"]) == 0
    assert "50,000 target tokens/s -> 1,000 steps x 25,000 tokens take 0.1 h" in capsys.readouterr().out


# --- Table 1 measured ----------------------------------------------------------------------------------------


def test_loop_lstm_equals_torch_lstm():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 16, batch_first=True)
    x = torch.randn(2, 9, 16)
    expected, _ = lstm(x)
    torch.testing.assert_close(table1.LoopLSTM.like(lstm)(x), expected, rtol=1e-5, atol=1e-6)


def test_self_attention_equals_torch_multihead_attention():
    torch.manual_seed(0)
    d, h = 16, 4
    mha = torch.nn.MultiheadAttention(d, h, batch_first=True)
    ours = table1.SelfAttention(d, h)
    with torch.no_grad():
        ours.qkv.weight.copy_(mha.in_proj_weight)
        ours.qkv.bias.copy_(mha.in_proj_bias)
        ours.out.weight.copy_(mha.out_proj.weight)
        ours.out.bias.copy_(mha.out_proj.bias)
    x = torch.randn(2, 7, d)
    torch.testing.assert_close(ours(x), mha(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-6)


def test_restricted_attention_is_local_and_full_when_r_covers_everything():
    torch.manual_seed(0)
    n, d = 12, 8
    q, k, v = torch.randn(3, 1, n, d).unbind(0)
    # a neighbourhood wider than the sequence is plain attention
    torch.testing.assert_close(table1.attention_core(q, k, v, 2, r=2 * n), table1.attention_core(q, k, v, 2))
    # with r = 4 (|i - j| <= 2), changing key/value 9 changes outputs 7..11 only
    k2, v2 = k.clone(), v.clone()
    k2[0, 9] += 1.0
    v2[0, 9] += 1.0
    changed = (table1.attention_core(q, k, v, 2, r=4) - table1.attention_core(q, k2, v2, 2, r=4)).abs().sum(-1)[0] > 0
    assert changed.nonzero().flatten().tolist() == [7, 8, 9, 10, 11]


@pytest.mark.parametrize("kind", ["self-attention", "self-attention core", "recurrent", "convolutional", "restricted"])
def test_counted_flops_equal_the_closed_forms(kind):
    n, d, r = 23, 16, 6  # 23: the last block of r / 2 = 3 queries is padded
    layer = table1.make_layer(kind, d, r, timing=False)
    assert table1.count_flops(layer, n, d) == table1.closed_form_flops(kind, n, d, r=r)


def test_path_lengths_by_hand():
    n = 16
    assert table1.path_length("self-attention", n) == 1  # every position attends to every other
    assert table1.path_length("convolutional", n) == 15  # a centred k = 3 kernel moves one position per layer
    assert table1.path_length("convolutional (dilated)", n) == 3  # causal, dilations 1, 3, 9 reach 2 + 6 + 18 >= 15
    assert table1.path_length("restricted", n, r=8) == 4  # |i - j| <= 4 per layer: ceil(15 / 4)
    assert table1.path_length("recurrent", n) == 16  # x_0 enters at step 0, y_15 leaves at step 15


def test_sequential_operations_constant_or_linear_in_n():
    depth = {kind: [table1.graph_depth(table1.make_layer(kind, 8, 4, timing=False), n, 8) for n in (4, 8, 16)]
             for kind in table1.KINDS}
    for kind in ("self-attention", "convolutional", "restricted"):
        assert depth[kind][0] == depth[kind][1] == depth[kind][2], kind
    a, b, c = depth["recurrent"]
    assert c - b == 2 * (b - a) > 0  # the same number of operations per recurrent step: linear in n


def test_fit_and_crossover_by_hand():
    assert table1.fit_exponent([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)
    # a = n^2 against b = 8 n: a overtakes b at n = 8; log-log interpolation between 4 and 16 finds it exactly
    assert table1.crossover([4, 16], [16, 256], [32, 128]) == pytest.approx(8.0)
    assert table1.crossover([4, 16], [1, 2], [3, 4]) is None


def test_cli_measures_a_quick_table(tmp_path, capsys):
    args = ["--quick", "--d", "32", "--r", "8", "--max-n", "64", "--fit-from", "16"]
    assert main(["table1", *args, "--json", str(tmp_path / "t1.json"), "--plot", str(tmp_path / "t1.png")]) == 0
    res = json.loads((tmp_path / "t1.json").read_text())
    assert res["ns"] == [16, 32, 64] and res["path_ns"] == [8, 16]
    assert res["flops_exponent"]["recurrent"] == pytest.approx(1.0)
    assert res["flops_exponent"]["self-attention core"] == pytest.approx(2.0)
    assert res["crossover_flops"] == pytest.approx(64.0)  # 8nd^2 + 4n^2d = 16nd^2 at n = 2d
    out = capsys.readouterr().out
    assert "| recurrent | O(n d^2) |" in out and math.isfinite(res["time_exponent"]["self-attention"])
    assert (tmp_path / "t1.png").stat().st_size > 1000


# --- the seed noise: replicas ----------------------------------------------------------------------------


def test_replicas_parse_and_keep_their_row():
    assert rows.parse_rows("C1,base@seed3,base,base@seed2") == ["base", "base@seed2", "base@seed3", "C1"]
    assert rows.parse_rows("all,base@seed2") == ["base", "base@seed2", *rows.ROWS[1:]]
    assert rows.parse_rows("all") == list(rows.ROWS) == rows.parse_rows(None)
    assert rows.row_of("base@seed2") == "base" and rows.replica_seed("base@seed2") == 2
    assert rows.replica_seed("base") is None
    assert rows.scaled_preset("C1@seed2", 4) == rows.scaled_preset("C1", 4)
    assert rows.paper_row("C5@seed7") == rows.paper_row("C5")
    with pytest.raises(UsageError, match="seed"):
        rows.parse_rows("base@seedX")
    with pytest.raises(UsageError, match="unknown"):
        rows.parse_rows("Z9@seed2")


def test_backbone_options_apply_to_every_row_and_are_part_of_the_plan(copy_data, tmp_path):
    out = tmp_path / "pre"
    summary = runner.train_variations(copy_data, out, ["C1"], scale=32, steps=20, jobs=1, device="cpu", threads=1,
                                    train=TINY, backbone={"norm_first": True, "init": "fairseq"}, say=lambda s: None)
    r = json.loads((out / "C1" / "result.json").read_text())
    assert r["model"]["norm_first"] is True and r["model"]["init"] == "fairseq"
    assert r["model"]["n_enc_layers"] == 2  # the row's own difference stays
    assert r["backbone"] == {"norm_first": True, "init": "fairseq"}
    assert "every row with fairseq initialization, pre-norm" in (out / "table3.md").read_text()
    assert summary["rows"] == ["C1"]
    plan = make_plan(out)
    assert plan.model_config("big").norm_first and plan.model_config("big").d_model == 1024 // 32
    with pytest.raises(UsageError, match="norm_first False"):  # the plan's backbone holds for later calls
        make_plan(out, backbone={"norm_first": False})
    make_plan(out, backbone={"norm_first": True})  # the same again is fine
    with pytest.raises(UsageError, match="not a backbone option"):
        make_plan(tmp_path / "bad", copy_data, backbone={"d_model": 8})
    # an older plan (no backbone saved) reads as the paper's post-norm
    old = json.loads((out / "plan.json").read_text())
    del old["backbone"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "plan.json").write_text(json.dumps(old))
    assert make_plan(tmp_path / "old").model_config("base").norm_first is False
    # the flags: given -> in the plan; not given -> None (the plan's, or the paper's)
    from aiayn.cli import build_parser

    args = build_parser().parse_args(["variations", "--out", "o", "--norm-first", "--init", "fairseq"])
    assert (args.norm_first, args.init) == (True, "fairseq")
    args = build_parser().parse_args(["variations", "--out", "o"])
    assert (args.norm_first, args.init) == (None, None)


def test_settling_by_hand():
    def row(final, curve):
        return {"steps": 100, "dev_ppl": final, "dev_curve": [{"step": s, "dev_ppl": p} for s, p in curve]}

    results = {"base": row(5.0, [(50, 8.0), (70, 7.0), (80, 5.5), (100, 5.0)]),
               "C1": row(6.6, [(50, 7.0), (70, 6.5), (80, 6.0), (100, 6.6)])}
    settled = report.settling(results)
    assert settled["from_step"] == 70  # nearest to 75 of the points in [50, 100); a tie goes to the earlier one
    assert settled["change"] == pytest.approx({"base": 5.0 / 7.0 - 1, "C1": 6.6 / 6.5 - 1})
    assert settled["rank_rho"] == pytest.approx(-1.0)  # base was behind C1 at step 70 and is ahead at the end
    results["C1"]["dev_curve"] = [p for p in results["C1"]["dev_curve"] if p["step"] != 70]
    assert report.settling(results) is None  # C1 has no dev PPL at step 70
    assert report.settling({"base": row(5.0, [(40, 9.0), (100, 5.0)])}) is None  # nothing in the second half


def test_resolvable_rows_by_hand():
    # paper PPLs: big 4.33, C5 4.66, D3 4.67, C3 4.88, A3 4.91, base 4.92, E 4.92, C1 6.11. With a 2 % noise, taken
    # from the lowest: big; C5 (> 4.33 x 1.02 = 4.42); D3 dropped (<= 4.66 x 1.02 = 4.75); C3 (> 4.75); A3, base, E
    # dropped (<= 4.88 x 1.02 = 4.98); C1.
    names = ["base", "A3", "C1", "C3", "C5", "D3", "E", "big"]
    assert report.resolvable(names, 0.02) == ["C1", "C3", "C5", "big"]  # in the paper's order
    assert report.resolvable(names, 0.0) == ["base", "A3", "C1", "C3", "C5", "D3", "big"]  # E ties base: dropped
    assert report.resolvable(names, 10.0) == ["big"]


def test_resolvable_sets_by_hand():
    # paper PPLs: big 4.33, C5 4.66, D3 4.67, C3 4.88, C1 6.11. With a 2 % noise C5 and D3 cannot be told apart
    # (4.66 x 1.02 = 4.75 > 4.67); C3 is apart from both (4.67 x 1.02 = 4.76 < 4.88): the largest sets hold 4 rows,
    # with C5 or with D3.
    names = ["C1", "C3", "C5", "D3", "big"]
    assert report.resolvable_sets(names, 0.02) == [["C1", "C3", "C5", "big"], ["C1", "C3", "D3", "big"]]
    assert report.resolvable(names, 0.02) in report.resolvable_sets(names, 0.02)  # the chain is one of them
    assert report.resolvable_sets(names, 0.0) == [names]  # all apart: one set, in the paper's order
    assert sorted(report.resolvable_sets(names, 10.0)) == [[n] for n in sorted(names)]  # none apart: one row each


def test_resolvable_pairs_by_hand():
    # paper PPLs: big 4.33, C5 4.66, D3 4.67, C1 6.11. With a 2 % noise, C5-D3 (0.2 % apart) is no pair; the other
    # five are. Ours put D3 ahead of big and C1 ahead of C5: two of the five reversed.
    ours = {"big": 2.0, "C5": 4.0, "D3": 1.0, "C1": 3.0}
    pairs = report.resolvable_pairs({n: {"dev_ppl": p} for n, p in ours.items()}, 0.02)
    assert pairs == {"pairs": 5, "agree": 3, "reversed": [("big", "D3"), ("C5", "C1")]}
    assert "5 pairs" in report.pairs_text(pairs) and "3 (60 %)" in report.pairs_text(pairs)
    assert report.resolvable_pairs({n: {"dev_ppl": p} for n, p in ours.items()}, 10.0)["pairs"] == 0


def test_without_each_group_by_hand():
    # paper PPLs: big 4.33, C5 4.66, C3 4.88, base 4.92, A4 5.01, A1 5.29, C1 6.11. Ours in the paper's order except
    # the (A) rows, which come out swapped and best: removing (A) leaves a perfect ranking.
    ours = {"big": 1.0, "C5": 2.0, "C3": 3.0, "base": 4.0, "C1": 9.0, "A1": 0.5, "A4": 0.6}
    results = {n: {"dev_ppl": p, "dev_bleu": -p} for n, p in ours.items()}
    groups = report.without_each_group(results)
    assert list(groups) == ["(C)", "(A)"]  # the groups in the order their rows came; base and big are no group
    assert groups["(A)"]["rows"] == 5 and groups["(A)"]["spearman_ppl"] == pytest.approx(1.0)
    assert groups["(A)"]["spearman_bleu"] == pytest.approx(report.spearman([26.4, 26.0, 25.5, 25.8, 23.7],
                                                                           [-1, -2, -3, -4, -9]))
    assert groups["(C)"]["rows"] == 4  # big, base, A1, A4: A1 and A4 ahead of big and base, and swapped
    assert groups["(C)"]["spearman_ppl"] == pytest.approx(report.spearman([4.33, 4.92, 5.29, 5.01], [1, 4, .5, .6]))
    assert groups["(C)"]["spearman_ppl"] < 0
    assert "without (A): 1.000 (5 rows)" in report.without_text(groups)
    # with a 2 % noise C3 (4.88) and base (4.92) cannot be told apart: two sets of 4, big C5 C3|base C1, both in order
    with_noise = report.without_each_group(results, 0.02)["(A)"]["resolvable_sets"]
    assert with_noise == {"sets": 2, "rows": 4, "min": 1.0, "max": 1.0, "median": 1.0, "at_least_0.8": 2}


def test_replica_trains_at_its_seed_and_the_report_gives_the_noise(tiny_table, copy_data, tmp_path):
    out, _, _ = tiny_table
    noisy = tmp_path / "noisy"
    for name in ROWS3:
        shutil.copytree(out / name, noisy / name)
    shutil.copy(out / "plan.json", noisy / "plan.json")
    lines = []
    summary = runner.train_variations(None, noisy, ["base@seed5"], jobs=1, device="cpu", threads=1, say=lines.append)
    r = json.loads((noisy / "base@seed5" / "result.json").read_text())
    base = json.loads((noisy / "base" / "result.json").read_text())
    assert r["seed"] == 5 and r["of"] == "base" and base["seed"] == 1 and r["model"] == base["model"]
    assert r["dev_ppl"] != base["dev_ppl"]  # another seed, another model
    assert summary["rows"] == ROWS3 and summary["replicas"] == ["base@seed5"]  # the table's rows stay the same
    spread = max(r["dev_ppl"], base["dev_ppl"]) / min(r["dev_ppl"], base["dev_ppl"]) - 1
    assert summary["noise"]["relative"] == pytest.approx(spread)
    assert summary["noise"]["rows"]["base"]["ppl_by_seed"] == {1: base["dev_ppl"], 5: r["dev_ppl"]}
    assert summary["resolvable_rows"] == report.resolvable(ROWS3, spread)
    text = (noisy / "table3.md").read_text()
    assert f"seed 5: {r['dev_ppl']:.2f}" in text and "rows whose paper PPLs differ" in text
    # without replicas the report says nothing of noise
    assert report.report(out, plot=False)["noise"] is None
    # a row trained on other data is refused
    r["data_sha256"] = "0" * 64
    (noisy / "base@seed5" / "result.json").write_text(json.dumps(r))
    with pytest.raises(DataError, match="different data"):
        report.report(noisy, plot=False)
