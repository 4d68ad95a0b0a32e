"""The decoding precisions of aiayn.decoding.inference (fp32, bf16, int8; prepacked or not), each against the model it
came from."""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import save_run, tiny_model
from torch import nn

from aiayn.config import ModelConfig
from aiayn.data import Vocab
from aiayn.decoding import inference
from aiayn.decoding.inference import DecodingTransformer, PrepackedLinear, decoding_copy
from aiayn.decoding.translator import Translator
from aiayn.errors import UsageError
from aiayn.model import Transformer


def test_decoding_copy_is_the_model_in_another_dtype():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).train()
    before = copy.deepcopy(model.state_dict())
    # same dtype, unpacked: the model's own tensors, in eval mode; the model itself keeps its mode
    same = decoding_copy(model, prepack=False)
    assert isinstance(same, DecodingTransformer) and (same.precision, same.prepacked) == ("fp32", False)
    assert not same.training and model.training
    assert all(a is b for a, b in zip(same.parameters(), model.parameters()))
    assert decoding_copy(same, prepack=False) is same
    low = decoding_copy(model, "bf16", prepack=False)
    assert low is not model and next(low.parameters()).dtype == torch.bfloat16 and not low.training
    for name, t in model.state_dict().items():  # the original is untouched
        assert t.dtype == torch.float32 and torch.equal(t, before[name])
        torch.testing.assert_close(low.state_dict()[name], t.bfloat16(), rtol=0, atol=0)
    assert decoding_copy(low, "bf16", prepack=False) is low



