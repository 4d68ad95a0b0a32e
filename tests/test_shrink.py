"""A student cut out of its teacher (aiayn.training.shrink): which layers it keeps, that its weights are exactly
those layers' and the teacher's embeddings, that a cut keeping every layer translates as the teacher does, and that
a cut which cannot be made is refused in one line."""

import pytest
import torch
from helpers import tiny_model

from aiayn.config import ModelConfig
from aiayn.errors import UsageError
from aiayn.model import Transformer
from aiayn.training import checkpoint as ckpt
from aiayn.training.shrink import kept_layers, parse_spec, shrunk_config, shrunk_state, write_shrunk


def test_kept_layers_spread_from_the_first_to_the_last():
    assert kept_layers(6, 1) == [0]
    assert kept_layers(6, 2) == [0, 5]
    assert kept_layers(12, 3) == [0, 6, 11]
    assert kept_layers(3, 3) == [0, 1, 2]
    with pytest.raises(UsageError):
        kept_layers(2, 3)


def test_parse_spec():
    assert parse_spec("teacher-6-1") == (6, 1) and parse_spec("teacher-12-2") == (12, 2)
    assert parse_spec("teacher-all-1") == (None, 1) and parse_spec("teacher-2-all") == (2, None)
    assert parse_spec("student-6-1") is None and parse_spec("teacher-6") is None and parse_spec("teacher-6-1x") is None
    assert parse_spec("teacher-All-1") is None and parse_spec("teacher-any-1") is None


def test_all_keeps_every_layer_of_that_stack():
    teacher = tiny_model(50, seed=1, n_enc_layers=3, n_dec_layers=2).cfg
    assert shrunk_config(teacher, None, 1, {}) == teacher.replace(n_dec_layers=1)
    assert shrunk_config(teacher, 1, None, {}) == teacher.replace(n_enc_layers=1)


def test_a_cut_too_deep_names_the_deepest_one():
    teacher = tiny_model(50, seed=1, n_enc_layers=3, n_dec_layers=1).cfg
    with pytest.raises(UsageError, match=r"decoder has 1 layer: .* not 2 \(at most --student teacher-all-1\)"):
        shrunk_config(teacher, None, 2, {})
    with pytest.raises(UsageError, match=r"encoder has 3 layers: .* not 4 \(at most --student teacher-3-all\)"):
        shrunk_config(teacher, 4, 1, {})


def test_the_student_holds_the_teachers_layers():
    teacher = tiny_model(50, seed=1, n_enc_layers=3, n_dec_layers=3)
    student_cfg = shrunk_config(teacher.cfg, 2, 1, {"dropout": 0.2})
    assert (student_cfg.n_enc_layers, student_cfg.n_dec_layers, student_cfg.dropout) == (2, 1, 0.2)
    assert student_cfg.replace(n_enc_layers=3, n_dec_layers=3, dropout=teacher.cfg.dropout) == teacher.cfg
    state = shrunk_state(teacher.state_dict(), teacher.cfg, student_cfg)
    student = Transformer(student_cfg)
    student.load_state_dict(state)  # strict: every tensor of the student, nothing else
    assert torch.equal(student.embedding.weight, teacher.embedding.weight)
    for got, want in [(student.encoder.layers[0], teacher.encoder.layers[0]),
                      (student.encoder.layers[1], teacher.encoder.layers[2]),
                      (student.decoder.layers[0], teacher.decoder.layers[0])]:
        pairs = zip(got.state_dict().items(), want.state_dict().items(), strict=True)
        assert all(a == b and torch.equal(x, y) for (a, x), (b, y) in pairs)


def test_a_cut_keeping_every_layer_is_the_teacher(tmp_path):
    teacher = tiny_model(50, seed=2)
    path = tmp_path / "teacher.safetensors"
    ckpt.save_weights(path, teacher.state_dict(), teacher.cfg)
    cfg = shrunk_config(teacher.cfg, teacher.cfg.n_enc_layers, teacher.cfg.n_dec_layers, {})
    state, saved_cfg, _ = ckpt.load_weights(write_shrunk(path, cfg, tmp_path / "student.safetensors"))
    assert saved_cfg == teacher.cfg
    assert state.keys() == teacher.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in teacher.state_dict().items())


def test_cuts_that_cannot_be_made_are_refused():
    teacher = ModelConfig.preset("tiny")  # 2+2 layers
    with pytest.raises(UsageError, match="teacher's encoder has 2 layers"):
        shrunk_config(teacher, 3, 1, {})
    with pytest.raises(UsageError, match="teacher's decoder has 2 layers"):
        shrunk_config(teacher, 1, 0, {})
    with pytest.raises(UsageError, match="may change only dropout, label_smoothing, not d_model"):
        shrunk_config(teacher, 1, 1, {"d_model": 64})
