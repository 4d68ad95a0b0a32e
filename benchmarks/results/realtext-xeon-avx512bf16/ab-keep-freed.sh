# In process, interleaved: the process settings `aiayn` applies (freed memory kept) against a bare Python process.
# RUN: the quickstart model, SRC its 879 test verses; STUDENT/SSRC: the Multi30k teacher-3-2 student, test2016.
for round in 1 2 3 4; do for bare in "" --bare-process; do
  for cell in "$RUN $SRC fp32 4" "$RUN $SRC int8 4" "$STUDENT $SSRC int8 1"; do set -- $cell
    echo "round $round ${bare:-aiayn} $1 $3 beam $4 $(OMP_NUM_THREADS=1 taskset -c 0 python -m \
      benchmarks.e2e.realtext inprocess --run $1 --src $2 --output /tmp/o.txt --precision $3 --beam $4 $bare \
      | tail -1) $(md5sum < /tmp/o.txt | cut -c1-8)"
done; done; done
