"""The README's main job: ``trtllm-replayssm decode`` on its built-in default."""

import pytest

from trtllm_replayssm.cli import main


def test_decode_agrees(capsys):
    assert main(["decode", "--steps", "5", "--quiet", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "agree" in out and "yes" in out and "max rel. diff of outputs" in out


def test_decode_rejects_unknown_route():
    with pytest.raises(SystemExit):
        main(["decode", "--route", "fastest"])


def test_decode_gdn_agrees(capsys):
    assert main(["decode", "--model", "tiny-gdn", "--steps", "5", "--quiet", "--no-timing"]) == 0
    assert "tiny-gdn (gdn)" in capsys.readouterr().out


def test_decode_gdn_rejects_mamba2_only_route():
    with pytest.raises(SystemExit):
        main(["decode", "--model", "tiny-gdn", "--route", "state_and_output", "--steps", "1", "--quiet"])
