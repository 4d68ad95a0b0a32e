export MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 CT2_FORCE_CPU_ISA=AVX2 OMP_NUM_THREADS=2
cd /work/shared/bench/peers
for round in 1 2; do for r in /tmp/old-aiayn /work/main; do
  echo "== $r round $round"
  PYTHONPATH=$r /work/main/.venv/bin/python bench_infer.py --impl $r/benchmarks/peers/aiayn_int8.py --label int8-$(basename $r) --config base --beam 4 --dtype fp32 --threads 2 --max-seconds 30 2>&1 | grep '==>'
done; done
