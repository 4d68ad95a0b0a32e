"""aiayn side by side with fairseq, HF Marian, OpenNMT and CTranslate2 through the shared harness
(../shared/bench/peers)."""