@pytest.mark.parametrize("precision,prepack", [("fp32", False), ("fp32", True), ("int8", None)])
@pytest.mark.parametrize("activation", ["relu", "swish"])
def test_decoding_copies_apply_relu_in_place_and_decode_as_the_model(precision, prepack, activation):
    """A decoding copy's feed-forward layers put max(0, x) on W1's product in place (torch.relu_: no second
    (rows, d_ff) tensor); swish (OPUS-MT's) is left as it is; the model passed in keeps its own; the copy's
    feed-forward equals the model's (int8: its own int8 projections with the out-of-place relu)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=40, activation=activation)).eval()
    q = decoding_copy(model, precision, prepack=prepack)
    own = F.relu if activation == "relu" else F.silu
    assert all(layer.ffn.activation is own for layer in model.encoder.layers)
    ffns = [layer.ffn for layer in [*q.encoder.layers, *q.decoder.layers]]
    assert all(f.activation is (torch.relu_ if activation == "relu" else F.silu) for f in ffns)
    x = torch.randn(3, 5, model.cfg.d_model)
    with torch.no_grad():
        for f, ref in zip(ffns, [layer.ffn for layer in [*model.encoder.layers, *model.decoder.layers]]):
            expected = f.w_2(own(f.w_1(x))) if precision == "int8" else ref(x)
            torch.testing.assert_close(f(x), expected, rtol=0, atol=1e-5 if prepack else 0)

def test_fp32_packs_its_weights_only_for_onednns_gemm(monkeypatch):
    # prepack=None (what `aiayn translate` passes): fp32 keeps the plain weights for MKL's GEMM, packs them for
    # oneDNN's (runtime.fp32_gemm, AIAYN_FP32_GEMM); bf16 packs them wherever oneDNN runs it, whatever fp32 uses.
    from aiayn import runtime
    from aiayn.decoding.inference import PrepackedLinear, _prepacking_works

    model = Transformer(ModelConfig.preset("tiny", vocab_size=40)).eval()
    monkeypatch.setenv("AIAYN_FP32_GEMM", "mkl")
    plain = decoding_copy(model)
    assert not plain.prepacked and any(isinstance(m, nn.Linear) for m in plain.modules())
    assert plain.output_projection is None
    monkeypatch.delenv("AIAYN_FP32_GEMM")  # an AMD CPU with AVX2 alone: small weights on MKL's, large on oneDNN's
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(runtime, "FP32_MKL_LARGEST", 32 * 32)  # tiny: attention 32 x 32 (MKL's), W1 32 x 64, 40 x 32
    if torch.backends.mkl.is_available() and _prepacking_works(torch.float32):
        mixed = decoding_copy(model)
        assert not mixed.prepacked and isinstance(mixed.output_projection.linear, PrepackedLinear)
        for layer in [*mixed.encoder.layers, *mixed.decoder.layers]:
            assert type(layer.ffn.w_1) is PrepackedLinear and type(layer.ffn.w_2) is PrepackedLinear
            assert type(layer.self_attn.w_q) is nn.Linear and type(layer.self_attn.w_o) is nn.Linear
        hidden = torch.randn(3, 5, model.cfg.d_model)
        with torch.no_grad():  # the same layers, the feed-forward's packed
            torch.testing.assert_close(mixed.decoder(hidden, hidden, None, None),
                                       plain.decoder(hidden, hidden, None, None), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mixed.output_logits(hidden), plain.output_logits(hidden), rtol=1e-5, atol=1e-5)
        doubled = 2 * plain.output_logits(hidden)  # (a load below writes into the tensors plain shares too)
        mixed.load_state_dict({k: v * 2 if k == "embedding.weight" else v for k, v in model.state_dict().items()})
        torch.testing.assert_close(mixed.output_logits(hidden), doubled, rtol=1e-5, atol=1e-4)  # packed again
        assert decoding_copy(model, prepack=False).output_projection is None  # asked for none: none
    monkeypatch.setenv("AIAYN_FP32_GEMM", "mkl")
    assert decoding_copy(model, "bf16").prepacked == _prepacking_works(torch.bfloat16)
    monkeypatch.setenv("AIAYN_FP32_GEMM", "onednn")
    assert decoding_copy(model).prepacked == _prepacking_works(torch.float32)
    monkeypatch.setenv("AIAYN_FP32_GEMM", "blas")
    with pytest.raises(UsageError, match="AIAYN_FP32_GEMM must be one of mkl, onednn, not 'blas'"):
        decoding_copy(model)


def skip_unless_prepacking_works(dtype: torch.dtype) -> None:
    from aiayn.decoding.inference import _prepacking_works

    if not _prepacking_works(dtype):
        pytest.skip(f"oneDNN's packed linear does not run in {dtype} with this torch build and CPU")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prepacked_linear_equals_linear(dtype):
    skip_unless_prepacking_works(dtype)
    torch.manual_seed(0)
    linear = nn.Linear(96, 200).to(dtype)
    packed = PrepackedLinear(linear.weight, linear.bias)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for x in (torch.randn(7, 96), torch.randn(3, 5, 96), torch.randn(5, 3, 96).transpose(0, 1)):  # 2-D, 3-D, strided
        x = x.to(dtype)
        with torch.no_grad():
            torch.testing.assert_close(packed(x), linear(x), **tol)
    no_bias = PrepackedLinear(linear.weight, None)
    with torch.no_grad():
        torch.testing.assert_close(no_bias(x), F.linear(x, linear.weight), **tol)


def _calls(model: DecodingTransformer) -> list:
    """Count the calls of the copy's own output projection (to see that it, not the tied F.linear, runs)."""
    calls, projection = [], model.output_projection
    model.output_projection = lambda hidden: calls.append(1) or projection(hidden)
    return calls


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_prepacked_copy_decodes_as_the_model(dtype):
    # Every projection packed, the tied output projection too (and it is the one that runs); logits and beam search
    # as the unpacked copy's; the model passed in untouched.
    from aiayn.decoding.search import SearchConfig, beam_search

    skip_unless_prepacking_works(torch.float32 if dtype == "fp32" else torch.bfloat16)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    before = copy.deepcopy(model.state_dict())
    q = decoding_copy(model, dtype, prepack=True)
    ref = decoding_copy(model, dtype, prepack=False)
    assert q is not model and q.prepacked and q.precision == dtype and decoding_copy(q, dtype, prepack=True) is q
    assert not any(isinstance(m, nn.Linear) for m in q.modules())
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == sum(
        isinstance(m, PrepackedLinear) for m in q.modules()) > 0
    calls = _calls(q)
    src = torch.randint(4, 60, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(q(src, tgt).float(), ref(src, tgt).float(), rtol=1e-4, atol=1e-4)
    assert calls
    search = SearchConfig(beam=4, max_len_a=0.0, max_len_b=6)
    assert [h[0].tokens for h in beam_search(q, src, search)] == [h[0].tokens for h in beam_search(ref, src, search)]
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name])
    assert isinstance(model.decoder.layers[0].ffn.w_1, nn.Linear)
    # It saves as the model it came from (what `aiayn serve` and the exporters read), and loads back.
    state = q.state_dict()
    assert state.keys() == model.state_dict().keys()
    for name, t in state.items():
        torch.testing.assert_close(t, ref.state_dict()[name], rtol=0, atol=0)
    other = decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)), dtype)
    other.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(other(src, tgt), q(src, tgt), rtol=0, atol=0)
    with torch.inference_mode():  # a model made under inference mode (as the peer harness makes its models)
        made = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
        made.load_state_dict(model.state_dict())
        torch.testing.assert_close(decoding_copy(made, dtype)(src, tgt), q(src, tgt), rtol=0, atol=0)


