"""Table 3 of the paper (model variations), regenerated: every row trained with everything else equal, scored the
paper's way, set beside the paper's numbers. `aiayn variations` runs it.

    rows.py     ROWS, paper_row(name)      the 20 rows (base, A1..A4, B1, B2, C1..C7, D1..D4, E, big) and their
                                           published PPL / BLEU / params (aiayn.experiments.paper.TABLE3)
                scaled_preset(name, K)     a row shrunk K times: d_model, d_ff, d_k, d_v divided by K; N, h, P_drop,
                                           eps_ls and positions as the row says, so the rows keep their differences
                row_of, replica_seed       "base@seed2": a replica, base trained again at seed 2 (the run's noise)
    plan.py     make_plan(out, ...)        OUT/plan.json: data, scale, steps, training options, the same for every
                                           row; a later call must agree. OUT's layout
    score.py    train_row, score_row       one row trained (or resumed) to a step, then scored
    runner.py   train_variations(...)      every row -> OUT/<row>/result.json, then `report`; --jobs, --minutes
    report.py   report(out), spearman      the markdown table in the paper's layout (ours beside the paper's), the
                                           plot of our PPL against the paper's, Spearman's rank correlation; with
                                           replicas, the seed noise and rho over the rows it can resolve

The protocol (the paper's Table 3): EN-DE newstest2013 dev, perplexity per subword token, BLEU with beam search
(beam 4, alpha 0.6), no checkpoint averaging. Here every row trains the same number of steps (the paper's 100K for
all but big, 300K for big: we give big the same steps as the others) on the data given, from the same seed; the
last checkpoint is scored: dev perplexity exp(NLL per target token, EOS included) in fp32, and sacreBLEU of the
beam-search translations of the dev sources (of the first N of them with --dev-sentences N, for a quick check:
an untrained row's translations run to the length limit, so decoding dominates a short run).

Layout of OUT (one folder per row, so rows trained on several machines merge by copying folders):

    OUT/plan.json            data, scale, steps, dev sentences, training options: the same for every row
    OUT/<row>/run/           the row's run directory (`aiayn train --resume OUT/<row>/run` continues it exactly);
                             its checkpoints are deleted once the row is scored, unless keep_checkpoints
    OUT/<row>/result.json    written last: its presence marks the row finished (it is then skipped)
    OUT/<row>/time.json      the row's training time, summed over the calls that trained it
    OUT/<row>/dev.hyp        the dev translations that were scored
    OUT/<row>/worker.log     the row's training output (rows trained as subprocesses)
    OUT/<row>@seed<N>/       a replica's folder, laid out as a row's
    OUT/table3.md, OUT/table3.png, OUT/summary.json   `report`'s outputs

`--jobs N` trains N rows at once as subprocesses (`aiayn variations --worker ROW ...`), for a GPU or a many-core
machine; larger rows start first. `--minutes M` instead of `--steps N` first trains every row a few steps
(CALIBRATION_STEPS) at that concurrency, measures its seconds per step, and picks the one step count that fits all
rows into about M minutes of training (scoring comes on top); the calibration steps are kept, not wasted, since the
schedule does not depend on the step limit and a run resumes exactly.
"""
