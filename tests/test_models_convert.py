"""``codecue models convert``: option checks, the GPU requirement, and the orchestration around exllamav2's
converter (run here as a stand-in that writes what the real one writes: a full EXL2 model directory)."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch

from codecue.errors import BackendUnavailable, CodeCueError, ModelError


@pytest.fixture
def gpu_with_exllamav2(monkeypatch: pytest.MonkeyPatch) -> None:
    """As far as the converter checks can tell: CUDA works and exllamav2 is installed."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "exllamav2", types.ModuleType("exllamav2"))


class FakeConverter:
    """Records the command and writes an EXL2 directory to its ``-cf`` argument, like convert_exl2 does."""

    def __init__(self, returncode: int = 0, write: bool = True) -> None:
        self.commands: list[list[str]] = []
        self.returncode = returncode
        self.write = write

    def arg(self, flag: str) -> str:
        command = self.commands[-1]
        return command[command.index(flag) + 1]

    def __call__(self, command: list[str]) -> int:
        from safetensors.torch import save_file

        self.commands.append(command)
        source, out = Path(self.arg("-i")), Path(self.arg("-cf"))
        # What the converter was given (a view of the source may be gone once convert_to_exl2 returns).
        self.input_files = sorted(p.name for p in source.iterdir())
        self.input_config = json.loads((source / "config.json").read_text())
        self.input_weights = (source / "model.safetensors").resolve()
        assert Path(self.arg("-o")).is_dir()  # the working directory exists before the converter starts
        if self.write:
            out.mkdir(parents=True)
            config = json.loads((source / "config.json").read_text())
            config["quantization_config"] = {"quant_method": "exl2", "bits": float(self.arg("-b"))}
            (out / "config.json").write_text(json.dumps(config))
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(source / name, out / name)
            save_file({"model.layers.0.mlp.down_proj.q_weight": torch.zeros(4, 4, dtype=torch.int32),
                       "model.layers.0.mlp.down_proj.q_groups": torch.zeros(2, dtype=torch.int16)},
                      str(out / "output.safetensors"))
        return self.returncode


def resolve(path: Path):
    from codecue.models.resolve import resolve_model

    return resolve_model(str(path), "target")


# -- the command line ------------------------------------------------------------------------------------------


def test_convert_parses_next_to_the_other_actions(tmp_path) -> None:
    from codecue.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["models", "convert", "some/model", "--out", str(tmp_path / "exl2"), "--bits", "3.5"])
    assert (args.models_command, args.source, args.out, args.bits, args.head_bits) == (
        "convert", "some/model", tmp_path / "exl2", 3.5, 6)
    assert parser.parse_args(["models", "list", "--json"]).json
    assert parser.parse_args(["models", "pull", "--force", "x"]).names == ["x"]
    assert parser.parse_args(["models", "verify"]).models_command == "verify"
    with pytest.raises(SystemExit):
        parser.parse_args(["models", "convert", "some/model"])  # --out is required


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the CPU-only error path cannot be shown")
def test_convert_without_a_gpu_is_one_clear_line(tiny_dirs, tmp_path, capsys) -> None:
    from codecue.cli import main

    code = main(["models", "convert", str(tiny_dirs["target"]), "--out", str(tmp_path / "exl2")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, err
    assert "converting to EXL2 runs exllamav2's quantizer on a CUDA GPU" in lines[0]
    assert "pip install 'codecue[cuda]'" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "exl2").exists()


@pytest.mark.parametrize("argv, message", [
    (["--bits", "9"], "--bits 9.0 is out of range"),
    (["--bits", "1.5"], "--bits 1.5 is out of range"),
    (["--head-bits", "7"], "--head-bits 7 is not supported"),
])
def test_bad_options_are_refused_before_anything_else(tiny_dirs, tmp_path, capsys, argv, message) -> None:
    from codecue.cli import main

    code = main(["models", "convert", str(tiny_dirs["target"]), "--out", str(tmp_path / "exl2"), *argv])
    assert code == 1 and message in capsys.readouterr().err


def test_an_existing_output_directory_is_not_overwritten(tiny_dirs, tmp_path, capsys) -> None:
    from codecue.cli import main

    out = tmp_path / "exl2"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["models", "convert", str(tiny_dirs["target"]), "--out", str(out)]) == 1
    assert "already exists and is not an empty directory" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


def test_a_missing_source_is_named(gpu_with_exllamav2, tmp_path, capsys) -> None:
    from codecue.cli import main

    assert main(["models", "convert", str(tmp_path / "nope"), "--out", str(tmp_path / "exl2")]) == 1
    assert f"conversion source not found: {tmp_path / 'nope'}" in capsys.readouterr().err


# -- the orchestration ----------------------------------------------------------------------------------------------


def test_an_hf_directory_is_converted_into_place(gpu_with_exllamav2, tiny_dirs, tmp_path) -> None:
    from codecue.models.exl2 import convert_to_exl2

    converter = FakeConverter()
    out = tmp_path / "models" / "tiny-exl2"
    result = convert_to_exl2(resolve(tiny_dirs["target"]), out, bits=4.0, run_converter=converter)
    assert result == out.absolute()
    command = converter.commands[0]
    assert command[:3] == [sys.executable, "-m", "exllamav2.conversion.convert_exl2"]
    assert converter.input_files == sorted(p.name for p in tiny_dirs["target"].iterdir())
    assert converter.input_weights == (tiny_dirs["target"] / "model.safetensors").resolve()
    assert (converter.arg("-b"), converter.arg("-hb")) == ("4", "6")
    assert Path(converter.arg("-cf")) != out  # written under a temporary name, then renamed
    assert resolve(out).kind == "exl2"
    assert not Path(converter.arg("-o")).exists()  # the working directory is removed after success
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny-exl2"]