def test_int8_copy_follows_the_model():
    # Dynamic int8 projections (per output channel): logits close to fp32's, the same greedy output on a model whose
    # choices are clear-cut, the original untouched.
    from aiayn.decoding.search import SearchConfig, greedy_search

    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    before = copy.deepcopy(model.state_dict())
    q = decoding_copy(model, "int8")
    assert q is not model and q.precision == "int8" and decoding_copy(q, "int8") is q
    calls = _calls(q)  # the int8 tied projection is the one that runs
    src = torch.randint(4, 60, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        ref, low = model(src, tgt), q(src, tgt)
    assert (low - ref).abs().max() < 0.05 * ref.abs().max() and calls
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name])
    search = SearchConfig(beam=1, max_len_a=0.0, max_len_b=6)
    pairs = zip(greedy_search(model, src, search), greedy_search(q, src, search))
    agree = [a[0].tokens == b[0].tokens for a, b in pairs]
    assert sum(agree) >= 2


def test_int8_projections_call_torchs_operator_as_torchs_module_does(monkeypatch):
    # On torch's int8 engines every int8 projection, the tied output projection included, is the lean Int8Linear, and
    # it (and a shortlist's rows) returns what torch's own dynamic quantized Linear returns for the same packed
    # weights, to the bit.
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    monkeypatch.setenv("AIAYN_INT8_ENGINE", "fbgemm")
    torch.manual_seed(0)
    q = decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval(), "int8")
    projections = [m for m in q.modules() if isinstance(m, DynamicLinear)] + [q.output_projection.linear]
    assert projections and all(type(m).__name__ == "Int8Linear" for m in projections)
    x = torch.randn(5, 32)
    for m in projections[:3] + projections[-1:]:
        with torch.no_grad():
            assert torch.equal(m(x), DynamicLinear.forward(m, x))
    rows = q.output_projection.rows(torch.tensor([3, 7, 41]))  # a shortlist's: its packed rows, called alike
    torch_module = DynamicLinear(32, 3, dtype=torch.qint8)
    torch_module._packed_params._packed_params = rows.packed
    with torch.no_grad():
        assert torch.equal(rows(x), DynamicLinear.forward(torch_module, x))



