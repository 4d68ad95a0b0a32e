#!/bin/bash
# The parser's levers on the dev trees: each run's average of its last 5 checkpoints, its last checkpoint, and the
# two averages decoded as one ensemble; beam 21 (alpha 0.3, the paper's) unless said. One thread.
#   R=runs/parse-seeds P=../shared/data/ptb-sample D=data-bin/ptbw2k bash benchmarks/e2e/parse_eval.sh
# R: the folder with the two runs s1/ and s2/ (configs/ptb-parse.yaml, seeds 1 and 2); P: the treebank sample (its
# dev.trees is the reference); D: the prepared data (aiayn prepare-parse --leaves words).
set -euo pipefail
R=${R:-runs/parse-seeds}; P=${P:-../shared/data/ptb-sample}; D=${D:-data-bin/ptbw2k}
export OMP_NUM_THREADS=1
for s in 1 2; do
  [ -f $R/s$s/avg5.safetensors ] || aiayn average --run $R/s$s --last 5 --out $R/s$s/avg5.safetensors
done
score() {  # name, parse args...
  local name=$1; shift
  local t0=$(date +%s.%N)
  aiayn parse "$@" --input $D/valid.src.txt --output $R/dev-$name.trees --no-progress
  local t1=$(date +%s.%N)
  echo "== $name ($(python -c "print(f'{$t1-$t0:.0f}')") s to decode): aiayn parse $*"
  aiayn evaluate --task parse --hyp $R/dev-$name.trees --ref $P/dev.trees | grep -iE 'F1|fmeasure|recall|precision|complete' | head -6
}
score s1-avg5 --checkpoint $R/s1/avg5.safetensors
score s2-avg5 --checkpoint $R/s2/avg5.safetensors
score ens-avg5 --checkpoint $R/s1/avg5.safetensors $R/s2/avg5.safetensors
score s1-last --checkpoint $(ls $R/s1/checkpoints/step_*.safetensors | tail -1)
score ens-avg5-beam4 --checkpoint $R/s1/avg5.safetensors $R/s2/avg5.safetensors --beam 4
score ens-avg5-alpha0.6 --checkpoint $R/s1/avg5.safetensors $R/s2/avg5.safetensors --alpha 0.6
score ens-avg5-alpha0 --checkpoint $R/s1/avg5.safetensors $R/s2/avg5.safetensors --alpha 0