def test_the_converter_sees_rope_theta_where_exllamav2_reads_it(gpu_with_exllamav2, tiny_dirs, tmp_path) -> None:
    """transformers 5 writes rope_parameters.rope_theta only; exllamav2 reads rope_theta (else 10000)."""
    from codecue.models.exl2 import convert_to_exl2

    source = tmp_path / "qwen-like"
    shutil.copytree(tiny_dirs["target"], source)
    config = json.loads((source / "config.json").read_text())
    config.pop("rope_theta", None)
    config["rope_parameters"] = {"rope_theta": 1000000.0, "rope_type": "default"}
    (source / "config.json").write_text(json.dumps(config))
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    seen: dict = {}

    def converter(command: list[str]) -> int:
        given = Path(command[command.index("-i") + 1])
        seen["config"] = json.loads((given / "config.json").read_text())
        seen["weights"] = (given / "model.safetensors").read_bytes() == before["model.safetensors"]
        return FakeConverter()(command)

    out = convert_to_exl2(resolve(source), tmp_path / "exl2", run_converter=converter)
    assert seen["config"]["rope_theta"] == 1000000.0 and seen["weights"]
    assert json.loads((out / "config.json").read_text())["rope_theta"] == 1000000.0
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before  # the user's directory is untouched


def test_a_failed_conversion_keeps_the_work_dir_for_resuming(gpu_with_exllamav2, tiny_dirs, tmp_path) -> None:
    from codecue.models.exl2 import convert_to_exl2

    converter = FakeConverter(returncode=1)
    out = tmp_path / "tiny-exl2"
    with pytest.raises(ModelError, match="exit status 1") as info:
        convert_to_exl2(resolve(tiny_dirs["target"]), out, bits=4.0, run_converter=converter)
    work = Path(converter.arg("-o"))
    assert str(work) in str(info.value) and work.is_dir()
    assert not out.exists() and not Path(converter.arg("-cf")).exists()


def test_a_converter_that_exits_0_without_output_is_caught(gpu_with_exllamav2, tiny_dirs, tmp_path) -> None:
    from codecue.models.exl2 import convert_to_exl2

    # convert_exl2 prints " ## ..." and exits with status 0 on several errors.
    with pytest.raises(ModelError, match="left no usable model"):
        convert_to_exl2(resolve(tiny_dirs["target"]), tmp_path / "out", run_converter=FakeConverter(write=False))
    assert not (tmp_path / "out").exists()


def test_an_exl2_source_is_refused(gpu_with_exllamav2, tiny_dirs, tmp_path) -> None:
    from codecue.models.exl2 import convert_to_exl2

    first = convert_to_exl2(resolve(tiny_dirs["target"]), tmp_path / "a", run_converter=FakeConverter())
    with pytest.raises(CodeCueError, match="already an EXL2 model"):
        convert_to_exl2(resolve(first), tmp_path / "b", run_converter=FakeConverter())


def test_a_gguf_source_is_dequantized_to_an_hf_directory_first(gpu_with_exllamav2, tiny_dirs, tmp_path,
                                                               monkeypatch) -> None:
    from codecue.models.exl2 import convert_to_exl2
    from harness.tiny_gguf import convert_tiny_model_dir

    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    gguf = convert_tiny_model_dir(tiny_dirs["target"], tmp_path / "tiny.gguf")
    converter = FakeConverter()
    out = convert_to_exl2(resolve(gguf), tmp_path / "exl2", bits=5.0, run_converter=converter)
    hf_dir = converter.input_weights.parent
    assert hf_dir.is_relative_to(tmp_path / "cache" / "converted")  # the torch backend's dequantized cache
    config = converter.input_config
    assert "quantization_config" not in config  # no GGUF marker left: it is a plain FP16 HF model
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]  # where exllamav2 reads it
    assert config["num_hidden_layers"] == json.loads((tiny_dirs["target"] / "config.json").read_text())["num_hidden_layers"]
    assert (hf_dir / "tokenizer.json").is_file()  # the converter tokenizes its calibration text
    assert resolve(out).kind == "exl2"
    # A second conversion of the same file reuses the dequantized copy.
    mtime = (hf_dir / "config.json").stat().st_mtime_ns
    convert_to_exl2(resolve(gguf), tmp_path / "exl2-again", run_converter=FakeConverter())
    assert (hf_dir / "config.json").stat().st_mtime_ns == mtime


def test_the_library_call_checks_the_gpu_too(tiny_dirs, tmp_path, monkeypatch) -> None:
    from codecue.models.exl2 import convert_to_exl2

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    converter = FakeConverter()
    with pytest.raises(BackendUnavailable, match="CUDA"):
        convert_to_exl2(resolve(tiny_dirs["target"]), tmp_path / "out", run_converter=converter)
    assert converter.commands == []