@pytest.mark.parametrize("engine", ["fbgemm", "onednn"])
def test_int8_projections_are_what_torchs_dynamic_quantization_makes_packed_once(engine, monkeypatch):
    """Every int8 projection of a copy holds the int8 weights, scales and bias that torch.ao's DynamicLinear.from_float
    (per_channel_dynamic_qconfig) makes of the model's projection, and gives its outputs to the bit; each weight is
    packed once at its size (from_float packs an empty one first)."""
    import warnings

    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.nn.quantized.modules.linear import LinearPackedParams
    from torch.ao.quantization import per_channel_dynamic_qconfig

    from aiayn.runtime import int8_packing

    if engine not in torch.backends.quantized.supported_engines:
        pytest.skip(f"this torch build has no {engine}")
    monkeypatch.setenv("AIAYN_INT8_ENGINE", engine)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    packed = []
    pack = LinearPackedParams.set_weight_bias
    monkeypatch.setattr(LinearPackedParams, "set_weight_bias",
                        lambda self, w, b: (packed.append(w.shape), pack(self, w, b))[1])
    q = decoding_copy(model, "int8")
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert len([shape for shape in packed if shape.numel() > 1]) == len(linears) + 1  # + the tied output projection
    for name, m in linears:
        m.qconfig = per_channel_dynamic_qconfig
        with int8_packing(engine), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = DynamicLinear.from_float(m)
        mine = q.get_submodule(name)
        (w, b), (rw, rb) = mine._weight_bias(), ref._weight_bias()
        assert torch.equal(w.int_repr(), rw.int_repr())
        assert torch.equal(w.q_per_channel_scales(), rw.q_per_channel_scales())
        assert torch.equal(b, rb) and (mine.in_features, mine.out_features) == (m.in_features, m.out_features)
        x = torch.randn(4, m.in_features)
        with torch.no_grad():
            assert torch.equal(mine(x), ref(x))

def test_int8_projections_skip_the_search_for_torch_function_overrides(monkeypatch):
    # torch looks for __torch_function__ on every argument of an operator called from Python; on the packed weights (a
    # TorchScript object) that lookup raises and catches a C++ exception at every call. The lean Int8Linear calls the
    # operator with that machinery off: a torch function mode sees torch's own module's call, not the lean one's.
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    monkeypatch.setenv("AIAYN_INT8_ENGINE", "fbgemm")  # torch's engines (aiayn's calls no torch operator)
    q = decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval(), "int8")
    lean, x = q.output_projection.linear, torch.randn(2, 32)
    with torch.no_grad(), Seen() as torchs, torch.no_grad():
        expected = DynamicLinear.forward(lean, x)
    with torch.no_grad(), Seen() as ours:
        got = lean(x)
    assert any("linear_dynamic" in name for name in torchs.names)
    assert not any("linear_dynamic" in name for name in ours.names) and torch.equal(got, expected)


@pytest.mark.parametrize("precision, prepack", [("fp32", True), ("fp32", False), ("bf16", True), ("bf16", False),
                                             ("int8", None)])
def test_output_rows_are_the_output_projection_of_those_pieces(precision, prepack):
    # What a lexical shortlist (aiayn.decoding.shortlist) decodes with: in every format the rows of the tied projection
    # for the pieces asked, as the full projection computes them (int8: one scale per row, so the same int8 rows).
    if prepack:
        skip_unless_prepacking_works(torch.float32 if precision == "fp32" else torch.bfloat16)
    torch.manual_seed(0)
    q = decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval(), precision, prepack)
    ids = torch.tensor([0, 3, 7, 8, 41, 59])
    hidden = torch.randn(2, 3, 32).to(q.embedding.weight.dtype)
    tol = dict(rtol=1e-2, atol=1e-2) if precision == "bf16" else dict(rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(q.output_rows(ids)(hidden), q.output_logits(hidden)[..., ids], **tol)


def test_int8_rows_are_taken_from_the_full_matrix_as_quantizing_them_anew_would():
    """int8 output_rows select the full matrix's int8 rows and scales (quantized once), bit for bit the projection
    of those fp32 rows quantized anew (per-row scales), in any order of calls."""
    torch.manual_seed(0)
    q = decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval(), "int8")
    hidden = torch.randn(2, 3, 32)
    for ids in (torch.tensor([0, 3, 7, 8, 41, 59]), torch.arange(60), torch.tensor([1, 2])):
        anew = inference._Int8TiedProjection(q.embedding.weight.index_select(0, ids))
        with torch.no_grad():
            assert torch.equal(q.output_rows(ids)(hidden), anew(hidden))


