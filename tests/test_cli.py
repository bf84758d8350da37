"""The README's main job (``trtllm-replayssm e2e``) and the kernel-level ``decode`` command."""

import pytest
import torch

from trtllm_replayssm.cli import main


def test_decode_agrees(capsys):
    assert main(["decode", "--steps", "5", "--quiet", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "agree" in out and "yes" in out and "max rel. diff of outputs" in out


def test_decode_rejects_unknown_route():
    with pytest.raises(SystemExit):
        main(["decode", "--route", "fastest"])


@pytest.mark.parametrize("argv", [["decode", "--batch", "0"], ["decode", "--buffer-len", "-4"], ["e2e", "--steps", "0"],
                                  ["memory", "--model", "qwen3.5-4b", "--max-batch", "-1"],
                                  ["memory", "--model", "qwen3.5-4b", "--max-batch", "8", "--spec-tokens", "0"]])
def test_sizes_below_one_are_usage_errors(argv, capsys):
    """A size of 0 had meant the default (decode ran at batch 3) and a negative one printed
    negative bytes or a traceback; argparse now refuses both before anything runs."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and "must be >= 1" in capsys.readouterr().err


def test_memory_names_what_is_wrong_with_a_model(tmp_path):
    """An unknown name or a broken config.json ends the command with its message, not a
    traceback."""
    (tmp_path / "config.json").write_text('{"mamba_num_heads": 8}')
    with pytest.raises(SystemExit, match="memory: error: .*config.json: a Mamba2 hybrid config needs mamba_head_dim"):
        main(["memory", "--model", str(tmp_path), "--max-batch", "8"])
    with pytest.raises(SystemExit, match="memory: error: unknown model 'nope'"):
        main(["memory", "--model", "nope", "--max-batch", "8"])


def test_decode_gdn_agrees(capsys):
    assert main(["decode", "--model", "tiny-gdn", "--steps", "5", "--quiet", "--no-timing"]) == 0
    assert "tiny-gdn (gdn)" in capsys.readouterr().out


def test_decode_gdn_rejects_mamba2_only_route():
    with pytest.raises(SystemExit):
        main(["decode", "--model", "tiny-gdn", "--route", "state_and_output", "--steps", "1", "--quiet"])


def test_e2e_main_job_tokens_identical(capsys):
    """The README's main job: a whole hybrid model, standard vs ReplaySSM (CPU: a tiny one
    whose greedy tokens must be identical; GPU: Nemotron-3-Nano-4B, logits compared in fp32,
    timed in bf16)."""
    assert main(["e2e", "--quiet"]) == 0
    out = capsys.readouterr().out
    if torch.cuda.is_available():
        assert "logits agree in fp32: True" in out and "speedup" in out
    else:
        assert "identical greedy tokens over 14 steps (3 ring cycles): True" in out


def test_e2e_gdn_model(capsys):
    assert main(["e2e", "--model", "tiny-hybrid-gdn", "--steps", "6", "--quiet"]) == 0
    assert ": True" in capsys.readouterr().out