@pytest.mark.parametrize("engine", ["fbgemm", "onednn", "aiayn"])
def test_int8_decoder_steps_project_q_k_v_in_one_gemm_with_the_same_bits(engine, monkeypatch):
    """int8: each decoder self-attention's W^Q, W^K, W^V stacked as one GEMM (inference._Int8Fused), packed for the
    engine of the decoder's projections, gives their three products to the bit (rows of one sentence and of many,
    a padding row of zeros among them), is stacked again after a load_state_dict (the loaded projections packed
    again for their engine: torch's current one may round otherwise, as oneDNN's and x86's do on a CPU with VNNI), and
    is what a search's written-out steps call, once a layer a step."""
    from aiayn import native
    from aiayn.decoding import step
    from aiayn.decoding.search import SearchConfig, beam_search

    if engine not in (*torch.backends.quantized.supported_engines, *["aiayn"] * native.int8_available()):
        pytest.skip(f"no {engine} int8 engine here")
    monkeypatch.setenv("AIAYN_INT8_ENGINE", engine)
    torch.manual_seed(0)
    q = decoding_copy(tiny_model(40, eos_bias=3.0), "int8")
    assert len(q.fused_qkv) == len(q.decoder.layers)
    for x in (torch.randn(1, 1, 32), torch.cat([torch.randn(6, 1, 32) * 3, torch.zeros(1, 1, 32)])):
        for layer, fused in zip(q.decoder.layers, q.fused_qkv):
            a = layer.self_attn
            assert torch.equal(fused(x), torch.cat([a.w_q(x), a.w_k(x), a.w_v(x)], dim=-1))
    other = decoding_copy(tiny_model(40, seed=1), "int8")
    q.load_state_dict(other.state_dict())
    x = torch.randn(5, 1, 32)
    for layer, fused, source in zip(q.decoder.layers, q.fused_qkv, other.decoder.layers):
        a = layer.self_attn
        assert torch.equal(fused(x), torch.cat([a.w_q(x), a.w_k(x), a.w_v(x)], dim=-1))
        assert torch.equal(a.w_q(x), source.self_attn.w_q(x))  # packed again for its engine, not torch's current one
    calls, steps = [], []
    monkeypatch.setattr(inference._Int8Fused, "__call__", lambda self, x: calls.append(x.size(0)) or self.projection(x))
    real_step = step.step
    monkeypatch.setattr(step, "step", lambda *args: steps.append(1) or real_step(*args))
    with torch.no_grad():
        beam_search(q, _sources(), SearchConfig(beam=3, max_len_b=8))
    assert steps and len(calls) == len(steps) * len(q.decoder.layers)


def test_precision_is_checked():
    with pytest.raises(UsageError, match="fp32, bf16, int8"):
        decoding_copy(Transformer(ModelConfig.preset("tiny", vocab_size=40)), "fp16")


@pytest.mark.parametrize("precision,prepack", [("fp32", True), ("fp32", False), ("int8", None)])
def test_a_consumed_model_gives_the_same_copy_and_its_weights_up(precision, prepack):
    # consume=True (what `aiayn translate` does with the model it loads): the same logits as a copy that leaves the
    # model alone, and the model's projections no longer hold weights of their own (freed as they were converted;
    # fp32 unpacked shares them instead, as it always does).
    if prepack:
        skip_unless_prepacking_works(torch.float32)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=60)).eval()
    kept = decoding_copy(model, precision, prepack)
    consumed = decoding_copy(model, precision, prepack, consume=True)
    src = torch.randint(4, 60, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, 60, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(consumed(src, tgt), kept(src, tgt), rtol=0, atol=0)
    if precision == "int8":
        assert consumed is model  # quantized in place, not copied
        assert not any(isinstance(m, nn.Linear) for m in model.modules())
    elif prepack:
        assert all(m.weight is None and m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
        assert consumed.embedding.weight is model.embedding.weight  # taken over, not copied
    else:
        assert consumed.decoder.layers[0].ffn.w_1.weight is model.decoder.layers[0].ffn.w_1.weight


@pytest.mark.parametrize("precision,prepack", [("fp32", False), ("fp32", None), ("bf16", False), ("int8", None)])
def test_load_converts_once_as_decoding_copy_does(copy_data, tmp_path, monkeypatch, precision, prepack):
    # inference.load gives the checkpoint's model in the format asked, the very copy decoding_copy makes of the fp32
    # model (bf16: the same rounding); Translator.load decodes with that model itself, once per ensemble member,
    # converting nothing again.
    if prepack is None and precision == "fp32":
        skip_unless_prepacking_works(torch.float32)
    vocab_file = copy_data / "vocab.model"
    n = len(Vocab.load(vocab_file))
    models = [tiny_model(n, seed=s) for s in (0, 1)]
    runs = [save_run(m, vocab_file, tmp_path / f"run{s}") for s, m in enumerate(models)]
    loaded, vocab = inference.load(runs[0], precision, prepack=prepack)
    want = decoding_copy(models[0], precision, prepack)
    assert isinstance(loaded, DecodingTransformer) and len(vocab) == n
    assert (loaded.precision, loaded.prepacked) == (want.precision, want.prepacked)
    if precision != "int8":
        for name, t in want.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], t), name
    src = torch.randint(4, n, (3, 7))
    src[:, -1] = 3
    tgt = torch.randint(4, n, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt), want(src, tgt), rtol=0, atol=0)

    made, conversions = [], []
    load, convert = inference.load, inference._decoding_copy
    monkeypatch.setattr(inference, "load", lambda *a, **k: made.append(load(*a, **k)[0]) or (made[-1], vocab))
    monkeypatch.setattr(inference, "_decoding_copy", lambda *a: conversions.append(type(a[0])) or convert(*a))
    one = Translator.load(runs[0], precision=precision, prepack=prepack)
    assert one.model is made[0]
    both = Translator.load(runs, precision=precision, prepack=prepack)
    assert list(both.model.members) == made[1:]
    # one conversion per loaded model; Translator() is handed decoding models, and keeps them as they are (above)
    assert conversions.count(Transformer) == len(made) == 3  # int8 converts in place: the type when called


def test_int8_copy_imports_no_symbolic_shapes():
    """Making the int8 copy imports nothing of torch.fx's symbolic shapes (nn.utils.skip_init's meta device did: ~1 s
    of a one-line `aiayn translate --precision int8`)."""
    import subprocess
    import sys

    code = ("import sys\nfrom aiayn.config import ModelConfig\nfrom aiayn.model import Transformer\n"
            "from aiayn.decoding.inference import decoding_copy\n"
            "decoding_copy(Transformer(ModelConfig.preset('tiny')).eval(), 'int8')\n"
            "print('torch.fx.experimental.symbolic_shapes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_int8_tied_projection_warns_nothing():
    """An int8 projection (and a shortlist's rows of it) is built without torch's warnings reaching the user."""
    import warnings

    from aiayn.decoding.inference import _Int8TiedProjection

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        projection = _Int8TiedProjection(torch.randn(10, 4))
        rows = projection.rows(torch.tensor([1, 3]))
    assert rows(torch.randn(2, 4)).shape == (2, 2)


def _sources(n_sentences: int = 6, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    """(B, S) source ids of several lengths, each ending with EOS, padded with PAD."""
    from aiayn.config import EOS_ID, PAD_ID

    g = torch.Generator().manual_seed(seed)
    lens = [7, 3, 9, 5, 1, 6][:n_sentences]
    src = torch.full((len(lens), max(lens)), PAD_ID)
    for i, n in enumerate(lens):
        src[i, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[i, n - 1] = EOS_ID
    return src


@pytest.mark.parametrize("precision,prepack", [("fp32", False), ("fp32", True), ("int8", None), ("bf16", False),
                                              ("bf16", True)])
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "swish")])
def test_a_step_written_out_decodes_as_the_modules_do(precision, prepack, norm_first, activation, monkeypatch):
    """aiayn.decoding.step: greedy, beam and n-best search of a decoding copy (post- and pre-norm, ReLU and swish,
    fp32 and bf16 plain or packed, int8) give the same words, scores and token log-probs to the bit with every step
    after the first written out as through the decoder's modules; the written-out step is taken at every later
    step. Its attention as the modules', torch's (aiayn.native's kernels: tests/test_native.py)."""
    from aiayn import native
    from aiayn.decoding import step
    from aiayn.decoding.search import SearchConfig, beam_search, greedy_search

    if prepack:
        skip_unless_prepacking_works(torch.bfloat16 if precision == "bf16" else torch.float32)
    model = tiny_model(40, eos_bias=3.0, norm_first=norm_first, activation=activation)
    q, src = decoding_copy(model, precision, prepack=prepack), _sources()
    searches = [(greedy_search, SearchConfig(beam=1, max_len_b=8)), (beam_search, SearchConfig(beam=3, max_len_b=8)),
                (beam_search, SearchConfig(beam=4, nbest=3, max_len_b=8, beam_patience=1.0))]
    taken, takes = [], step.takes
    monkeypatch.setattr(step, "takes", lambda *args: taken.append(takes(*args)) or taken[-1])
    monkeypatch.setitem(native._state, "enabled", False)
    with torch.no_grad():
        written_out = [search(q, src, config) for search, config in searches]
        assert taken.count(False) == len(searches) and taken.count(True) > 10 * len(searches)  # all but first steps
        monkeypatch.setattr(step, "takes", lambda *args: False)
        through_modules = [search(q, src, config) for search, config in searches]
    for a, b in zip(written_out, through_modules):
        assert [[(h.tokens, h.score, h.positional_scores) for h in s] for s in a] == [
            [(h.tokens, h.score, h.positional_scores) for h in s] for s in b]
    assert len({len(s[0].tokens) for s in written_out[1]}) > 1  # lengths vary: sentences left the batch


@pytest.mark.parametrize("precision,prepack", [("fp32", False), ("fp32", True), ("int8", None)])
def test_a_step_reads_the_weights_a_load_state_dict_gives(precision, prepack, monkeypatch):
    """The written-out step's view of the model (step._plan: projections with their weights bound, prepacked and
    int8 ones included) is made again after a load_state_dict: a search then finds what the modules find with the
    loaded weights, not the old ones."""
    from aiayn import native
    from aiayn.decoding import step
    from aiayn.decoding.search import SearchConfig, beam_search

    if prepack:
        skip_unless_prepacking_works(torch.float32)
    monkeypatch.setitem(native._state, "enabled", False)
    q, other = (decoding_copy(tiny_model(40, seed=seed, eos_bias=3.0), precision, prepack=prepack) for seed in (0, 1))
    src, config = _sources(), SearchConfig(beam=3, max_len_b=8)

    def words(model):
        return [[(h.tokens, h.score) for h in s] for s in beam_search(model, src, config)]

    with torch.no_grad():
        before = words(q)
        assert "_step_plan" in q.__dict__
        q.load_state_dict(other.state_dict())
        loaded = words(q)
        monkeypatch.setattr(step, "takes", lambda *args: False)
        assert loaded == words(q) == words(other) != before


def test_a_step_is_written_out_only_where_it_is_the_modules_own():
    """step.takes: not for a recorder of the attention weights (aiayn.decoding.attention.recording), several new
    positions, an unprimed cache, training mode, autocast; for fp32, bf16 and int8 copies otherwise."""
    from aiayn.config import PAD_ID
    from aiayn.decoding import step
    from aiayn.decoding.attention import recording

    model = tiny_model(40)
    src, tgt = _sources(3), torch.full((3, 1), 2)
    for precision in ("fp32", "int8", "bf16"):
        q = decoding_copy(model, precision, prepack=False)
        cache = q.new_cache()
        with torch.no_grad():
            memory = q.encode(src)
            assert not step.takes(q, tgt, cache)  # nothing cached yet: the modules run the first step
            q.decode(tgt, memory, src.eq(PAD_ID), cache)
            assert step.takes(q, tgt, cache)
            assert not step.takes(q, tgt.repeat(1, 2), cache)
            with recording(q):
                assert not step.takes(q, tgt, cache)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert not step.takes(q, tgt, cache)
            assert not step.takes(q.train(), tgt, cache)
            q.eval()
